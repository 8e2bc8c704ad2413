"""The parity figures sealed as measured (`stages.timing.seal`) against the final timing record, in the
parent (`runner._absorb`): a rewrite in the child after the seal fails `tampering`."""

import dataclasses

from kb_agent.evaluator.result import EvalResult, Status, TimingInfo, TimingStats
from kb_agent.evaluator.runner import _absorber


def _stats(mean: float) -> TimingStats:
    return TimingStats(mean_ms=mean, median_ms=mean, std_ms=float("nan"), min_ms=mean, max_ms=mean, trials=1)


def _run(sealed: list[tuple[str, TimingStats]], record: dict[str, TimingStats]) -> dict:
    result = EvalResult(status=Status.RUNTIME_ERROR)
    absorb = _absorber(result, "run")
    for model, stats in sealed:
        absorb({"event": "sealed", "model": model, "stats": dataclasses.asdict(stats)})
    absorb({"event": "timing", "timing": dataclasses.asdict(TimingInfo(**record))})
    absorb(
        {
            "event": "strict",
            "strict": {"enabled": True, "checks": {"tampering": {"passed": True, "detail": ""}}},
        }
    )
    return result.strict["checks"]["tampering"]


def test_a_record_as_sealed_passes_and_nan_compares_equal():
    figures = {"reference": _stats(2.0), "candidate": _stats(1.0)}
    assert _run(list(figures.items()), figures)["passed"]


def test_a_reference_figure_rewritten_after_its_seal_fails_tampering():
    """helper-19 (2026-12-07): frames a torch helper handed the candidate reached the timing stage's
    record, and the reference's mean was multiplied by 1e6 during the candidate's own parity calls."""
    check = _run([("reference", _stats(0.005)), ("candidate", _stats(1.0))],
                 {"reference": _stats(5000.0), "candidate": _stats(1.0)})  # fmt: skip
    assert not check["passed"] and "parity figure of the reference changed" in check["detail"]


def test_a_second_seal_of_one_model_fails_tampering():
    figures = {"reference": _stats(2.0), "candidate": _stats(1.0)}
    check = _run(
        [("reference", _stats(9.0)), ("reference", _stats(2.0)), ("candidate", _stats(1.0))], figures
    )
    assert not check["passed"] and "reference" in check["detail"]
