"""best-of-n: each turn asks for N completions of the same conversation and evaluates them at once;
the best correct one (the fastest), else the most informative failure (`nodes.rank_key`), carries the
conversation on. `SolveConfig.turns` rounds, `SolveConfig.n` completions each: turns x n model calls."""

from __future__ import annotations

from typing import Any

from kb_agent.agent.strategies.nodes import Tree, rank_key
from kb_agent.problems import Problem


def best_of_n(ctx: Any, traj_id: int, problem: Problem, sample: int) -> str:
    """Run (or continue) one best-of-n trajectory; return its outcome (`turn_budget` when every round ran)."""
    tree = Tree(ctx, traj_id, problem, sample)
    parent = 0
    for _ in range(ctx.config.turns):
        got = tree.grow([parent] * ctx.config.n)
        if isinstance(got, str):
            return got
        parent = min(got, key=rank_key).idx
    return "turn_budget"
