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
`parity_status`; the store's turn rows qualify. The budget curves also read `tokens_in`, `tokens_out`,
`cost_usd` (US dollars) and `gpu_s` (seconds; see BUDGETS).

Over samples (the second half of this module): a run with several samples per problem is counted per
problem by default. `problems` arguments are nested sequences: one entry per problem, holding one list
of turn records per sample (trajectory). Views (VIEWS): `problem`, where a problem counts when the best
of its samples is correct and faster than p (best-of-n; denominator: problems), and `trajectory`,
where each sample counts on its own (denominator: trajectories = problems x samples). With one sample
per problem the two are the same. fast_p@k (`fast_p_at_k`) is the unbiased pass@k estimator of Chen et
al. 2021 ("Evaluating Large Language Models Trained on Code", arXiv:2107.03374, section 2.1) applied to
"correct and faster than p": per problem with n samples of which c succeed, 1 - C(n-c, k) / C(n, k),
averaged over problems; fast_p@1 is the per-trajectory fraction (for equal n) and fast_p@n the
best-of-n per-problem figure.

Intervals: every fast_p can carry `ci95`, a 95 % percentile bootstrap interval that resamples
problems with replacement (each drawn problem brings all its samples), BOOTSTRAP_RESAMPLES resamples
from a numpy generator seeded with BOOTSTRAP_SEED, so the same data give the same interval. It
describes the spread over problems (which problems a benchmark happens to hold), not timing noise.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# KernelBench's fast_p thresholds, plus 1.2
P_VALUES: tuple[float, ...] = (0.0, 0.5, 0.8, 1.0, 1.2, 1.5, 2.0)


@dataclass(frozen=True)
class FastP:
    """fast_p at one threshold: `numerator` of `denominator` trajectories (or problems, in the per-problem
    view) beat speedup `p`; `ci95` the bootstrap interval of the value (lo, hi), None when not drawn."""

    p: float
    numerator: int
    denominator: int
    ci95: tuple[float, float] | None = None

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


# ---------------------------------------------------------------- over samples, intervals, budgets

VIEWS: tuple[str, ...] = ("problem", "trajectory")
"""How samples are counted: `problem` (best of a problem's samples; denominator: problems) or
`trajectory` (every sample on its own; denominator: trajectories)."""

BOOTSTRAP_RESAMPLES = 1000  # resamples of the problems per interval
BOOTSTRAP_SEED = 0  # numpy.random.default_rng seed: the same data always give the same interval
CI_LEVEL = 0.95

BUDGETS: dict[str, str] = {
    "tokens": "tokens (prompt + completion) per trajectory",
    "cost_usd": "US dollars per trajectory",
    "gpu_s": "GPU-seconds per trajectory (correctness and timing stages)",
}
"""The budgets fast_p is drawn against, cumulative over a trajectory's turns. `tokens` is
`tokens_in + tokens_out` of each turn (with the full context the prompt grows every turn); `cost_usd`
the turn's price (a turn with no known price counts 0); `gpu_s` the wall seconds of the turn's
evaluation in its `correctness` and `timing` stages (EvalResult.stages; strict trials, the reproducible
figure and the profile run inside them): the time the candidate holds a GPU slot. The `setup` (process
start, torch import) and `build` (import, extension builds, model construction) stages run on CPU slots
and are left out, and so is the re-timing of a winner when its trajectory ends. On a CPU dry run the
same stages are CPU seconds."""

Bests = Sequence[Sequence[float | None]]  # per problem, per sample: the best counted speedup or None


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator of Chen et al. 2021 (arXiv:2107.03374, eq. 1): the probability that
    at least one of k samples drawn without replacement from n, of which c succeed, succeeds:
    1 - C(n-c, k) / C(n, k).

    Raises:
        ValueError: not 0 <= c <= n, or not 1 <= k <= n.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def sample_bests(
    problems: Sequence[Sequence[Sequence[Mapping[str, Any]]]], k: int | None = None, rules: str = "strict"
) -> list[list[float | None]]:
    """Per problem, per sample: the best counted speedup up to turn k (`best_speedup`), None for none."""
    return [[best_speedup(turns, k, rules) for turns in samples] for samples in problems]


def _weights(n: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples, n) counts: how often each of n problems is drawn in each bootstrap resample."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n, np.full(n, 1.0 / n), size=resamples).astype(float)


def bootstrap_ci(
    num: np.ndarray,
    den: np.ndarray,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = CI_LEVEL,
) -> list[tuple[float, float] | None]:
    """Percentile bootstrap intervals of ratios sum(num) / sum(den) over problems, resampling problems.

    Args:
        num: shape (problems, m): each problem's contribution to m figures at once (successes, or a
            per-problem estimate).
        den: shape (problems,): each problem's weight in the denominator (1 per problem, or its number
            of samples for the per-trajectory view).
        resamples: bootstrap resamples; 0 gives no intervals.
        seed: the generator's seed.
        level: the interval's coverage.

    Returns:
        m intervals (lo, hi), all None when there are no problems or no resamples.
    """
    num = np.asarray(num, dtype=float)
    if not len(den) or not resamples:
        return [None] * (num.shape[1] if num.ndim == 2 else 1)
    num = num.reshape(len(den), -1)
    w = _weights(len(den), resamples, seed)
    est = (w @ num) / (w @ np.asarray(den, dtype=float))[:, None]
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(est, alpha, axis=0), np.quantile(est, 1.0 - alpha, axis=0)
    return [(float(a), float(b)) for a, b in zip(lo, hi, strict=True)]


def view_tables(
    points: Sequence[Bests],
    p_values: Sequence[float] = P_VALUES,
    view: str = "problem",
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> list[list[FastP]]:
    """fast_p tables with intervals for several states of the same problems at once (turn k = 1..K, a
    budget, ...): one table per entry of `points`, each `Bests` (per problem, per sample).

    `view="problem"`: a problem counts when any of its samples beats p (best of its samples);
    denominator: problems. `view="trajectory"`: every sample counts; denominator: trajectories. The
    intervals resample problems (see `bootstrap_ci`); all the tables share one set of resamples.

    Raises:
        ValueError: `view` is not one of VIEWS, or the points hold different numbers of problems.
    """
    if view not in VIEWS:
        raise ValueError(f"view {view!r} is not one of {', '.join(VIEWS)}")
    if not points:
        return []
    n = len(points[0])
    if any(len(b) != n for b in points):
        raise ValueError("every point must hold the same problems")
    den = np.array([1 if view == "problem" else len(samples) for samples in points[0]], dtype=float)
    num = np.zeros((n, len(points) * len(p_values)))
    for j, bests in enumerate(points):
        for i, samples in enumerate(bests):
            for q, p in enumerate(p_values):
                wins = sum(1 for s in samples if s is not None and s > p)
                num[i, j * len(p_values) + q] = min(wins, 1) if view == "problem" else wins
    cis = bootstrap_ci(num, den, resamples, seed)
    total = int(den.sum())
    return [
        [
            FastP(float(p), int(num[:, j * len(p_values) + q].sum()), total, cis[j * len(p_values) + q])
            for q, p in enumerate(p_values)
        ]
        for j in range(len(points))
    ]


def view_table(
    bests: Bests,
    p_values: Sequence[float] = P_VALUES,
    view: str = "problem",
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> list[FastP]:
    """fast_p at every threshold for one `Bests` (per problem, per sample), with intervals; see
    `view_tables` for the views."""
    return view_tables([bests], p_values, view, resamples, seed)[0]


@dataclass(frozen=True)
class FastPAtK:
    """fast_p@k at threshold `p`: the mean over `problems` of the unbiased estimator (`pass_at_k`) of
    "at least one of k samples is correct and faster than p"; `short` problems had fewer than k samples
    and are left out; `ci95` its bootstrap interval (lo, hi), None when not drawn."""

    p: float
    k: int
    value: float | None
    problems: int
    short: int = 0
    ci95: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fast_p_at_k(
    bests: Bests,
    ks: Sequence[int] | None = None,
    p_values: Sequence[float] = P_VALUES,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[int, list[FastPAtK]]:
    """fast_p@k over samples (Chen et al. 2021's unbiased estimator, `pass_at_k`, applied to "correct
    and faster than p"): per problem with n samples of which c have a best counted speedup > p,
    1 - C(n-c, k) / C(n, k), averaged over the problems with at least k samples.

    Args:
        bests: per problem, per sample, the best counted speedup (`sample_bests`).
        ks: the k to give; default 1 .. the most samples any problem has.
        p_values: the thresholds.
        resamples, seed: the bootstrap (resampling problems); 0 resamples gives no intervals.

    Returns:
        k -> one FastPAtK per threshold.
    """
    if ks is None:
        ks = range(1, max((len(s) for s in bests), default=0) + 1)
    out: dict[int, list[FastPAtK]] = {}
    for k in ks:
        kept = [s for s in bests if len(s) >= k]
        num = np.array(
            [
                [pass_at_k(len(s), sum(1 for x in s if x is not None and x > p), k) for p in p_values]
                for s in kept
            ]
        ).reshape(len(kept), len(p_values))
        cis = bootstrap_ci(num, np.ones(len(kept)), resamples, seed)
        out[k] = [
            FastPAtK(
                float(p),
                k,
                float(num[:, q].mean()) if kept else None,
                len(kept),
                len(bests) - len(kept),
                cis[q],
            )  # fmt: skip
            for q, p in enumerate(p_values)
        ]
    return out


def by_turn_view(
    problems: Sequence[Sequence[Sequence[Mapping[str, Any]]]],
    max_turn: int | None = None,
    p_values: Sequence[float] = P_VALUES,
    rules: str = "strict",
    view: str = "problem",
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[int, list[FastP]]:
    """fast_p of the best counted turn up to turn k, k = 1 .. K, in a view (VIEWS), with intervals.

    Args:
        problems: per problem, per sample, the turn records.
        max_turn: K; default the highest turn index present (at least 1).

    Returns:
        k -> fast_p table; non-decreasing in k, the denominator the same at every k.
    """
    if max_turn is None:
        max_turn = max((t["idx"] for s in problems for turns in s for t in turns), default=1)
    ks = list(range(1, max_turn + 1))
    tables = view_tables([sample_bests(problems, k, rules) for k in ks], p_values, view, resamples, seed)
    return dict(zip(ks, tables, strict=True))


def turn_cost(turn: Mapping[str, Any], budget: str) -> float:
    """What one turn spent of `budget` (one of BUDGETS); unknown amounts count 0.

    Raises:
        ValueError: an unknown budget.
    """
    if budget == "tokens":
        return float((turn.get("tokens_in") or 0) + (turn.get("tokens_out") or 0))
    if budget in ("cost_usd", "gpu_s"):
        return float(turn.get(budget) or 0.0)
    raise ValueError(f"budget {budget!r} is not one of {', '.join(BUDGETS)}")


def _cumulative(turns: Sequence[Mapping[str, Any]], budget: str) -> list[float]:
    """The cumulative spend of `budget` after each turn of a trajectory, in turn order."""
    return list(np.cumsum([turn_cost(t, budget) for t in sorted(turns, key=lambda t: t["idx"])]).tolist())


def budget_points(
    problems: Sequence[Sequence[Sequence[Mapping[str, Any]]]], budget: str, max_points: int = 40
) -> list[float]:
    """Budgets to draw a curve at: every trajectory's cumulative spend after each of its turns (the
    curve's steps), thinned to at most `max_points` by quantiles; the largest spend is always kept."""
    values = sorted({s for samples in problems for turns in samples for s in _cumulative(turns, budget)})
    if len(values) <= max_points:
        return values
    picked = np.quantile(np.array(values), np.linspace(0.0, 1.0, max_points), method="inverted_cdf")
    return sorted({float(v) for v in picked} | {values[-1]})


def by_budget(
    problems: Sequence[Sequence[Sequence[Mapping[str, Any]]]],
    budget: str,
    points: Sequence[float] | None = None,
    p_values: Sequence[float] = P_VALUES,
    rules: str = "strict",
    view: str = "problem",
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> list[tuple[float, list[FastP]]]:
    """fast_p against a cumulative budget (one of BUDGETS): at budget B each trajectory scores its best
    counted turn among those it reached having spent at most B (its spend through that turn included).
    The budget is per trajectory: in the per-problem view each sample is cut at B.

    Args:
        points: the budgets; default `budget_points`.

    Returns:
        [(budget, fast_p table)], budgets ascending.

    Note: under `kernelbench` rules a turn counts by KernelBench's verdict; the budget is the same.
    """
    if points is None:
        points = budget_points(problems, budget)
    steps = [[_spent_rules(turns, budget, rules) for turns in samples] for samples in problems]
    states = []
    for b in points:
        states.append([[_at(spent, bests, b) for spent, bests in samples] for samples in steps])
    tables = view_tables(states, p_values, view, resamples, seed)
    return list(zip((float(b) for b in points), tables, strict=True))


def _spent_rules(
    turns: Sequence[Mapping[str, Any]], budget: str, rules: str
) -> tuple[list[float], list[float | None]]:
    spent, bests, total, best = [], [], 0.0, None
    for t in sorted(turns, key=lambda t: t["idx"]):
        total += turn_cost(t, budget)
        s = counted_speedup(t, rules)
        if s is not None and (best is None or s > best):
            best = s
        spent.append(total)
        bests.append(best)
    return spent, bests


def _at(spent: list[float], bests: list[float | None], b: float) -> float | None:
    i = bisect.bisect_right(spent, b + 1e-12 * max(1.0, abs(b)))
    return bests[i - 1] if i else None


def geomean_speedup(speedups: Iterable[float | None]) -> dict[str, Any]:
    """{"value", "n", "of"}: the geometric mean of the known positive speedups in `speedups` (the best
    counted speedup of each correct trajectory, or each problem's best sample), how many, and of how
    many entries; value None when none is known."""
    values = list(speedups)
    known = [float(s) for s in values if s is not None and s > 0]
    value = math.exp(statistics.fmean(math.log(s) for s in known)) if known else None
    return {"value": value, "n": len(known), "of": len(values)}


def problem_best(samples: Sequence[float | None]) -> float | None:
    """The best of a problem's samples' best speedups, None when no sample has one."""
    known = [s for s in samples if s is not None]
    return max(known) if known else None


STATUS_ORDER: tuple[str, ...] = (
    *("correct", "rejected", "incorrect", "runtime_error", "timeout", "compile_error"),
    *("no_code", "model_error", "pending"),
)


def status_by_turn(
    trajectories: Sequence[Sequence[Mapping[str, Any]]], max_turn: int | None = None
) -> list[dict[str, Any]]:
    """The status mix at each turn k = 1 .. K: {"k", "counts" (status -> turns at index k with it,
    STATUS_ORDER first; a turn never evaluated is `pending`), "ended" (trajectories with no turn k: they
    stopped earlier), "trajectories" (all of them)}. Strict statuses: a turn strict mode rejected shows
    as `rejected`."""
    if max_turn is None:
        max_turn = max((t["idx"] for turns in trajectories for t in turns), default=0)
    out = []
    for k in range(1, max_turn + 1):
        at_k = [t for turns in trajectories for t in turns if t["idx"] == k]
        c = Counter(t.get("status") or "pending" for t in at_k)
        order = [s for s in STATUS_ORDER if s in c] + sorted(s for s in c if s not in STATUS_ORDER)
        out.append({"k": k, "counts": {s: c[s] for s in order}, "ended": len(trajectories) - len(at_k),
                    "trajectories": len(trajectories)})  # fmt: skip
    return out


# ---------------------------------------------------------------- the tree: what a trajectory used


def usage(turns: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """What one trajectory used, counted over its whole tree of turns (every node of a best-of-n, beam
    or tree search; `Store.turn_summaries` rows): `turns` (nodes), `model_calls` (nodes this run asked
    the model for: a fork's copied turns are not), `evaluations` (nodes this run evaluated), `copied`
    (turns a fork copied) and `depth` (the longest conversation, in turns). A row without `model_call` /
    `evaluation` columns counts as a call when it has a status, and as an evaluation when it has code.
    `reused` (nodes given an earlier evaluation's result again, `EvalResult.reused`) are no evaluations."""
    turns = list(turns)
    copied = sum(1 for t in turns if t.get("copied_from") is not None)
    calls = sum(
        int(t["model_call"]) if "model_call" in t else int(t.get("status") is not None) for t in turns
    )
    evals = sum(int(t["evaluation"]) if "evaluation" in t else int(bool(t.get("has_code"))) for t in turns)
    reused = sum(int(t.get("reused") or 0) for t in turns)
    depth = max((t.get("depth") or t["idx"] for t in turns), default=0)
    return {"turns": len(turns), "model_calls": calls, "evaluations": evals, "reused": reused, "copied": copied,
            "depth": depth}  # fmt: skip


# ---------------------------------------------------------------- two runs on the same problems


def sign_test(a: Sequence[float | None], b: Sequence[float | None]) -> dict[str, Any]:
    """Exact two-sided sign test over paired problems: `b[i]` against `a[i]` (best speedups; None, no
    correct kernel, counts as 0). Returns wins (b faster), losses, ties (left out of the test) and
    `p_value`: the chance of a split at least this uneven if either run were as likely to win."""
    wins = sum(1 for x, y in zip(a, b, strict=True) if (y or 0.0) > (x or 0.0))
    losses = sum(1 for x, y in zip(a, b, strict=True) if (y or 0.0) < (x or 0.0))
    n, k = wins + losses, min(wins, losses)
    p = min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n) if n else 1.0
    return {"wins": wins, "losses": losses, "ties": len(a) - n, "p_value": p}


def paired_fast_p(
    a: Sequence[float | None],
    b: Sequence[float | None],
    p_values: Sequence[float] = P_VALUES,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> list[dict[str, Any]]:
    """fast_p of two runs over the same problems (`a[i]`, `b[i]`: problem i's best speedup in each, None
    for none) and their difference b - a at each p, with a percentile bootstrap interval `ci95` that
    resamples problems (the pair of a problem moves together; seeded). One dict per p: p, a, b, diff,
    ci95 (None with 0 resamples or no problems)."""
    if len(a) != len(b):
        raise ValueError(f"paired runs need the same problems, got {len(a)} and {len(b)}")
    win = lambda xs, p: np.array([float(x is not None and x > p) for x in xs])  # noqa: E731
    diffs = (
        np.stack([win(b, p) - win(a, p) for p in p_values], axis=1)
        if len(a)
        else np.zeros((0, len(p_values)))
    )
    cis = bootstrap_ci(diffs, np.ones(len(a)), resamples, seed)
    n = max(len(a), 1)
    return [{"p": float(p), "a": float(win(a, p).sum() / n), "b": float(win(b, p).sum() / n),
             "diff": float(diffs[:, i].sum() / n), "ci95": cis[i]} for i, p in enumerate(p_values)]  # fmt: skip


__all__ = [
    "paired_fast_p",
    "sign_test",
    "usage",
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "BUDGETS",
    "CI_LEVEL",
    "FastPAtK",
    "STATUS_ORDER",
    "VIEWS",
    "bootstrap_ci",
    "budget_points",
    "by_budget",
    "by_turn_view",
    "fast_p_at_k",
    "geomean_speedup",
    "pass_at_k",
    "problem_best",
    "sample_bests",
    "status_by_turn",
    "turn_cost",
    "view_table",
    "view_tables",
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
