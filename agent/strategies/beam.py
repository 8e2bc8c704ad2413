"""beam: keep the W best kernels so far (`nodes.rank_key` over every node of the tree), refine each into
B children per round. The first round fills the beam with W x B answers to the task prompt, so every
round asks W x B completions: `SolveConfig.turns` x width x branch model calls in all."""

from __future__ import annotations

from typing import Any

from kb_agent.agent.strategies.nodes import Tree, rank_key
from kb_agent.problems import Problem


def beam(ctx: Any, traj_id: int, problem: Problem, sample: int) -> str:
    """Run (or continue) one beam-search trajectory; return its outcome (`turn_budget` when every round ran)."""
    cfg = ctx.config
    tree = Tree(ctx, traj_id, problem, sample)
    parents = [0] * (cfg.width * cfg.branch)
    for _ in range(cfg.turns):
        got = tree.grow(parents)
        if isinstance(got, str):
            return got
        kept = sorted(tree.nodes.values(), key=rank_key)[: cfg.width]
        parents = [n.idx for n in kept for _ in range(cfg.branch)]
    return "turn_budget"
