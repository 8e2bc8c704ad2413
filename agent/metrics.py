"""Best-of-trajectory fast_p: pure functions over turn records, no database.

fast_p (KernelBench: Ouyang et al. 2025, "KernelBench: Can LLMs Write Efficient GPU Kernels?",
arXiv:2502.10517; `fastp` in its repository) is the fraction of problems whose candidate is correct
**and** has speedup > p, where speedup is the reference runtime divided by the candidate runtime. Here the unit of counting is a trajectory (one
problem and one sample): a trajectory scores its best correct speedup over its turns up to turn k, and
a trajectory without a correct turn scores None, which counts in the denominator as a failure. With
p = 0 the measure is the fraction correct.

Every figure can be taken under two rules (RULES): `strict`, the evaluator's verdict, and `kernelbench`,
KernelBench's rules alone, where a turn strict mode rejected counts by the status those rules gave it
(often correct, with a speedup). Both count the same trajectories, so the two figures share their
denominators and their difference is what strictness cost.

A turn record is any mapping with `idx` (1-based turn index), `speedup` (reference time / candidate
time), either `correct` (truthy) or `status == "correct"`, and for the `kernelbench` rules
`parity_status`; the store's turn rows qualify.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

# KernelBench's fast_p thresholds, plus 1.2
P_VALUES: tuple[float, ...] = (0.0, 0.5, 0.8, 1.0, 1.2, 1.5, 2.0)


@dataclass(frozen=True)
class FastP:
    """fast_p at one threshold: `numerator` of `denominator` trajectories beat speedup `p`."""

    p: float
    numerator: int
    denominator: int

    @property
    def value(self) -> float | None:
        """numerator / denominator; None when nothing was attempted."""
        return self.numerator / self.denominator if self.denominator else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "value": self.value}


RULES: tuple[str, ...] = ("strict", "kernelbench")
"""How a turn is judged: `strict` (the evaluator's verdict, strict mode's rejections included) or
`kernelbench` (KernelBench's rules alone: a turn strict mode rejected counts by its `parity_status`)."""


def is_correct(turn: Mapping[str, Any], rules: str = "strict") -> bool:
    """Whether a turn record counts as correct under `rules` (one of RULES).

    `strict` reads `correct` (truthy) or else `status == "correct"`; `kernelbench` reads
    `parity_status` (the store's column), falling back to the strict verdict where none was recorded.

    Raises:
        ValueError: `rules` is not one of RULES.
    """
    if rules == "kernelbench" and turn.get("parity_status") is not None:
        return str(turn["parity_status"]) == "correct"
    if rules not in RULES:
        raise ValueError(f"rules {rules!r} is not one of {', '.join(RULES)}")
    if "correct" in turn and turn["correct"] is not None:
        return bool(turn["correct"])
    return str(turn.get("status")) == "correct"


def counted_speedup(turn: Mapping[str, Any], rules: str = "strict") -> float | None:
    """The speedup (reference time / candidate time) a turn scores with under `rules`, None when it
    does not count (not correct, no measured speedup).

    A trajectory's winner is re-timed in a fresh process when the trajectory ends (the winner's curse: the
    best of several noisy measurements is biased upwards); a turn with a `retimed_speedup` counts with it,
    and a turn whose re-evaluation was not correct (`retimed_status`) does not count at all; under
    `kernelbench` a re-evaluation strict mode rejected keeps the turn's first figure.
    """
    if not is_correct(turn, rules):
        return None
    retimed = turn.get("retimed_status")
    if retimed not in (None, "correct") and not (rules == "kernelbench" and retimed == "rejected"):
        return None  # correct once, not again in a fresh process: no speedup to trust
    s = turn["retimed_speedup"] if turn.get("retimed_speedup") is not None else turn.get("speedup")
    if s is None or math.isnan(s):
        return None
    return float(s)


def best_turn(
    turns: Iterable[Mapping[str, Any]], k: int | None = None, rules: str = "strict"
) -> Mapping[str, Any] | None:
    """The turn record with the highest `counted_speedup` among those with idx <= k (the earliest on a
    tie); None when no counted turn is correct with a measured speedup."""
    best, best_s = None, None
    for t in sorted(turns, key=lambda t: t["idx"]):
        if k is not None and t["idx"] > k:
            continue
        s = counted_speedup(t, rules)
        if s is not None and (best_s is None or s > best_s):
            best, best_s = t, s
    return best


def best_speedup(
    turns: Iterable[Mapping[str, Any]], k: int | None = None, rules: str = "strict"
) -> float | None:
    """The best speedup (reference time / candidate time) among the correct turns with idx <= k.

    Args:
        turns: the trajectory's turn records, in any order.
        k: the last turn index counted; None counts every turn.
        rules: `strict` or `kernelbench` (RULES): which verdict makes a turn correct.

    A re-timed turn counts with its re-timed figure (see `counted_speedup`).

    Returns:
        The highest speedup, or None when no counted turn is correct with a measured speedup.
    """
    t = best_turn(turns, k, rules)
    return None if t is None else counted_speedup(t, rules)


def fast_p_counts(best_speedups: Sequence[float | None], p: float) -> FastP:
    """Count the trajectories whose best correct speedup is strictly greater than `p`.

    Args:
        best_speedups: one entry per attempted trajectory; None = no correct turn (a failure that
            still counts in the denominator).
        p: the speedup threshold (1.0 = as fast as the reference).
    """
    n = sum(1 for s in best_speedups if s is not None and s > p)
    return FastP(float(p), n, len(best_speedups))


def fast_p(best_speedups: Sequence[float | None], p: float) -> float:
    """fast_p (KernelBench, Ouyang et al. 2025): the fraction of attempted trajectories whose best
    correct speedup is strictly greater than `p`; None entries count as failures. fast_0 is the
    fraction correct.

    Raises:
        ValueError: `best_speedups` is empty (fast_p of nothing is undefined).
    """
    if not best_speedups:
        raise ValueError("fast_p of no trajectories is undefined")
    r = fast_p_counts(best_speedups, p)
    return r.numerator / r.denominator


def fast_p_table(best_speedups: Sequence[float | None], p_values: Sequence[float] = P_VALUES) -> list[FastP]:
    """fast_p at every threshold in `p_values`, with numerator and denominator."""
    return [fast_p_counts(best_speedups, p) for p in p_values]


def by_turn(
    trajectories: Sequence[Sequence[Mapping[str, Any]]],
    max_turn: int | None = None,
    p_values: Sequence[float] = P_VALUES,
    rules: str = "strict",
) -> dict[int, list[FastP]]:
    """Best-of-trajectory fast_p up to turn k, for k = 1 .. K.

    Args:
        trajectories: one list of turn records per attempted trajectory.
        max_turn: K; default the highest turn index present (at least 1).
        p_values: the thresholds.
        rules: `strict` or `kernelbench` (RULES).

    Returns:
        k -> fast_p table. A trajectory that ended before turn K keeps its best for larger k, so every
        figure is non-decreasing in k.
    """
    if max_turn is None:
        max_turn = max((t["idx"] for turns in trajectories for t in turns), default=1)
    return {
        k: fast_p_table([best_speedup(turns, k, rules) for turns in trajectories], p_values)
        for k in range(1, max_turn + 1)
    }


def rejections_by_check(turns: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many of `turns` strict mode rejected, per failed check: check name -> number of rejected turns
    that failed it, most frequent first (a turn that failed several checks counts for each). A rejected
    turn with no failed check recorded (forged result lines, a run before the checks were stored) counts
    under "other".

    A turn record here has `status` and `failed_checks` (a list of check names, as the store gives it).
    """
    counts: Counter[str] = Counter()
    for t in turns:
        if t.get("status") == "rejected":
            counts.update(t.get("failed_checks") or ["other"])
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def share_summary(shares: Iterable[float | None]) -> dict[str, Any]:
    """{"n", "median", "min", "max"} of the known values in `shares` (fractions 0..1; None skipped);
    the figures are None when no value is known."""
    known = sorted(float(x) for x in shares if x is not None)
    if not known:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {"n": len(known), "median": statistics.median(known), "min": known[0], "max": known[-1]}


__all__ = [
    "P_VALUES",
    "RULES",
    "FastP",
    "best_speedup",
    "best_turn",
    "by_turn",
    "counted_speedup",
    "fast_p",
    "fast_p_counts",
    "fast_p_table",
    "is_correct",
    "rejections_by_check",
    "share_summary",
]
