"""The correctness comparison: KernelBench's allclose verdict and the mismatch statistics, computed in
chunks so a level-1-sized output does not need ~10x its size in temporaries."""

import math
from pathlib import Path

import pytest
import torch
from kb_agent.agent.feedback import trial_line
from kb_agent.evaluator import compare
from kb_agent.evaluator.compare import compare_outputs, relative_error


def _pair():
    g = torch.Generator().manual_seed(0)
    e = torch.randn(37, 29, generator=g)
    a = e.clone()
    a[3, 4] += 1.0
    a[20, 0] = float("nan")
    a[36, 28] -= 0.5
    return e, a


def test_mismatch_statistics_name_the_elements_that_differ():
    e, a = _pair()
    r = compare_outputs(e, a, 1e-4, 1e-4, trial=0, seed=1)
    assert not r.passed and r.problem == "values"
    assert r.mismatched == 3 and r.numel == e.numel() and r.nan_actual == 1
    assert [m["index"] for m in r.first_mismatches] == [[3, 4], [20, 0], [36, 28]]
    assert r.first_mismatches[1]["actual"] == "nan"
    assert r.max_abs_diff == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 24])
def test_chunked_statistics_equal_the_one_shot_ones(monkeypatch, chunk):
    e, a = _pair()
    whole = compare_outputs(e, a, 1e-4, 1e-4, trial=0, seed=1)
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", chunk)
    parts = compare_outputs(e, a, 1e-4, 1e-4, trial=0, seed=1)
    assert parts == whole
    assert math.isclose(relative_error(e, e * 1.001), 1e-3, rel_tol=1e-4)


@pytest.mark.parametrize("chunk", [1, 40, 1 << 24])
def test_non_contiguous_outputs_chunk_in_slabs_with_the_same_statistics(monkeypatch, chunk):
    e, a = _pair()
    whole = compare_outputs(e, a, 1e-4, 1e-4, trial=0, seed=1)
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", chunk)
    # the same values, laid out transposed in memory: statistics and indices must not change
    et, at = e.t().contiguous().t(), a.t().contiguous().t()
    assert not et.is_contiguous() and compare_outputs(et, at, 1e-4, 1e-4, trial=0, seed=1) == whole
    flat = [s for s, _, _ in compare.flat_chunks(torch.zeros(()).expand(37, 29), e)]
    assert flat == list(range(0, 37 * 29, max(1, chunk // 29) * 29))[: len(flat)] and flat[0] == 0


@pytest.mark.parametrize("chunk", [7, 1 << 24])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_a_passing_trial_gets_the_statistics_of_the_full_float64_account(monkeypatch, chunk, dtype):
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", chunk)
    g = torch.Generator().manual_seed(3)
    e = torch.randn(41, 23, generator=g).to(dtype)
    e[0, 0] = 0.0  # a zero reference element: the relative difference divides by the clamp
    a = (e.double() + 1e-3 * torch.randn(41, 23, generator=g, dtype=torch.float64)).to(dtype)
    fast = compare_outputs(e, a, 1e-2, 1e-2, 0, 0)
    assert fast.passed and fast.mismatched == 0 and fast.first_mismatches == []
    full = compare.TrialResult(trial=0, seed=0, passed=False, numel=e.numel())
    passed, _ = compare._chunked_stats(e, a, 1e-2, 1e-2, full)
    assert passed
    for field in ("max_abs_diff", "mean_abs_diff", "max_rel_diff"):
        assert getattr(fast, field) == pytest.approx(getattr(full, field), rel=1e-5), field
    assert (fast.mismatched, fast.mismatch_fraction) == (full.mismatched, full.mismatch_fraction)


def test_the_passing_shortcut_leaves_a_mismatch_or_a_non_finite_output_to_the_full_account():
    e, a = _pair()
    r = compare.TrialResult(trial=0, seed=0, passed=False, numel=e.numel())
    assert not compare._passing_stats(e, a, 1e-4, 1e-4, r) and r.max_abs_diff is None
    inf = torch.full((3,), float("inf"))
    same = compare_outputs(inf, inf.clone(), 1e-4, 1e-4, 0, 0)
    assert same.passed and same.inf_expected == 3 and same.max_abs_diff is None  # no finite difference


def _near_the_bound(dtype, atol, rtol, n=4000, seed=5):
    """Pairs whose differences sit around allclose's bound: within it, on it, just past it, at half of
    it, with zeros, huge values, NaN and infinities sprinkled in."""
    g = torch.Generator().manual_seed(seed)
    e = torch.randn(n, generator=g, dtype=torch.float64) * torch.logspace(-8, 30, n, dtype=torch.float64)
    a = e.clone()
    bound = atol + rtol * a.abs()
    factor = torch.tensor([0.0, 0.25, 0.4999, 0.5, 0.5001, 0.99, 1.0, 1.0001, 2.0], dtype=torch.float64)
    a = a + bound * factor[torch.randint(0, len(factor), (n,), generator=g)]
    return e.to(dtype), a.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("tol", [(1e-2, 1e-2), (1e-4, 1e-4), (1e-5, 0.0), (0.0, 1e-3), (0.0, 0.0)])
def test_the_one_sweep_shortcut_never_passes_what_allclose_fails(dtype, tol):
    atol, rtol = tol
    e, a = _near_the_bound(dtype, atol, rtol)
    for i in range(0, len(e), 50):  # windows of 50 elements: many pass, many fail
        ew, aw = e[i : i + 50], a[i : i + 50]
        r = compare.TrialResult(trial=0, seed=0, passed=False, numel=ew.numel())
        if compare._margin_pass(ew, aw, atol, rtol, r):
            assert torch.allclose(ew, aw, atol=atol, rtol=rtol), (i, ew, aw)
            assert r.mismatched == 0 and r.nan_actual == 0
        kernelbench = torch.allclose(ew, aw, atol=atol, rtol=rtol)
        assert compare_outputs(ew, aw, atol, rtol, 0, 0).passed == kernelbench
    specials = [(float("nan"), 1.0), (1.0, float("nan")), (float("inf"), float("inf")), (1.0, float("inf")),
                (float("inf"), 1.0), (-float("inf"), float("inf")), (3e38, -3e38)]  # fmt: skip
    for ev, av in specials:
        ew, aw = torch.tensor([0.5, ev], dtype=dtype), torch.tensor([0.5, av], dtype=dtype)
        r = compare.TrialResult(trial=0, seed=0, passed=False, numel=2)
        assert not compare._margin_pass(ew, aw, atol, rtol, r) and r.max_abs_diff is None, (ev, av)


@pytest.mark.parametrize("chunk", [7, 1 << 25])
def test_the_one_sweep_shortcut_gives_the_statistics_of_the_full_account(monkeypatch, chunk):
    monkeypatch.setattr(compare, "FAST_CHUNK_ELEMENTS", chunk)
    g = torch.Generator().manual_seed(4)
    e = torch.randn(41, 23, generator=g)
    e[0, 0] = 0.0
    a = e + 1e-4 * torch.randn(41, 23, generator=g)
    for ew, aw in ((e, a), (e.t(), a.t())):  # contiguous, and transposed (slabs)
        fast = compare.TrialResult(trial=0, seed=0, passed=False, numel=ew.numel())
        assert compare._margin_pass(ew, aw, 1e-2, 1e-2, fast)
        full = compare.TrialResult(trial=0, seed=0, passed=False, numel=ew.numel())
        assert compare._chunked_stats(ew, aw, 1e-2, 1e-2, full)[0]
        for field in ("max_abs_diff", "mean_abs_diff", "max_rel_diff"):
            assert getattr(fast, field) == pytest.approx(getattr(full, field), rel=1e-5), field
    # a difference between half the bound and the bound: not the shortcut's, still KernelBench's pass
    near = e + 0.75 * (1e-2 + 1e-2 * e.abs())
    r = compare.TrialResult(trial=0, seed=0, passed=False, numel=e.numel())
    assert not compare._margin_pass(e, near, 1e-2, 1e-2, r)
    assert compare_outputs(e, near, 1e-2, 1e-2, 0, 0).passed


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_exact_outputs_pass_on_the_equality_shortcut_with_the_full_accounts_statistics(monkeypatch, dtype):
    monkeypatch.setattr(compare, "FAST_CHUNK_ELEMENTS", 7)
    e = torch.randn(41, 23, generator=torch.Generator().manual_seed(8)).to(dtype)
    e[0, 0] = -0.0
    a = e.clone()
    a[0, 0] = 0.0  # -0.0 equals 0.0
    for ew, aw in ((e, a), (e.t(), a.t())):  # contiguous, and transposed (slabs)
        fast = compare.TrialResult(trial=0, seed=0, passed=False, numel=ew.numel())
        assert compare._identical_pass(ew, aw, fast)
        full = compare.TrialResult(trial=0, seed=0, passed=False, numel=ew.numel())
        assert compare._chunked_stats(ew, aw, 1e-2, 1e-2, full)[0]
        for field in ("max_abs_diff", "mean_abs_diff", "max_rel_diff", "mismatched", "first_mismatches"):
            assert getattr(fast, field) == getattr(full, field), field
        assert (fast.nan_expected, fast.inf_actual) == (0, 0)


def test_the_equality_shortcut_leaves_non_finite_late_and_mixed_differences_to_the_others(monkeypatch):
    monkeypatch.setattr(compare, "FAST_CHUNK_ELEMENTS", 7)
    e = torch.randn(50, generator=torch.Generator().manual_seed(9))
    late = e.clone()
    late[-1] += 1.0  # only the last chunk differs
    nan = e.clone()
    nan[30] = float("nan")
    inf = e.clone()
    inf[3] = float("inf")
    cases = [(e, late, False), (nan, nan, False), (inf, inf.clone(), True), (e, e.double(), False),
             (e.int(), e.int(), True)]  # fmt: skip
    for ew, aw, kernelbench in cases:
        r = compare.TrialResult(trial=0, seed=0, passed=False, numel=ew.numel())
        assert not compare._identical_pass(ew, aw, r) and r.max_abs_diff is None
        # a candidate returning the reference's own NaN-holding tensor still fails, as in KernelBench
        assert compare_outputs(ew, aw, 1e-2, 1e-2, 0, 0).passed == kernelbench


def test_the_second_sweep_passes_differences_past_atol_within_half_of_rtols_bound():
    """Large outputs: max |a - e| is past atol/2, so `_margin_pass`'s second sweep decides, with the
    rtol term; its statistics are still the full account's."""
    g = torch.Generator().manual_seed(10)
    e = 100.0 + torch.rand(300, generator=g)
    a = e + 0.3 * 1e-2 * e.abs() * torch.rand(300, generator=g)
    fast = compare.TrialResult(trial=0, seed=0, passed=False, numel=e.numel())
    assert compare._margin_pass(e, a, 1e-2, 1e-2, fast) and fast.max_abs_diff > 1e-2 / 2
    full = compare.TrialResult(trial=0, seed=0, passed=False, numel=e.numel())
    assert compare._chunked_stats(e, a, 1e-2, 1e-2, full)[0]
    for field in ("max_abs_diff", "mean_abs_diff", "max_rel_diff"):
        assert getattr(fast, field) == pytest.approx(getattr(full, field), rel=1e-5), field
    r = compare.TrialResult(trial=0, seed=0, passed=False, numel=e.numel())
    assert not compare._margin_pass(e, e + 0.6 * 1e-2 * e.abs(), 1e-2, 1e-2, r) and r.max_abs_diff is None


def test_relative_error_of_empty_outputs_has_no_scale():
    """helper-20 (2026-12-07): outputs that are all empty raised inside `torch.stack` (no chunk had a
    norm); an empty output beside a non-empty one was fine."""
    empty = torch.zeros(0, 3)
    assert relative_error(empty, empty.clone()) is None
    assert relative_error((empty, empty), (empty.clone(), empty.clone())) is None


def test_relative_error_over_chunks_and_outputs(monkeypatch):
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 7)
    g = torch.Generator().manual_seed(6)
    e, f = torch.randn(10, 9, generator=g), torch.randn(5, generator=g)
    a, b = e + 0.01 * torch.randn(10, 9, generator=g), f * 1.5
    num = (a.double() - e.double()).square().sum() + (b.double() - f.double()).square().sum()
    want = math.sqrt(num / (e.double().square().sum() + f.double().square().sum()))
    assert relative_error((e, f), (a, b)) == pytest.approx(want, rel=1e-9)
    a[9, 8] = float("nan")
    assert relative_error(e, a) == float("inf")
    assert relative_error(torch.zeros(4), torch.ones(4)) is None  # no scale to compare against
    assert relative_error(e, e[:5]) == float("inf")  # a shape mismatch


def _relative_error_in_float64(e, a):
    return math.sqrt((a.double() - e.double()).square().sum() / e.double().square().sum())


def test_relative_error_in_the_outputs_dtype_agrees_with_float64_and_falls_back_past_its_range():
    """The difference is taken in float32 where both outputs are float32, and again in float64 where
    that is not finite: an honest output near float32's largest values must not read as infinitely
    wrong."""
    g = torch.Generator().manual_seed(7)
    e = torch.randn(4096, generator=g) * 1e3
    a = e + 1e-3 * torch.randn(4096, generator=g)
    assert relative_error(e, a) == pytest.approx(_relative_error_in_float64(e, a), rel=1e-5)
    assert relative_error(e, a.double()) == pytest.approx(_relative_error_in_float64(e, a), rel=1e-9)
    big = torch.full((1000,), 3.0e38)
    off = big.clone()
    off[0] = -3.0e38  # a difference of 6e38: past float32, well inside float64
    assert torch.isinf(torch.sub(off, big)).any()
    assert relative_error(big, off) == pytest.approx(_relative_error_in_float64(big, off), rel=1e-9)
    assert relative_error(big, off) < 1.0
    counts = torch.arange(10)
    assert relative_error(counts, counts + 1) == pytest.approx(_relative_error_in_float64(counts, counts + 1))
    assert relative_error(e, torch.full_like(e, float("inf"))) == float("inf")


def test_chunked_verdict_is_allclose_on_the_whole_tensor(monkeypatch):
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 5)
    e = torch.linspace(-1, 1, 101)
    assert compare_outputs(e, e + 5e-5, 1e-4, 1e-4, 0, 0).passed
    assert not compare_outputs(e, e + 5e-4, 1e-4, 1e-4, 0, 0).passed
    assert not compare_outputs(e, e.half(), 1e-4, 1e-4, 0, 0).passed  # wrong dtype, values off at fp16


def test_an_inf_in_the_output_is_a_counted_located_mismatch():
    e = torch.zeros(4, 4)
    a = e.clone()
    a[1, 2] = float("inf")
    r = compare_outputs(e, a, 1e-4, 1e-4, 0, 0)
    assert not r.passed and r.inf_actual == 1
    assert r.mismatched == 1 and [m["index"] for m in r.first_mismatches] == [[1, 2]]
    assert r.first_mismatches[0]["actual"] == "inf"
    same = compare_outputs(a, a.clone(), 1e-4, 1e-4, 0, 0)  # equal infinities match, as in allclose
    assert same.passed and same.mismatched == 0


@pytest.mark.parametrize(
    "actual, kinds",
    [
        (lambda y: (y,), ("Tensor", "tuple of 1")),
        (lambda y: [y], ("Tensor", "list of 1")),
        (lambda y: None, ("Tensor", "None")),
        (lambda y: y.numpy(), ("Tensor", "ndarray")),
    ],
)
def test_a_tensor_reference_needs_a_tensor_output_as_in_kernelbench(actual, kinds):
    y = torch.rand(3)
    r = compare_outputs(y, actual(y.clone()), 1e-4, 1e-4, 0, 0)
    assert not r.passed and r.problem == "type"
    assert (r.expected_dtype, r.actual_dtype) == kinds


def test_tuples_compare_element_by_element_and_by_length():
    y, z = torch.rand(3), torch.rand(2)
    assert compare_outputs((y, z), (y.clone(), z.clone()), 1e-4, 1e-4, 0, 0).passed
    r = compare_outputs((y, z), (y.clone(),), 1e-4, 1e-4, 0, 0)
    assert r.problem == "type" and (r.expected_dtype, r.actual_dtype) == ("tuple of 2", "tuple of 1")


def test_a_different_dtype_fails_as_torch_allclose_raises_on_it():
    y = torch.rand(8)
    r = compare_outputs(y, y.double(), 1e-4, 1e-4, 0, 0)
    assert not r.passed and r.problem == "dtype"
    assert r.mismatched == 0  # the values themselves agree: the message points at the dtype


def test_feedback_names_the_failing_output_and_nan_semantics():
    from kb_agent.agent.feedback import trial_line

    y, z = torch.rand(3), torch.rand(4)
    bad = z.clone()
    bad[2] += 1
    line = trial_line(compare_outputs((y, z), (y.clone(), bad), 1e-4, 1e-4, 0, 0))
    assert line.startswith("output[1]: ") and "at [2]" in line
    nan_ref = torch.full((2,), float("nan"))
    assert "NaN never matches" in trial_line(compare_outputs(nan_ref, nan_ref.clone(), 1e-4, 1e-4, 0, 0))
    inf_out = y.clone()
    inf_out[0] = float("inf")
    assert "(finite elements)" in trial_line(compare_outputs(y, inf_out, 1e-4, 1e-4, 0, 0))
    assert trial_line(compare_outputs(y, (y,), 1e-4, 1e-4, 0, 0)) == "output type tuple of 1, expected Tensor"


# -- the diagnosis: one line naming the pattern, and the map (evaluator.diagnosis) ------------------------
def _relu_pair(rows=100, cols=96):
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(1))
    return x, torch.relu(x)


def _diagnosis(e, a, **kw):
    r = compare_outputs(e, a, 1e-4, 1e-4, trial=0, seed=0, **kw)
    assert not r.passed and r.problem in ("values", "shape")
    return r.diagnosis


def test_tail_only_wrong_names_the_last_partial_block():
    v = torch.randn(4100, generator=torch.Generator().manual_seed(0))
    a = v.clone()
    a[4096:] = 0
    text = _diagnosis(v, a)
    assert "never written: your output is 0" in text
    assert "the tail: flat elements 4096..4099 (the last 4 of 4100, from a multiple of 4096)" in text


def test_boundary_columns_and_rows_and_both_edges():
    _, e = _relu_pair()
    a = e.clone()
    a[:, 64:] += 1
    assert "the boundary: output[:, 64:96] (the last 32 of 96 along dim 1" in _diagnosis(e, a)
    a = e.clone()
    a[96:] += 1
    assert "the boundary: output[96:100] (the last 4 of 100 along dim 0" in _diagnosis(e, a)
    a[:, 64:] += 1
    assert "the edges: the last 4 of 100 rows and the last 32 of 96 columns" in _diagnosis(e, a)


def test_one_row_one_column_one_channel_one_block():
    _, e = _relu_pair()
    a = e.clone()
    a[7] += 0.5
    assert "one row: output[7]" in _diagnosis(e, a)
    a = e.clone()
    a[:, 5] -= 2
    assert "one column: output[:, 5]" in _diagnosis(e, a)
    y = torch.randn(4, 8, 16, 16, generator=torch.Generator().manual_seed(2))
    a = y.clone()
    a[:, 3] *= 2
    text = _diagnosis(y, a)
    assert "scale factor: your values are 2 times" in text and "one channel (dim 1): output[:, 3]" in text
    a = e.clone()
    a[32:64, 32:64] = 7.0
    assert _diagnosis(e, a) == "only one block: output[32:64, 32:64] is wrong, the rest matches."


def test_transposed_or_permuted_layout():
    m = torch.randn(64, 64, generator=torch.Generator().manual_seed(3))
    assert "your output is the reference transposed" in _diagnosis(m, m.t().contiguous())
    z = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(4))
    channels_last = z.permute(0, 2, 3, 1).contiguous().view(2, 3, 8, 8)
    assert "element order of its .permute(0, 2, 3, 1)" in _diagnosis(z, channels_last)
    # wrong shapes holding the right values
    assert "your output is the reference's .permute(1, 0)" in _diagnosis(m[:32], m[:32].t().contiguous())
    assert "view or reshape your result as [64, 64]" in _diagnosis(m, m.reshape(32, 128).clone())
    assert compare_outputs(m, m[:32], 1e-4, 1e-4, 0, 0).diagnosis == ""  # fewer elements: no claim


def test_constant_scale_offset_and_sign_flip():
    x, e = _relu_pair()
    assert "scale factor: your values are 0.5 (1/2) times the reference's" in _diagnosis(e, e * 0.5)
    assert "constant offset: your values are the reference's + 0.25; the wrong elements: every element" in (
        _diagnosis(e, e + 0.25)
    )
    assert "sign flip" in _diagnosis(x, -x)


def test_region_never_written_zeros_input_or_garbage():
    x, e = _relu_pair()
    a = e.clone()
    a[:, 5] = 0
    assert "your output is 0 there" in _diagnosis(e, a)
    a = x.clone()
    a[50:] = e[50:]
    assert "still holds input 0's values" in _diagnosis(e, a, inputs=[x])
    assert "still holds" not in _diagnosis(e, a)  # without the inputs, no such claim
    a = e.clone()
    a[10:20] = 3e38
    assert "holds garbage (uninitialised memory" in _diagnosis(e, a)


def test_nan_says_where_it_starts_and_whether_the_inputs_are_extreme():
    x, e = _relu_pair()
    a = e.clone()
    a[3, 17] = float("nan")
    text = _diagnosis(e, a, inputs=[x])
    assert "NaN/Inf where the reference is finite (1 NaN), starting at [3, 17]" in text
    assert "the inputs there are ordinary (input 0: " in text
    x[3, 17] = 1e30
    e = torch.relu(x)
    a = e.clone()
    a[3, 17] = float("inf")
    assert "the inputs there are extreme (input 0: 1e+30" in _diagnosis(e, a, inputs=[x])
    e[0, 0] = a[0, 0] = float("nan")
    a[3, 17] = e[3, 17]
    assert "the reference itself gives NaN at 1 elements" in _diagnosis(e, a)


def test_nondeterministic_needs_a_second_call_that_differs():
    _, e = _relu_pair()
    g = torch.Generator().manual_seed(5)

    def noisy():
        return e + (torch.rand(e.shape, generator=g) < 0.1) * 0.1

    first = noisy()
    calls = []
    text = _diagnosis(e, first, rerun=lambda: calls.append(1) or noisy())
    assert calls == [1] and "nondeterministic: a second call on the same inputs differs" in text
    assert "nondeterministic" not in _diagnosis(e, first, rerun=lambda: first.clone())
    assert "raised RuntimeError: boom" in _diagnosis(
        e, first, rerun=lambda: (_ for _ in ()).throw(RuntimeError("boom"))
    )
    compare_outputs(e, e.clone(), 1e-4, 1e-4, 0, 0, rerun=lambda: calls.append(2))
    assert calls == [1]  # a passing trial makes no second call


def test_error_just_over_the_tolerance_is_precision():
    _, e = _relu_pair()
    noisy = e + 3e-4 * torch.randn(e.shape, generator=torch.Generator().manual_seed(6))
    assert "an error just over the tolerance" in _diagnosis(e, noisy)
    far = e.clone()
    far[torch.rand(e.shape, generator=torch.Generator().manual_seed(7)) < 0.2] = 5.3
    assert _diagnosis(e, far).startswith("no simple pattern: the wrong elements are spread over the output")


def test_mismatch_map_marks_where_the_output_differs():
    _, e = _relu_pair(64, 64)
    a = e.clone()
    a[:, 48:] += 1
    a[0, 0] = float("nan")
    r = compare_outputs(e, a, 1e-4, 1e-4, 0, 0)
    caption, *rows = r.mismatch_map
    assert "64 rows (dim 0) x 64 columns (dim 1)" in caption and len(rows) == 16
    assert all(len(row) == 32 for row in rows)
    assert rows[0] == "N" + "." * 23 + "#" * 8
    assert all(row == "." * 24 + "#" * 8 for row in rows[1:])
    short = compare_outputs(torch.ones(3), torch.zeros(3), 1e-4, 1e-4, 0, 0).mismatch_map
    assert short[1:] == ["#", "#", "#"]
    assert compare_outputs(e, e.clone(), 1e-4, 1e-4, 0, 0).mismatch_map == []


def test_old_stored_trials_load_without_the_new_fields():
    from kb_agent.evaluator.result import EvalResult

    old = {"status": "incorrect", "correctness": {"results": [{"trial": 0, "seed": 1, "passed": False}]}}
    t = EvalResult.from_dict(old).correctness.results[0]
    assert t.diagnosis == "" and t.mismatch_map == []


# -- end to end: Triton candidates under the interpreter, diagnosed in the correctness stage -------------
CANDIDATES = Path(__file__).resolve().parent.parent / "candidates"


def _evaluate(candidate: str, problem: str):
    from kb_agent.evaluator import EvalSettings, Status, evaluate
    from kb_agent.problems import resolve_one

    r = evaluate(
        resolve_one(problem), (CANDIDATES / f"{candidate}.py").read_text(), EvalSettings(device="cpu")
    )
    assert r.status == Status.INCORRECT, r.message
    return r.correctness.results[-1]


@pytest.mark.slow
def test_end_to_end_a_floor_grid_leaves_the_tail_unwritten(tmp_path):
    relu = (Path(__file__).resolve().parents[2] / "problems" / "toy" / "1_relu.py").read_text()
    (tmp_path / "relu_1000.py").write_text(relu.replace("dim = 1024", "dim = 1000"))
    t = _evaluate("triton_relu_tail_unwritten", str(tmp_path / "relu_1000.py"))
    assert "never written" in t.diagnosis and "the tail: flat elements 15360..15999" in t.diagnosis
    assert t.mismatch_map and set(t.mismatch_map[-1]) <= set(".+#")


@pytest.mark.slow
def test_end_to_end_a_stateful_kernel_is_nondeterministic():
    t = _evaluate("triton_relu_stateful", "toy/relu")
    assert t.diagnosis.startswith("nondeterministic: a second call on the same inputs differs")


@pytest.mark.slow
def test_end_to_end_swapped_output_strides_are_a_transposed_layout():
    t = _evaluate("triton_matmul_transposed", "toy/small_matmul")
    assert "your output is the reference transposed" in t.diagnosis


def test_end_to_end_nan_names_its_start_and_the_inputs():
    t = _evaluate("nan_output", "toy/relu")
    assert "starting at [0, 0]" in t.diagnosis and "the inputs there are ordinary" in t.diagnosis


def test_an_output_on_another_device_fails_as_kernelbench_allclose_raises_on_it():
    # KernelBench's torch.allclose(reference, candidate) raises for tensors on two devices (a CUDA
    # reference against a CPU output: "Expected all tensors to be on the same device"), a failed trial
    # there; moving the output over first passed it. meta stands in for the second device on the CPU.
    e = torch.ones(4, 3)
    r = compare_outputs(e, torch.ones(4, 3, device="meta"), 1e-4, 1e-4, 0, 0)
    assert not r.passed and r.problem == "device"
    assert "another device" in trial_line(r)
    assert compare_outputs(e, e.clone(), 1e-4, 1e-4, 0, 0).passed


@pytest.mark.parametrize(("dtype", "off"), [(torch.float16, 0.0101), (torch.bfloat16, 0.01013)])
def test_mismatches_are_counted_by_allclose_s_own_test_in_the_output_dtype(dtype, off):
    # torch.allclose on half-precision outputs tests |e - a| <= atol + rtol * |a| in that dtype, where
    # the bound 1e-2 rounds up: 0.0101 against 0 passes. Counted in float64 it was a mismatch, so a
    # trial that passed (the full account runs for the Inf) listed one, and a failing one one too many.
    e = torch.tensor([0.0, float("inf"), 0.0], dtype=dtype)
    a = torch.tensor([off, float("inf"), 0.0], dtype=dtype)
    assert torch.allclose(e, a, atol=1e-2, rtol=1e-2)
    r = compare_outputs(e, a, 1e-2, 1e-2, 0, 0)
    assert r.passed and r.mismatched == 0 and r.first_mismatches == []
    a[2] = 1.0
    r = compare_outputs(e, a, 1e-2, 1e-2, 0, 0)
    assert not r.passed and r.mismatched == 1 and [m["index"] for m in r.first_mismatches] == [[2]]


@pytest.mark.parametrize("rtol", [3.5e38, 1e39, 1e300])
def test_the_one_sweep_shortcut_takes_no_tolerance_past_the_dtype_s_max(rtol):
    # in float32 torch.allclose rounds such an rtol to inf, and inf * |0| is NaN: the element a = 0 fails
    # (rtol/2 fitted float32 and passed it; past 2 * float32's max torch.add's alpha raised)
    e, a = torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.0])
    kernelbench = torch.allclose(e, a, atol=1e30, rtol=rtol)
    assert compare_outputs(e, a, 1e30, rtol, 0, 0).passed == kernelbench
    assert compare_outputs(e.double(), a.double(), 1e30, rtol, 0, 0).passed


@pytest.mark.parametrize("dtype, big", [(torch.float32, 1e30), (torch.float64, 1e300)])
def test_the_one_sweep_shortcut_leaves_an_overflowing_relative_difference_to_the_full_account(dtype, big):
    # |a - e| / 1e-12 overflows the outputs' dtype: the shortcut's max_rel_diff was inf, the full
    # account's 1e42 in float32 (float64 differences) and in float64 that of the finite elements only
    e, a = torch.tensor([0.0, 1.0], dtype=dtype), torch.tensor([big, 1.0], dtype=dtype)
    assert torch.allclose(e, a, atol=0.0, rtol=3.0)
    fast = compare_outputs(e, a, 0.0, 3.0, 0, 0)
    full = compare.TrialResult(trial=0, seed=0, passed=False, numel=e.numel())
    assert compare._chunked_stats(e, a, 0.0, 3.0, full)[0] and fast.passed
    for field in ("max_abs_diff", "mean_abs_diff", "max_rel_diff"):
        assert getattr(fast, field) == pytest.approx(getattr(full, field), rel=1e-5), field


def test_a_scale_factor_with_an_infinite_inverse_is_diagnosed_without_a_crash():
    # a / e = -2.4e-313 (subnormal): round(1 / |k|) raised OverflowError out of compare_outputs
    e, a = (
        torch.tensor(-4.0923113839185104e299, dtype=torch.float64),
        torch.tensor(1e-13, dtype=torch.float64),
    )
    r = compare_outputs(e, a, 1e-8, 1e-5, 0, 0)
    assert not r.passed and r.problem == "values" and "scale factor" in r.diagnosis


def test_an_output_of_another_structure_is_infinitely_wrong_and_of_another_type():
    """helper-13 (2026-12-07): an empty tuple in place of the reference's tensor zipped to no pair, so
    the relative error was None (no scale: passing) and the exact types had nothing to differ, and a
    wrong kernel passed every strict trial off the declared distribution by returning () there."""
    from kb_agent.evaluator.strict import exact_types

    e = torch.randn(8)
    assert relative_error(e, ()) == float("inf")
    assert relative_error((e, e), (e,)) == float("inf")
    assert exact_types(e, ()) is not None
    assert exact_types((e, e), [e, e]) is not None  # a list where the reference returns a tuple
    assert exact_types((e, e), (e, e.clone())) is None


def test_an_output_with_methods_of_its_own_is_read_through_tensors_class():
    """helper-23 (2026-12-07): a plain tensor whose instance attribute `detach` returned 2x its values
    passed a 0.5x output through the comparison, the relative error, the poison pass and the in-place
    check; readers now go through `compare.plain` (Tensor's own detach) and strict mode names it."""
    from kb_agent.evaluator.kernel_probe import output_unchanged
    from kb_agent.evaluator.strict import exact_types, same_values, shadowed_methods

    e = torch.rand(64) + 0.5
    half = e * 0.5
    half.detach = lambda: torch.Tensor.detach(half) * 2
    half.is_floating_point = lambda: True
    assert not compare_outputs(e, half, 1e-4, 1e-4, 0, 0).passed
    assert relative_error(e, half) == pytest.approx(0.5)
    assert not output_unchanged(torch, half, e, 1e-4, 1e-4)
    assert not same_values(torch, half, e)
    assert shadowed_methods(half) == ["detach", "is_floating_point"]
    assert "detach" in exact_types(e, half)
    ok = e.clone()
    ok.note = "a name of the candidate's own is no method of Tensor's"
    assert shadowed_methods(ok) == [] and exact_types(e, ok) is None


def test_an_input_with_methods_of_its_own_is_written_and_copied_through_tensors_class():
    """helper-24 (2026-12-07): an input tensor given `copy_` of its own ran the candidate's code in the
    harness's write of fresh values (strict timing), outside the timed window; the harness's writes,
    copies and layouts now go through Tensor's own methods, and the layout check names the tensor."""
    from kb_agent.evaluator import timing
    from kb_agent.evaluator.compare import clone_args

    x = torch.zeros(8)
    ran = []
    x.copy_ = lambda *a, **k: ran.append("copy_")
    x.clone = lambda *a, **k: ran.append("clone")
    x.stride = lambda *a, **k: ran.append("stride") or (1,)
    assert torch.equal(clone_args([x])[0], torch.zeros(8))
    with pytest.raises(timing.InputsAltered, match="attributes of its own"):
        timing._check_layouts([x], [timing._layout_of(x)])
    timing._write_drawn([x], [torch.ones(8)])
    assert ran == [] and torch.equal(torch.Tensor.detach(x), torch.ones(8))
    # helper-25: an input made a subclass of the candidate's runs its __torch_function__ in every write
    y = torch.zeros(8)
    layout = [timing._layout_of(y)]

    class Own(torch.Tensor):
        pass

    y.__class__ = Own
    with pytest.raises(timing.InputsAltered, match="was made a"):
        timing._check_layouts([y], layout)
