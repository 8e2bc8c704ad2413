import pytest
from kb_agent.agent.metrics import (
    P_VALUES,
    best_speedup,
    best_turn,
    by_turn,
    fast_p,
    fast_p_counts,
    fast_p_table,
    is_correct,
    rejections_by_check,
    share_summary,
)


def turn(idx, status, speedup=None):
    return {"idx": idx, "status": status, "correct": int(status == "correct"), "speedup": speedup}


# three trajectories, worked by hand:
#   A: incorrect at 1, correct 0.9x at 2, correct 1.6x at 3      -> best 1.6 (best up to 1: None, up to 2: 0.9)
#   B: correct 1.0x at 1, then compile errors; ended after 2     -> best 1.0 at every k
#   C: never correct                                             -> None
A = [turn(1, "incorrect"), turn(2, "correct", 0.9), turn(3, "correct", 1.6)]
B = [turn(1, "correct", 1.0), turn(2, "compile_error")]
C = [turn(1, "compile_error"), turn(2, "timeout"), turn(3, "incorrect")]


def test_best_speedup_counts_only_correct_turns_up_to_k():
    assert best_speedup(A) == 1.6
    assert best_speedup(A, k=1) is None
    assert best_speedup(A, k=2) == 0.9
    assert best_speedup(C) is None
    # an incorrect turn's speedup never counts, however large
    assert best_speedup([turn(1, "incorrect", 50.0), turn(2, "correct", 1.1)]) == 1.1
    # a correct turn without a measured speedup does not count either
    assert best_speedup([turn(1, "correct", None)]) is None


def test_best_speedup_accepts_status_only_records():
    assert best_speedup([{"idx": 1, "status": "correct", "speedup": 2.0}]) == 2.0


def test_fast_p_by_hand():
    best = [best_speedup(t) for t in (A, B, C)]  # [1.6, 1.0, None]
    assert best == [1.6, 1.0, None]
    # p = 0: fraction correct, None in the denominator
    assert fast_p(best, 0.0) == pytest.approx(2 / 3)
    # strict '>': B's 1.0x is not faster than the reference
    assert fast_p(best, 1.0) == pytest.approx(1 / 3)
    assert fast_p(best, 1.5) == pytest.approx(1 / 3)
    assert fast_p(best, 1.6) == 0.0
    assert fast_p(best, 2.0) == 0.0
    r = fast_p_counts(best, 1.0)
    assert (r.numerator, r.denominator, r.value) == (1, 3, pytest.approx(1 / 3))


def test_fast_p_of_nothing_is_an_error_not_zero():
    with pytest.raises(ValueError):
        fast_p([], 1.0)
    assert fast_p_counts([], 1.0).value is None


def test_fast_p_table_has_a_row_per_threshold_in_order():
    table = fast_p_table([1.6, 1.0, None], p_values=(0.0, 0.8, 1.0, 1.5, 2.0))
    assert [(f.p, f.numerator, f.denominator) for f in table] == [
        (0.0, 2, 3),
        (0.8, 2, 3),
        (1.0, 1, 3),  # strict '>': 1.0x is not faster
        (1.5, 1, 3),
        (2.0, 0, 3),
    ]
    assert table[2].to_dict() == {
        "p": 1.0, "numerator": 1, "denominator": 3, "value": pytest.approx(1 / 3), "ci95": None
    }  # fmt: skip
    # the default thresholds: ascending, with fast_0 (correct at all) and fast_1 (KernelBench's headline)
    default = fast_p_table([1.6, 1.0, None])
    assert [f.p for f in default] == sorted(P_VALUES) and {0.0, 1.0} <= set(P_VALUES)
    assert [f.numerator for f in default] == [int(f.p < 1.0) + int(f.p < 1.6) for f in default]


def test_by_turn_by_hand_and_monotonic():
    table = by_turn([A, B, C])
    assert sorted(table) == [1, 2, 3]
    at = {k: {f.p: f.numerator for f in row} for k, row in table.items()}
    # k=1: only B is correct (1.0x); k=2: A joins at 0.9x; k=3: A reaches 1.6x
    assert at[1] == {0.0: 1, 0.5: 1, 0.8: 1, 1.0: 0, 1.2: 0, 1.5: 0, 2.0: 0}
    assert at[2] == {0.0: 2, 0.5: 2, 0.8: 2, 1.0: 0, 1.2: 0, 1.5: 0, 2.0: 0}
    assert at[3] == {0.0: 2, 0.5: 2, 0.8: 2, 1.0: 1, 1.2: 1, 1.5: 1, 2.0: 0}
    # B ended after turn 2 and keeps its best at k=3; the denominator never changes
    assert all(f.denominator == 3 for row in table.values() for f in row)
    for p in P_VALUES:
        series = [at[k][p] for k in sorted(at)]
        assert series == sorted(series)


def test_by_turn_extends_to_a_given_budget():
    table = by_turn([B], max_turn=5)
    assert sorted(table) == [1, 2, 3, 4, 5]
    assert table[5][0].numerator == 1


# ---------------------------------------------------------------- strict mode and KernelBench's rules


def judged(idx, status, speedup=None, parity=None, failed=None, retimed_status=None, retimed_speedup=None):
    """A turn record as the store gives it: strict `status`, KernelBench-rules `parity_status`."""
    return {
        **turn(idx, status, speedup),
        "parity_status": parity or status,
        "failed_checks": failed,
        "retimed_status": retimed_status,
        "retimed_speedup": retimed_speedup,
    }


# D: correct 1.1x at 1, then a library-assisted 1.8x that strict mode rejected (KernelBench: correct)
# E: only a rejected 2.5x (KernelBench: correct), so no correct turn under strict mode
# F: rejected and incorrect under KernelBench's rules too: counts under neither
D = [
    judged(1, "correct", 1.1, failed=[]),
    judged(2, "rejected", 1.8, "correct", ["custom_kernels_do_the_work"]),
]
E = [judged(1, "rejected", 2.5, "correct", ["speed_of_light", "custom_kernels_do_the_work"])]
F = [judged(1, "rejected", None, "incorrect", ["side_effects"])]


def test_a_rejected_turn_counts_under_kernelbench_rules_only():
    assert [best_speedup(t) for t in (D, E, F)] == [1.1, None, None]
    assert [best_speedup(t, rules="kernelbench") for t in (D, E, F)] == [1.8, 2.5, None]
    assert best_turn(D)["idx"] == 1 and best_turn(D, rules="kernelbench")["idx"] == 2
    assert is_correct(E[0], "kernelbench") and not is_correct(E[0])
    # a record without parity_status (no strict record) reads the same under both rules
    assert is_correct(turn(1, "correct"), "kernelbench") and not is_correct(
        turn(1, "rejected"), "kernelbench"
    )
    with pytest.raises(ValueError, match="rules"):
        is_correct(turn(1, "correct"), "lenient")


def test_strict_and_kernelbench_fast_p_share_their_denominator():
    trajectories = [D, E, F, C]
    strict = fast_p_table([best_speedup(t) for t in trajectories], (0.0, 1.0, 2.0))
    kb = fast_p_table([best_speedup(t, rules="kernelbench") for t in trajectories], (0.0, 1.0, 2.0))
    assert [(f.numerator, f.denominator) for f in strict] == [(1, 4), (1, 4), (0, 4)]
    assert [(f.numerator, f.denominator) for f in kb] == [(2, 4), (2, 4), (1, 4)]
    rows = by_turn(trajectories, rules="kernelbench", p_values=(1.0,))
    assert [rows[k][0].numerator for k in sorted(rows)] == [2, 2, 2]  # E at turn 1, D at 1 (1.1x) then 2


def test_a_re_timed_winner_under_each_rule():
    # strict: a winner rejected when re-timed does not count; KernelBench's rules keep its first figure
    t = [judged(1, "correct", 1.5, failed=[], retimed_status="rejected")]
    assert best_speedup(t) is None and best_speedup(t, rules="kernelbench") == 1.5
    # a winner incorrect when re-timed counts under neither; a correct re-time counts with its figure
    assert best_speedup([judged(1, "correct", 1.5, retimed_status="incorrect")], rules="kernelbench") is None
    assert best_speedup([judged(1, "correct", 1.5, retimed_status="correct", retimed_speedup=1.2)]) == 1.2


def test_rejections_by_check_counts_rejected_turns_per_failed_check():
    turns = [*D, *E, *F, judged(1, "rejected", None, "correct", None), judged(1, "incorrect", failed=["x"])]
    assert rejections_by_check(turns) == {
        "custom_kernels_do_the_work": 2,
        "other": 1,  # rejected with no check recorded
        "side_effects": 1,
        "speed_of_light": 1,
    }
    assert rejections_by_check(A) == {}


def test_share_summary():
    assert share_summary([0.9, None, 0.1, 0.5]) == {"n": 3, "median": 0.5, "min": 0.1, "max": 0.9}
    assert share_summary([None]) == {"n": 0, "median": None, "min": None, "max": None}


# ---------------------------------------------------------------- over samples, intervals, budgets

from kb_agent.agent import metrics  # noqa: E402


def test_pass_at_k_is_chen_et_als_unbiased_estimator_by_hand():
    # n = 3 samples, c = 1 succeeds: pick k of them without replacement
    assert metrics.pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert metrics.pass_at_k(3, 1, 2) == pytest.approx(2 / 3)  # 1 - C(2,2)/C(3,2) = 1 - 1/3
    assert metrics.pass_at_k(3, 1, 3) == 1.0
    assert metrics.pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert metrics.pass_at_k(4, 0, 4) == 0.0 and metrics.pass_at_k(4, 4, 1) == 1.0
    for bad in ((3, 4, 1), (3, 1, 0), (3, 1, 4)):
        with pytest.raises(ValueError):
            metrics.pass_at_k(*bad)


# the example: 2 problems x 3 samples; problem 1 solved by 2 samples, problem 2 by 1
THREE_SAMPLES = [[1.5, None, 1.1], [None, None, 2.0]]


def test_per_problem_view_counts_problems_and_per_trajectory_view_counts_samples():
    per_problem = metrics.view_table(THREE_SAMPLES, (0.0, 1.2), view="problem", resamples=0)
    per_traj = metrics.view_table(THREE_SAMPLES, (0.0, 1.2), view="trajectory", resamples=0)
    assert [(f.numerator, f.denominator) for f in per_problem] == [(2, 2), (2, 2)]  # best of 3: 2/2
    assert [(f.numerator, f.denominator) for f in per_traj] == [(3, 6), (2, 6)]  # today's 3/6
    with pytest.raises(ValueError, match="view"):
        metrics.view_table(THREE_SAMPLES, view="sample")


def test_fast_p_at_k_between_per_trajectory_and_best_of_n():
    at = metrics.fast_p_at_k(THREE_SAMPLES, p_values=(0.0, 1.2), resamples=0)
    assert sorted(at) == [1, 2, 3]
    # k = 1: c/n averaged over problems = (2/3 + 1/3) / 2; k = n: best of n per problem
    assert at[1][0].value == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert at[2][0].value == pytest.approx((1.0 + 2 / 3) / 2)  # 1 - C(1,2)/C(3,2) = 1; 1 - C(2,2)/C(3,2)
    assert at[3][0].value == 1.0 and at[3][0].problems == 2
    assert at[1][1].value == pytest.approx((1 / 3 + 1 / 3) / 2)  # > 1.2: 1.5 and 2.0
    # a problem with fewer than k samples is left out (and counted as such), not scored as a failure
    short = metrics.fast_p_at_k([[1.5, 2.0], [None]], ks=[2], p_values=(0.0,), resamples=0)[2][0]
    assert (short.value, short.problems, short.short) == (1.0, 1, 1)


def test_bootstrap_intervals_resample_problems_and_are_seeded():
    one_problem = [[1.5, None, None]]  # resampling problems can only redraw this one: no spread
    (f,) = metrics.view_table(one_problem, (0.0,), view="trajectory")
    assert f.ci95 == pytest.approx((1 / 3, 1 / 3))
    bests = [[1.5], [None], [2.0], [None], [0.5], [3.0], [None], [1.1]]
    a = metrics.view_table(bests, (1.0,))[0]
    b = metrics.view_table(bests, (1.0,))[0]
    c = metrics.view_table(bests, (1.0,), seed=7)[0]
    assert a.ci95 == b.ci95  # same seed, same interval
    assert a.ci95[0] < a.value < a.ci95[1] and 0.0 <= a.ci95[0] and a.ci95[1] <= 1.0
    assert c.ci95 != a.ci95 or c.ci95[0] < a.value  # another seed draws other resamples
    assert metrics.view_table(bests, (1.0,), resamples=0)[0].ci95 is None
    # the interval narrows with more problems showing the same rate
    wide = metrics.view_table([[1.5], [None]] * 4, (1.0,))[0].ci95
    narrow = metrics.view_table([[1.5], [None]] * 100, (1.0,))[0].ci95
    assert narrow[1] - narrow[0] < wide[1] - wide[0]


def test_by_turn_view_counts_problems_best_of_samples():
    # problem 1: sample 0 correct 1.6x at turn 3, sample 1 correct 1.0x at turn 1; problem 2: never
    table = metrics.by_turn_view([[A, B], [C]], p_values=(0.0, 1.0), resamples=0)
    assert [(table[k][0].numerator, table[k][1].numerator) for k in (1, 2, 3)] == [(1, 0), (1, 0), (1, 1)]
    assert {f.denominator for row in table.values() for f in row} == {2}


def costly(idx, status, speedup=None, tokens=(0, 0), cost=None, gpu_s=None):
    return {**turn(idx, status, speedup), "tokens_in": tokens[0], "tokens_out": tokens[1], "cost_usd": cost,
            "gpu_s": gpu_s}  # fmt: skip


def test_fast_p_against_a_cumulative_budget_by_hand():
    # spends 100, 200, 300 tokens (cumulative 100, 300, 600); correct 0.9x at turn 2, 1.6x at turn 3
    t = [costly(1, "incorrect", tokens=(80, 20)), costly(2, "correct", 0.9, (150, 50)),
         costly(3, "correct", 1.6, (250, 50))]  # fmt: skip
    assert metrics.budget_points([[t]], "tokens") == [100.0, 300.0, 600.0]
    curve = metrics.by_budget(
        [[t]], "tokens", [50, 100, 299, 300, 600, 10_000], p_values=(0.0, 1.0), resamples=0
    )
    assert [(b, f0.numerator, f1.numerator) for b, (f0, f1) in curve] == [
        (50, 0, 0), (100, 0, 0), (299, 0, 0), (300, 1, 0), (600, 1, 1), (10_000, 1, 1)
    ]  # fmt: skip
    # dollars and GPU-seconds the same way; an unknown price counts 0
    dollars = [costly(1, "correct", 2.0, cost=None), costly(2, "correct", 3.0, cost=0.5)]
    assert metrics.budget_points([[dollars]], "cost_usd") == [0.0, 0.5]
    assert (
        metrics.by_budget([[dollars]], "cost_usd", [0.0], p_values=(2.5,), resamples=0)[0][1][0].numerator
        == 0
    )
    assert metrics.turn_cost(costly(1, "correct", gpu_s=2.5), "gpu_s") == 2.5
    with pytest.raises(ValueError, match="budget"):
        metrics.turn_cost(t[0], "joules")


def test_budget_points_are_thinned_to_quantiles_keeping_the_largest():
    trajs = [[[costly(i, "incorrect", tokens=(j, 0)) for i in range(1, 11)]] for j in range(1, 31)]
    points = metrics.budget_points(trajs, "tokens", max_points=12)
    assert len(points) <= 13 and points == sorted(points) and points[-1] == 300.0


def test_geomean_speedup_of_correct_trajectories():
    g = metrics.geomean_speedup([2.0, 0.5, None, 4.0])
    assert g == {"value": pytest.approx(4 ** (1 / 3)), "n": 3, "of": 4}  # (2 x 0.5 x 4) ** (1/3)
    assert metrics.geomean_speedup([None]) == {"value": None, "n": 0, "of": 1}


def test_status_mix_by_turn_with_trajectories_that_ended_early():
    mix = metrics.status_by_turn([A, B, C])
    assert mix[0] == {"k": 1, "counts": {"correct": 1, "incorrect": 1, "compile_error": 1}, "ended": 0,
                      "trajectories": 3}  # fmt: skip
    assert mix[2] == {"k": 3, "counts": {"correct": 1, "incorrect": 1}, "ended": 1, "trajectories": 3}
    assert metrics.status_by_turn([[{"idx": 1, "status": None}]])[0]["counts"] == {"pending": 1}
