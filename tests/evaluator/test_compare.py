"""The correctness comparison: KernelBench's allclose verdict and the mismatch statistics, computed in
chunks so a level-1-sized output does not need ~10x its size in temporaries."""

import math

import pytest
import torch
from kb_agent.evaluator import compare
from kb_agent.evaluator.compare import compare_outputs
from kb_agent.evaluator.strict import relative_error


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
