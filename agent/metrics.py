"""Best-of-trajectory fast_p: pure functions over turn records, no database.

fast_p (KernelBench: Ouyang et al. 2025, "KernelBench: Can LLMs Write Efficient GPU Kernels?",
arXiv:2502.10517; `fastp` in its repository) is the fraction of problems whose candidate is correct
**and** has speedup > p, where speedup is the reference runtime divided by the candidate runtime. Here the unit of counting is a trajectory (one
problem and one sample): a trajectory scores its best correct speedup over its turns up to turn k, and
a trajectory without a correct turn scores None, which counts in the denominator as a failure. With
p = 0 the measure is the fraction correct.

A turn record is any mapping with `idx` (1-based turn index), `speedup` (reference time / candidate
time) and either `correct` (truthy) or `status == "correct"`; the store's turn rows qualify.
"""

from __future__ import annotations

import math
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


def _is_correct(turn: Mapping[str, Any]) -> bool:
    if "correct" in turn and turn["correct"] is not None:
        return bool(turn["correct"])
    return str(turn.get("status")) == "correct"


def best_speedup(turns: Iterable[Mapping[str, Any]], k: int | None = None) -> float | None:
    """The best speedup (reference time / candidate time) among the correct turns with idx <= k.

    Args:
        turns: the trajectory's turn records, in any order.
        k: the last turn index counted; None counts every turn.

    A trajectory's winner is re-timed in a fresh process when the trajectory ends (the winner's curse: the
    best of several noisy measurements is biased upwards); a turn with a `retimed_speedup` counts with it,
    and a turn whose re-evaluation was not correct (`retimed_status`) does not count at all.

    Returns:
        The highest speedup, or None when no counted turn is correct with a measured speedup.
    """
    best = None
    for t in turns:
        if k is not None and t["idx"] > k:
            continue
        if t.get("retimed_status") not in (None, "correct"):
            continue  # correct once, not again in a fresh process: no speedup to trust
        s = t["retimed_speedup"] if t.get("retimed_speedup") is not None else t.get("speedup")
        if not _is_correct(t) or s is None or math.isnan(s):
            continue
        if best is None or s > best:
            best = float(s)
    return best


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
) -> dict[int, list[FastP]]:
    """Best-of-trajectory fast_p up to turn k, for k = 1 .. K.

    Args:
        trajectories: one list of turn records per attempted trajectory.
        max_turn: K; default the highest turn index present (at least 1).
        p_values: the thresholds.

    Returns:
        k -> fast_p table. A trajectory that ended before turn K keeps its best for larger k, so every
        figure is non-decreasing in k.
    """
    if max_turn is None:
        max_turn = max((t["idx"] for turns in trajectories for t in turns), default=1)
    return {
        k: fast_p_table([best_speedup(turns, k) for turns in trajectories], p_values)
        for k in range(1, max_turn + 1)
    }


__all__ = ["P_VALUES", "FastP", "best_speedup", "by_turn", "fast_p", "fast_p_counts", "fast_p_table"]
