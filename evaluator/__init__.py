"""The evaluator: build, run, check and time one candidate against its reference, in an isolated child
process. Knows nothing about LLMs, prompts or the database; importing it does not import torch.
"""

import dataclasses
from typing import Protocol

from kb_agent.evaluator.result import (
    SCHEMA_VERSION,
    CompileInfo,
    CorrectnessInfo,
    EvalResult,
    HardwareInfo,
    KernelRow,
    ProfileInfo,
    Status,
    TimingInfo,
    TimingStats,
    TrialResult,
)
from kb_agent.evaluator.settings import BACKENDS, PRECISIONS, TOLERANCES, EvalSettings, StageLimits
from kb_agent.problems import Problem


class Evaluator(Protocol):
    """What the agent loop needs from an evaluator. One that also has `retime(problem, source)` (as
    `LocalEvaluator` does) gets each trajectory's best turn re-timed in a fresh process when it ends."""

    def evaluate(self, problem: Problem, candidate_source: str) -> EvalResult: ...


def evaluate(problem: Problem, candidate_source: str, settings: EvalSettings | None = None) -> EvalResult:
    """Evaluate one candidate in a fresh, isolated child process. See `evaluator.runner.evaluate`."""
    from kb_agent.evaluator.runner import evaluate as _evaluate

    return _evaluate(problem, candidate_source, settings or EvalSettings())


def retime(problem: Problem, candidate_source: str, settings: EvalSettings | None = None) -> EvalResult:
    """Re-time a candidate already found correct (a trajectory's best turn, against the winner's curse) in a
    fresh, isolated child, with the reproducible figure on.

    The whole evaluation runs again under `settings` (default `EvalSettings()`), with `repro_timing=True`
    (and `ncu=False`: a re-timing shows no feedback):
    build (an identical source reuses its cached build), correctness trials and strict checks, so a
    candidate that is no longer correct gets its honest status, not a speed. Returns that `EvalResult`:
    `result.timing.repro_speedup` is the re-timed figure (reference ms / candidate ms, median over
    interleaved pairs), `result.timing.repro_ci95` its 95 % interval [lo, hi], `result.timing.repro_method`
    the protocol; `result.speedup` is this run's KernelBench-parity figure. Use the figures only when
    `result.status` is `Status.CORRECT`.

    Raises:
        ValueError: `settings` are invalid (as `EvalSettings` raises).
    """
    s = dataclasses.replace(settings or EvalSettings(), repro_timing=True, ncu=False)  # no feedback to show
    return evaluate(problem, candidate_source, s)


class LocalEvaluator:
    """The real evaluator bound to one `EvalSettings`: `LocalEvaluator(settings).evaluate(problem, src)`."""

    def __init__(self, settings: EvalSettings | None = None):
        self.settings = settings or EvalSettings()

    def evaluate(self, problem: Problem, candidate_source: str) -> EvalResult:
        return evaluate(problem, candidate_source, self.settings)

    def retime(self, problem: Problem, candidate_source: str) -> EvalResult:
        """`retime` under these settings: a fresh evaluation with the reproducible figure on."""
        return retime(problem, candidate_source, self.settings)


__all__ = [
    "BACKENDS",
    "PRECISIONS",
    "SCHEMA_VERSION",
    "TOLERANCES",
    "CompileInfo",
    "CorrectnessInfo",
    "EvalResult",
    "EvalSettings",
    "Evaluator",
    "HardwareInfo",
    "KernelRow",
    "LocalEvaluator",
    "ProfileInfo",
    "StageLimits",
    "Status",
    "TimingInfo",
    "TimingStats",
    "TrialResult",
    "evaluate",
    "retime",
]
