"""tree (after METR's search over kernels): each step refines one earlier kernel, drawn with
probability proportional to its weight: a correct kernel weighs its speedup (reference ms / candidate
ms), a failed one FAILED_WEIGHT, and the task itself (a fresh answer) ROOT_WEIGHT, as if the reference
were a kernel of speedup 1. The draws come from a generator seeded with (`SolveConfig.seed`, problem,
sample), so a resumed trajectory draws the same parents. `SolveConfig.turns` steps, one model call each."""

from __future__ import annotations

import random
from typing import Any

from kb_agent.agent.strategies.nodes import Node, Tree
from kb_agent.problems import Problem

ROOT_WEIGHT = 1.0
FAILED_WEIGHT = 0.1
MIN_CORRECT_WEIGHT = 0.01  # a correct but very slow kernel can still be drawn


def weight(node: Node) -> float:
    """How likely `node` is drawn, relative to the task's ROOT_WEIGHT."""
    if node.status == "correct":
        return max(node.speedup or 0.0, MIN_CORRECT_WEIGHT)
    return FAILED_WEIGHT


def draw(rng: random.Random, nodes: list[Node]) -> int:
    """A parent index (0: the task prompt) drawn from `nodes` by `weight`."""
    choices = [0, *(n.idx for n in nodes)]
    weights = [ROOT_WEIGHT, *(weight(n) for n in nodes)]
    return rng.choices(choices, weights=weights)[0]


def tree(ctx: Any, traj_id: int, problem: Problem, sample: int) -> str:
    """Run (or continue) one tree-search trajectory; return its outcome (`turn_budget` after every step)."""
    rng = random.Random(f"{ctx.config.seed}:{problem.key}:{sample}")
    t = Tree(ctx, traj_id, problem, sample)
    for _ in range(ctx.config.turns):
        parent = draw(rng, sorted(t.nodes.values(), key=lambda n: n.idx)) if t.nodes else 0
        got = t.grow([parent])
        if isinstance(got, str):
            return got
    return "turn_budget"


__all__ = ["FAILED_WEIGHT", "MIN_CORRECT_WEIGHT", "ROOT_WEIGHT", "draw", "tree", "weight"]
