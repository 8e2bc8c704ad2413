"""A scripted evaluator for tests, docs and dry runs of the agent loop: returns canned results in order."""

from __future__ import annotations

from collections.abc import Iterable

from kb_agent.evaluator.result import EvalResult, Status
from kb_agent.problems import Problem


class ScriptedEvaluator:
    """Implements the `Evaluator` protocol by replaying `results` one per call (the last one repeats).

    `calls` records (problem key, candidate source) for each call.
    """

    def __init__(self, results: Iterable[EvalResult]):
        self.results = list(results)
        if not self.results:
            raise ValueError("ScriptedEvaluator needs at least one result")
        self.calls: list[tuple[str, str]] = []

    def evaluate(self, problem: Problem, candidate_source: str) -> EvalResult:
        self.calls.append((problem.key, candidate_source))
        r = self.results[min(len(self.calls), len(self.results)) - 1]
        return EvalResult.from_dict(r.to_dict())  # a copy, so callers may mutate it


def canned(status: Status | str, speedup: float | None = None, message: str = "") -> EvalResult:
    """A minimal result: `canned("correct", 1.7)` has runtime 1.0 ms against a 1.7 ms reference."""
    status = Status(status)
    r = EvalResult(status=status, message=message or f"canned {status}")
    if status == Status.CORRECT and speedup:
        r.speedup, r.runtime_ms, r.ref_runtime_ms = speedup, 1.0, speedup
    return r
