"""The evaluator: build, run, check and time one candidate against its reference, in an isolated child
process. Knows nothing about LLMs, prompts or the database; importing it does not import torch.
"""

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
    """What the agent loop needs from an evaluator."""

    def evaluate(self, problem: Problem, candidate_source: str) -> EvalResult: ...


def evaluate(problem: Problem, candidate_source: str, settings: EvalSettings | None = None) -> EvalResult:
    """Evaluate one candidate in a fresh, isolated child process. See `evaluator.runner.evaluate`."""
    from kb_agent.evaluator.runner import evaluate as _evaluate

    return _evaluate(problem, candidate_source, settings or EvalSettings())


class LocalEvaluator:
    """The real evaluator bound to one `EvalSettings`: `LocalEvaluator(settings).evaluate(problem, src)`."""

    def __init__(self, settings: EvalSettings | None = None):
        self.settings = settings or EvalSettings()

    def evaluate(self, problem: Problem, candidate_source: str) -> EvalResult:
        return evaluate(problem, candidate_source, self.settings)


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
]
