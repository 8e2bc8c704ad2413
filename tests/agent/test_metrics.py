import pytest
from kb_agent.agent.metrics import P_VALUES, best_speedup, by_turn, fast_p, fast_p_counts, fast_p_table


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
    assert table[2].to_dict() == {"p": 1.0, "numerator": 1, "denominator": 3, "value": pytest.approx(1 / 3)}
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
