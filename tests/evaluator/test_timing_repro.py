"""The reproducible timing figure: its statistics, stopping rule and interleaving, with fake timers on the
CPU; the figure end to end on the CPU (retime) and on a GPU."""

import math
import random
import statistics
from pathlib import Path

import pytest
import torch
from kb_agent.evaluator import (
    EvalResult,
    EvalSettings,
    Status,
    TimingInfo,
    TimingStats,
    evaluate,
    retime,
    timing,
)
from kb_agent.evaluator.thresholds import REPRO_FEWEST_PAIRS
from kb_agent.problems import resolve_one

CANDIDATES = Path(__file__).resolve().parent.parent / "candidates"


class FakeTimer:
    """Calls log their key; each timed call lasts `ms_of(key, i)` ms (i: the i-th timed call) and advances
    a fake host clock by `clock_step` s."""

    def __init__(self, ms_of, clock_step: float = 0.0):
        self.ms_of, self.clock_step = ms_of, clock_step
        self.log: list[str] = []
        self.pending: list[float] = []
        self.holds: list[float] = []
        self.reads = 0
        self.n = 0
        self.now = 0.0

    def calls(self):
        return {k: (lambda k=k: self.log.append(k)) for k in ("reference", "candidate")}

    def flush(self):
        self.log.append("flush")

    def clock(self) -> float:
        return self.now

    def time(self, call):
        call()
        self.pending.append(self.ms_of(self.log[-1], self.n))
        self.n += 1
        self.now += self.clock_step

    def read(self):
        self.reads += 1
        out, self.pending = self.pending, []
        return out

    def hold(self, ms):
        self.holds.append(ms)


def interleave(fake: FakeTimer, **kw):
    kw = {"warmup": 2, "min_trials": 30, "max_trials": 10000, "max_seconds": 100.0, "target_rse": 0.005, **kw}
    return timing.time_interleaved(fake.calls(), timer=fake, flusher=fake.flush, clock=fake.clock, **kw)


def constant(ref_ms=2.0, cand_ms=1.0):
    return lambda k, i: ref_ms if k == "reference" else cand_ms


# ------------------------------------------------------------------------------------------ statistics
def _exact_ranks(n: int, level: float = 0.95) -> int:
    tail, cdf, j = (1 - level) / 2, 0, 0
    for k in range(n + 1):
        cdf += math.comb(n, k)
        if cdf / 2**n > tail:
            return j
        j = k + 1
    return j


@pytest.mark.parametrize("n", [1, 5, 6, 7, 10, 30, 100, 1001, 5000])
def test_median_ci_ranks_are_the_binomial_quantiles(n):
    assert timing._median_ci_ranks(n, 0.95) == _exact_ranks(n)


def test_median_ci_of_ten_values_is_the_2nd_and_9th():  # the textbook table: n = 10 -> ranks 2 and 9
    assert timing.median_ci([float(v) for v in range(10, 0, -1)]) == (2.0, 9.0)
    assert timing.median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few for 95 %: the extremes
    with pytest.raises(ValueError):
        timing.median_ci([])


def test_median_ci_covers_the_median_at_least_95_percent_of_the_time():
    rng = random.Random(1)
    true_median = math.log(2)  # of the unit exponential
    hits = 0
    for _ in range(2000):
        lo, hi = timing.median_ci([rng.expovariate(1.0) for _ in range(40)])
        hits += lo <= true_median <= hi
    assert 0.95 <= hits / 2000 <= 0.99


def test_median_rse_shrinks_with_the_square_root_of_n():
    rng = random.Random(2)
    small = timing.median_rse([rng.gauss(1.0, 0.1) for _ in range(100)])
    large = timing.median_rse([rng.gauss(1.0, 0.1) for _ in range(10000)])
    assert 0.008 < small < 0.02  # the normal's: 1.2533 * sd / √n / mean = 0.0125
    assert large == pytest.approx(small / 10, rel=0.35)
    assert timing.median_rse([1.0]) == math.inf and timing.median_rse([0.0, 0.0, 0.0]) == math.inf


def test_mean_ratio_ci_is_the_delta_method_on_the_log_ratio():
    ref = TimingStats(mean_ms=2.0, median_ms=2.0, std_ms=0.2, min_ms=1.5, max_ms=2.5, trials=100)
    cand = TimingStats(mean_ms=1.0, median_ms=1.0, std_ms=0.1, min_ms=0.8, max_ms=1.2, trials=100)
    lo, hi = timing.mean_ratio_ci(ref, cand)
    se = math.hypot(0.01, 0.01)
    assert (lo, hi) == pytest.approx((2 * math.exp(-1.959964 * se), 2 * math.exp(1.959964 * se)))
    assert lo < 2.0 < hi and lo * hi == pytest.approx(4.0)
    assert timing.mean_ratio_ci(ref, TimingStats(0.0, 0.0, 0.0, 0.0, 0.0, 1)) is None


def test_median_ratio_ci_contains_the_ratio_of_medians_and_narrows_with_more_trials():
    rng = random.Random(3)
    few = timing.median_ratio_ci(
        [rng.gauss(3, 0.3) for _ in range(50)], [rng.gauss(1, 0.1) for _ in range(50)]
    )
    many = timing.median_ratio_ci(
        [rng.gauss(3, 0.3) for _ in range(5000)], [rng.gauss(1, 0.1) for _ in range(5000)]
    )
    assert few[0] < 3.0 < few[1] and many[0] < 3.0 < many[1]
    assert many[1] - many[0] < (few[1] - few[0]) / 5
    assert timing.median_ratio_ci([1.0], [1.0]) is None


# ------------------------------------------------------------------------------------ interleaving
def test_pairs_alternate_AB_BA_each_call_after_a_flush_and_warmup_is_untimed():
    fake = FakeTimer(constant())
    run = interleave(fake, warmup=2, min_trials=4, max_trials=4)
    calls = [k for k in fake.log if k != "flush"]
    r, c = "reference", "candidate"
    assert calls[:4] == [r, c, c, r]  # two warm-up pairs, in the same alternating order
    assert run.order == calls[4:] == [r, c, c, r, r, c, c, r]
    assert all(fake.log[i - 1] == "flush" for i, k in enumerate(fake.log) if k != "flush")
    assert run.times == {r: [2.0] * 4, c: [1.0] * 4} and fake.n == 8  # warm-up calls were not timed
    assert run.stopped == "rse"  # constant times: every RSE is 0 once min_trials pairs are in


def test_constant_times_stop_on_the_rse_once_min_trials_pairs_are_in():
    fake = FakeTimer(constant(2.0, 1.0))
    run = interleave(fake, min_trials=30)
    assert run.stopped == "rse"
    n = len(run.times["reference"])
    # first block 1 pair, then blocks of REPRO_BLOCK_MS (20 ms) of timed work: 3 ms a pair -> 6 pairs
    assert 30 <= n < 30 + 7
    assert run.ratios("reference", "candidate") == [2.0] * n
    assert fake.reads == run.blocks + 1  # one synchronising read per block, one after warm-up


def test_noisy_times_run_until_every_rse_is_under_the_target():
    rng = random.Random(4)
    fake = FakeTimer(lambda k, i: (2.0 if k == "reference" else 1.0) * rng.lognormvariate(0, 0.05))
    run = interleave(fake, target_rse=0.005)
    ref, cand = run.times["reference"], run.times["candidate"]
    ratios = run.ratios("reference", "candidate")
    assert run.stopped == "rse" and len(ref) > 100  # 5 % noise needs far more than 30 pairs for 0.5 %
    assert max(timing.median_rse(ref), timing.median_rse(cand), timing.median_rse(ratios)) <= 0.005
    assert statistics.median(ratios) == pytest.approx(2.0, rel=0.02)


def test_max_trials_caps_the_pairs_exactly():
    rng = random.Random(5)
    fake = FakeTimer(lambda k, i: rng.uniform(0.5, 1.5))
    run = interleave(fake, min_trials=10, max_trials=57, target_rse=1e-9)
    assert run.stopped == "max_trials" and len(run.times["reference"]) == 57 == len(run.times["candidate"])


def test_the_time_cap_stops_the_pairs_but_never_below_the_fewest():
    fake = FakeTimer(constant(), clock_step=10.0)  # every timed call takes 10 s of host time
    run = interleave(fake, min_trials=1000, max_seconds=1.0)
    assert run.stopped == "time_cap"
    assert REPRO_FEWEST_PAIRS <= len(run.times["reference"]) < 2 * REPRO_FEWEST_PAIRS


def test_throttling_halfway_leaves_the_paired_figure_unbiased():
    """The GPU slows by 30 % halfway through: interleaved pairs see it in both models alike. Timing one
    model's trials and then the other's would put all the slow trials on the candidate (1.54x, not 2x)."""
    switch = 60  # timed calls before the slow-down

    def ms(k, i):
        return (2.0 if k == "reference" else 1.0) * (1.3 if i >= switch else 1.0)

    fake = FakeTimer(ms)
    run = interleave(fake, min_trials=60, max_trials=60)
    assert statistics.median(run.ratios("reference", "candidate")) == pytest.approx(2.0, rel=1e-12)
    sequential = statistics.median([ms("reference", i) for i in range(60)]) / statistics.median(
        [ms("candidate", i) for i in range(60, 120)]
    )
    assert sequential == pytest.approx(2.0 / 1.3)


def test_each_block_is_held_for_the_host_time_of_the_last():
    fake = FakeTimer(constant(), clock_step=0.001)  # 1 ms of host time per timed call
    interleave(fake, min_trials=30)
    # the first block (1 pair) took 2 ms to enqueue; the second holds 6 pairs (20 ms of 3 ms pairs)
    assert fake.holds[1] == pytest.approx(1.25 * 2.0 * 6, rel=1e-6)
    assert all(0 <= h <= 50.0 for h in fake.holds)


def test_interleaving_needs_exactly_two_calls():
    fake = FakeTimer(constant())
    with pytest.raises(ValueError, match="two calls"):
        timing.time_interleaved({"a": fake.flush}, timer=fake, flusher=fake.flush, warmup=0, min_trials=1,
                                max_trials=1, max_seconds=1.0, target_rse=0.1)  # fmt: skip


# --------------------------------------------------------------------------------- the figure, recorded
def test_time_repro_on_the_cpu_fills_the_repro_fields():
    x = torch.randn(64, 64)
    fns = {"reference": (lambda a: (a @ a).relu(), [x]), "candidate": (torch.relu, [x])}
    info = TimingInfo()
    settings = EvalSettings(device="cpu", repro_min_trials=10, repro_max_s=0.5)
    timing.time_repro(info, fns, settings, device=torch.device("cpu"), flusher=None, atol=1e-4, rtol=1e-4)
    assert info.repro_method == timing.REPRO_CPU_METHOD
    assert info.repro_trials == info.repro_reference.trials == info.repro_candidate.trials >= 10
    lo, hi = info.repro_ci95
    assert lo <= info.repro_speedup <= hi and info.repro_rse >= 0
    assert info.repro_stopped in ("rse", "time_cap", "max_trials") and info.repro_seconds > 0
    assert info.sm_clock_mhz_before is None and info.sm_clock_mhz_after is None
    assert info.settings["repro"]["target_rse"] == 0.005


def test_sm_clock_is_none_without_a_gpu():
    assert timing.sm_clock_mhz(torch.device("cpu")) is None


def test_repro_settings_are_checked_and_default_to_cuda_only():
    s = EvalSettings()
    assert s.repro_on("cuda") and not s.repro_on("cpu")
    assert EvalSettings(repro_timing=True).repro_on("cpu") and not EvalSettings(repro_timing=False).repro_on(
        "cuda"
    )
    for bad in ({"repro_method": "graphs"}, {"repro_target_rse": 0}, {"repro_min_trials": 0},
                {"repro_min_trials": 10, "repro_max_trials": 5}, {"repro_max_s": -1}):  # fmt: skip
        with pytest.raises(ValueError):
            EvalSettings(**bad)
    old = EvalSettings().to_dict()
    for k in [k for k in old if k.startswith("repro_")]:
        del old[k]
    assert EvalSettings.from_dict(old) == EvalSettings()  # settings stored before these fields load


def test_results_stored_before_the_repro_fields_still_load():
    r = EvalResult(status=Status.CORRECT, timing=TimingInfo(method="cuda_event_sync", speedup=1.5))
    d = r.to_dict()
    for k in [k for k in d["timing"] if k.startswith(("repro_", "sm_clock")) or k.endswith("_ci95")]:
        del d["timing"][k]
    old = EvalResult.from_dict(d)
    assert old.timing.speedup == 1.5 and old.timing.repro_speedup is None and old.timing.repro_ci95 is None
    r.timing.repro_ci95, r.timing.repro_reference = [1.4, 1.6], TimingStats(1.0, 1.0, 0.0, 1.0, 1.0, 30)
    assert EvalResult.from_json(r.to_json()) == r


# --------------------------------------------------------------------------------------- end to end
def _toy(name: str) -> str:
    return (CANDIDATES / f"{name}.py").read_text()


@pytest.mark.slow  # two children; the default run retimes through the loop (fake) and solve e2e
def test_retime_on_the_cpu_records_the_reproducible_figure_and_still_checks_correctness():
    settings = EvalSettings(device="cpu", repro_min_trials=6, repro_max_s=0.3)
    r = retime(resolve_one("toy/relu"), _toy("triton_relu"), settings)
    assert r.status == Status.CORRECT, r.message
    assert r.timing.repro_method == timing.REPRO_CPU_METHOD and r.timing.repro_trials >= 6
    assert r.timing.repro_ci95[0] <= r.timing.repro_speedup <= r.timing.repro_ci95[1]
    assert r.timing.speedup_ci95[0] <= r.speedup <= r.timing.speedup_ci95[1]
    wrong = retime(resolve_one("toy/relu"), _toy("triton_relu_off_by_one"), settings)
    assert wrong.status == Status.INCORRECT and wrong.timing.repro_speedup is None


@pytest.mark.slow
def test_plain_evaluation_on_the_cpu_has_no_reproducible_figure():
    r = evaluate(resolve_one("toy/relu"), _toy("triton_relu"), EvalSettings(device="cpu"))
    assert r.status == Status.CORRECT and r.timing.repro_method is None and r.timing.speedup_ci95


@pytest.mark.gpu
def test_the_reproducible_figure_on_a_gpu():
    r = evaluate(resolve_one("toy/relu"), _toy("triton_relu"), EvalSettings())
    t = r.timing
    assert r.status == Status.CORRECT, r.message
    assert t.repro_method == timing.REPRO_GRAPH_METHOD and t.repro_trials >= 30
    assert t.repro_ci95[0] <= t.repro_speedup <= t.repro_ci95[1]
    assert t.device_speedup_ci95[0] <= t.device_speedup <= t.device_speedup_ci95[1]
    assert t.sm_clock_mhz_before is None or t.sm_clock_mhz_before > 0
    assert t.repro_stopped == "rse" or t.repro_seconds >= 4.0


def test_the_capture_memo_keeps_no_graph_once_its_partner_failed(monkeypatch):
    # the device figure and the reproducible figure replay graphs only when both models captured; a
    # reference graph kept beside a failed candidate capture held its memory pool through every eager
    # figure after it (the device figure's, torch.compile's, the reproducible one), which the figures
    # before the memo freed at once
    captures = []

    def fake_capture(fn, args, atol, rtol):
        captures.append(fn)
        return object() if fn == "ref" else None

    monkeypatch.setattr(timing, "_capture", fake_capture)
    fns = {"reference": ("ref", []), "candidate": ("new", [])}
    memo: dict = {}
    assert timing.captured_graphs(fns, 1e-4, 1e-4, memo) is None
    assert all(g is None for g in memo.values()) and set(memo) == set(fns)
    assert timing.captured_graphs(fns, 1e-4, 1e-4, memo) is None and captures == ["ref", "new"]  # not again
