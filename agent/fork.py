"""Forks: a new run whose trajectories copy turns 1..K-1 of a stored run exactly and continue from turn
K with new settings (model, feedback recipe, temperature, context policy), so "does this feedback help
from turn 3 on?" is an experiment with a controlled prefix.

    from kb_agent.agent import job
    job.fork("baseline-run", 3, feedback="full", run_name="ncu-from-3")

`job.fork` makes the run (its config records `forked_from`) with the source's problems and samples;
the loop calls `copy_prefix` when a trajectory of it starts with no turns, so a fork killed at any point
is continued by `solve --resume` like any run, and a copied turn is never asked of the model nor
evaluated again. The copied turns keep their prompts, replies, evaluations, tokens and cost
(`turns.copied_from` names the source turn; the report counts them apart from model calls). Only the
last copied turn's feedback changes, when the recipe does: it is rendered again under the new recipe
from the same stored evaluation (components whose data that evaluation did not collect, such as a
profile it did not take, are left out), since it is what turn K sees.
"""

from __future__ import annotations

import logging
from typing import Any

from kb_agent.agent.feedback import feedback_for
from kb_agent.evaluator.result import EvalResult
from kb_agent.problems import Problem

log = logging.getLogger(__name__)


def copy_prefix(store: Any, config: Any, traj_id: int, problem: Problem, sample: int) -> int:
    """Copy into trajectory `traj_id` (of a fork: `config.forked_from` set) the source run's finished
    turns 1..K-1 of the same problem and sample, in one transaction; return how many were copied (0 when
    the trajectory already has turns, or the source has no such trajectory)."""
    src = config.forked_from
    if store.turns(traj_id):
        return 0
    source = next((t for t in store.trajectories(src["run"])
                   if t["problem_key"] == problem.key and t["sample"] == sample), None)  # fmt: skip
    if source is None:
        return 0
    from kb_agent.agent.loop import _evaluated_prefix

    done = _evaluated_prefix(store.turns(source["id"]))[: src["turn"] - 1]
    if not done:
        return 0
    last, feedback = done[-1], {}
    if src.get("feedback") != config.feedback:
        er = EvalResult.from_dict(last["eval_json"]) if last["eval_json"] else None
        repeated = (
            er is not None and er.reused is not None and any(t["code"] == last["code"] for t in done[:-1])
        )
        feedback[last["idx"]] = feedback_for(er, no_code=er is None, truncated=last["finish_reason"] == "length",
                                             recipe=config.feedback, repeated=repeated)  # fmt: skip
    n = store.copy_turns(source["id"], traj_id, last["idx"], feedback)
    log.info("%s sample %d: copied turns 1..%d of run %s", problem.key, sample, last["idx"], src["name"])
    return n


__all__ = ["copy_prefix"]
