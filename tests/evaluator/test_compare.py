"""The correctness comparison: KernelBench's allclose verdict and the mismatch statistics, computed in
chunks so a level-1-sized output does not need ~10x its size in temporaries."""

import math

import pytest
import torch

from evaluator import compare
from evaluator.compare import compare_outputs
from evaluator.strict import relative_error


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


def test_chunked_verdict_is_allclose_on_the_whole_tensor(monkeypatch):
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 5)
    e = torch.linspace(-1, 1, 101)
    assert compare_outputs(e, e + 5e-5, 1e-4, 1e-4, 0, 0).passed
    assert not compare_outputs(e, e + 5e-4, 1e-4, 1e-4, 0, 0).passed
    assert not compare_outputs(e, e.half(), 1e-4, 1e-4, 0, 0).passed  # wrong dtype, values off at fp16
