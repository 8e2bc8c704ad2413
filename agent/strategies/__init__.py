"""Search strategies beside the linear loop (issue 16): which node of a trajectory's tree of turns to
extend next, and how many completions to ask for.

    linear     agent.loop's own loop (not here): one chain, each turn continues the last
    best-of-n  `best_of_n`: N completions per turn from the same conversation, evaluated at once; the
               best correct one (else the most informative failure) carries the conversation on
    beam       `beam`: the W best kernels so far, each refined into B children per round
    tree       `tree`: METR-style; each step refines an earlier kernel drawn with probability rising
               with its speedup (seeded)

Each strategy is a function `(ctx, traj_id, problem, sample) -> outcome` over `nodes.Tree`, which asks
the model, evaluates through the pool and stores each node with its parent; a stored node is never
asked again, so a resumed trajectory replays the same decisions from its stored results and asks only
for what it lacks. `SolveConfig.turns` is the number of rounds (best-of-n, beam) or steps (tree).
"""

from kb_agent.agent.strategies.beam import beam
from kb_agent.agent.strategies.best_of_n import best_of_n
from kb_agent.agent.strategies.nodes import Node, Tree, rank_key
from kb_agent.agent.strategies.tree import tree

STRATEGIES = {"best-of-n": best_of_n, "beam": beam, "tree": tree}
"""The strategies other than `linear` (which is `agent.loop`'s own), by `SolveConfig.strategy` name."""

__all__ = ["STRATEGIES", "Node", "Tree", "beam", "best_of_n", "rank_key", "tree"]
