"""Correctness comparison of one candidate output against the reference output.

The verdict is KernelBench's (src/eval.py): exact shape, then `torch.allclose(reference, candidate,
atol, rtol)` — argument order included, so `rtol` scales |candidate|. The statistics around it are ours:
they tell the model what kind of mismatch it produced.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from kb_agent.evaluator import diagnosis
from kb_agent.evaluator.result import TrialResult

MAX_LISTED_MISMATCHES = 5
# statistics are computed this many elements at a time (128 MB per float64 temporary)
CHUNK_ELEMENTS = 1 << 24
# `_margin_pass`'s chunk: two buffers of the outputs' dtype (256 MB each in float64)
FAST_CHUNK_ELEMENTS = 1 << 25
# bound at import, which the worker does before the candidate's code runs: a candidate that replaces
# torch.allclose does not change the verdict (strict mode also reports the replacement)
_allclose = torch.allclose
_equal = torch.equal  # (the exact-output shortcut's; likewise)
_vector_norm = torch.linalg.vector_norm  # (strict mode's relative error; likewise)
_detach = torch.Tensor.detach
_clone = torch.Tensor.clone


def plain(t: torch.Tensor) -> torch.Tensor:
    """`t`'s values as a new tensor object (`torch.Tensor.detach`, read through the class): what the
    harness reads a candidate's output through. A method looked up on the output itself can be the
    candidate's: an instance attribute `detach` (methods are non-data descriptors, so it shadows
    Tensor's) handed every check twice a 0.5*relu output, or computed the output only when read, after
    the timed window (helper-23, 2026-12-07). The new object has no instance attributes."""
    return _detach(t)


def flatten_outputs(out: Any) -> list[Any]:
    """A model's output as a flat list: a tensor is [tensor]; tuples/lists are flattened in order."""
    if isinstance(out, (tuple, list)):
        return [x for item in out for x in flatten_outputs(item)]
    return [out]


def clone_args(values: Any) -> Any:
    """A copy of call arguments: every tensor cloned (`Tensor.clone`: a dense tensor keeps its strides, an
    expanded or overlapping one becomes contiguous), inside lists and tuples too; anything else shared."""
    if isinstance(values, torch.Tensor):
        return _clone(values)  # (Tensor's own: the candidate may have had `values`, see `plain`)
    if type(values) in (list, tuple):
        return type(values)(clone_args(v) for v in values)
    return values


def _scalar(x: torch.Tensor) -> float | str:
    """A 0-d tensor as a JSON-safe number: finite floats as float, NaN/Inf as "nan"/"inf"/"-inf"."""
    v = float(x.item())
    return v if v == v and abs(v) != float("inf") else str(v)


def flat_chunks(
    x: torch.Tensor, y: torch.Tensor, chunk: int | None = None
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """(flat start, chunk of x, chunk of y) over two same-shape tensors in row-major order, about
    `chunk` (default CHUNK_ELEMENTS) elements at a time, so elementwise work on a 1.6e9-element output
    keeps its temporaries to a few hundred MB. Contiguous tensors are cut as flat views; others (a transposed output, an expanded
    constant) in slabs along dim 0, so only one slab is ever copied."""
    chunk = chunk or CHUNK_ELEMENTS
    if x.dim() <= 1 or (x.is_contiguous() and y.is_contiguous()):
        xf, yf = x.reshape(-1), y.reshape(-1)
        for start in range(0, xf.numel(), chunk):
            yield start, xf[start : start + chunk], yf[start : start + chunk]
        return
    per_row = x[0].numel() if x.shape[0] else 1
    step = max(1, chunk // max(per_row, 1))
    for row in range(0, x.shape[0], step):
        yield row * per_row, x[row : row + step].reshape(-1), y[row : row + step].reshape(-1)


def _nonfinite_counts(x: torch.Tensor) -> tuple[int, int]:
    """(NaN count, infinity count) of a floating-point or complex tensor, chunk by chunk (`flat_chunks`):
    no 1.6e9-element boolean temporaries, one read of the counts at the end."""
    nans, infs = [], []
    for _, chunk, _ in flat_chunks(x, x):
        nans.append(torch.isnan(chunk).sum())
        infs.append(torch.isinf(chunk).sum())
    if not nans:
        return 0, 0
    counts = torch.stack([torch.stack(nans).sum(), torch.stack(infs).sum()]).tolist()
    return int(counts[0]), int(counts[1])


def _allclose_or_false(e: torch.Tensor, a: torch.Tensor, atol: float, rtol: float) -> bool:
    """KernelBench's `torch.allclose(reference, candidate)`; where it raises (different dtypes, which
    KernelBench then counts as a failed trial) False."""
    try:
        return bool(_allclose(e, a, atol=atol, rtol=rtol))
    except RuntimeError:
        return False


def _identical_pass(e: torch.Tensor, a: torch.Tensor, result: TrialResult) -> bool:
    """The exact case, cheaper than `_margin_pass`: True, with the statistics of a passing trial (all
    differences 0, no NaN or infinity, no mismatch), when both floating-point outputs hold the same
    dtype and equal, finite elements; otherwise False, `result` unchanged. Equal finite elements pass
    allclose at any tolerance, so the verdict is KernelBench's.

    Chunk by chunk (`flat_chunks`, FAST_CHUNK_ELEMENTS at a time): `torch.equal` (bound at import),
    which stops at the first chunk that differs, so a kernel whose outputs are not exact (most that
    compute a transcendental) loses one chunk's test; then the chunks' extremes (`aminmax`), read
    once at the end, for finiteness (`torch.equal` also answers True for a tensor and itself, NaN
    included). About 4 reads or writes of an output per element against `_margin_pass`'s 13; exact
    outputs are common in KernelBench level 1 (ReLU, Hardtanh, min/max/argmax reductions, copies)."""
    if e.dtype != a.dtype or not e.is_floating_point() or e.device != a.device:
        return False
    extremes = []
    for _, ec, ac in flat_chunks(e, a, FAST_CHUNK_ELEMENTS):
        if not _equal(ec, ac):
            return False
        extremes.append(torch.stack(torch.aminmax(ec)))
    if not extremes or not bool(torch.stack(extremes).isfinite().all()):
        return False
    result.max_abs_diff = result.mean_abs_diff = result.max_rel_diff = 0.0
    result.mismatched, result.mismatch_fraction, result.first_mismatches = 0, 0.0, []
    result.nan_expected = result.inf_expected = result.nan_actual = result.inf_actual = 0
    return True


def _margin_pass(e: torch.Tensor, a: torch.Tensor, atol: float, rtol: float, result: TrialResult) -> bool:
    """The common case in one cheap sweep: True, with the statistics of a passing trial filled in (no
    NaN or infinity, no mismatch), when every element is within half of allclose's bound,
    |a - e| <= atol/2 + rtol/2 * |a|; otherwise False, `result` unchanged, and the caller decides with
    torch.allclose itself.

    Why the verdict is KernelBench's: the test is computed in the outputs' own float32/float64, so
    rounding moves each side by a few units in the last place, far less than the factor of two to
    allclose's own bound (atol + rtol * |a|, computed by torch in the same dtype); a NaN or infinity on
    either side makes the difference NaN or infinite, which fails the test. So this never passes a
    trial allclose fails; a trial with elements between half the bound and the bound goes on to the
    exact tests. Only for the same float32/float64 dtypes (half precision rounds its bound coarsely,
    and a mixed pair fails in allclose anyway).

    The sweep (`flat_chunks`, FAST_CHUNK_ELEMENTS at a time, in two reused buffers of the outputs'
    dtype, no host sync) takes the signed difference d = a - e and reads it for max |d| (`aminmax`),
    sum |d| (a float64 1-norm) and max |d| / max(|e|, 1e-12): about 13 reads or writes of an output
    per element. Where max |d| <= atol/2 that decides (the rtol term only widens the bound); only
    otherwise does a second sweep test max(|d| - rtol/2 * |a|) <= atol/2, about 9 more. The one sweep
    of 2026-12-04 took that test every time, about 24 reads or writes per element: 0.057 s per
    1.6e9-element float32 comparison (KernelBench 1/19) on an H100, 26 of them per strict evaluation
    (`tests/bench/profile_stages.py`); `tests/bench/bench_compare.py` times both."""
    if e.dtype != a.dtype or e.dtype not in (torch.float32, torch.float64) or e.device != a.device:
        return False
    if not (math.isfinite(atol) and math.isfinite(rtol) and atol >= 0 and rtol >= 0):
        return False
    # torch rounds the tolerances to the outputs' dtype: past float32's max rtol is inf there (inf * 0 is
    # NaN, which allclose fails), while rtol/2 would pass, or overflow torch.add's alpha and raise
    if max(atol, rtol) > torch.finfo(e.dtype).max:
        return False
    diff = work = torch.empty(0, dtype=e.dtype, device=e.device)
    extremes, sums = [], []
    for _, ec, ac in flat_chunks(e, a, FAST_CHUNK_ELEMENTS):
        if diff.numel() < ec.numel():  # a slab of a non-contiguous output may be longer than a chunk
            diff, work = (torch.empty(ec.numel(), dtype=e.dtype, device=e.device) for _ in range(2))
        d, w = diff[: ec.numel()], work[: ec.numel()]
        torch.sub(ac, ec, out=d)  # NaN or infinite where either side is not finite
        extremes.append(torch.stack(torch.aminmax(d)))
        sums.append(_vector_norm(d, 1, dtype=torch.float64))
        torch.abs(ec, out=w)
        w.clamp_min_(1e-12)
        torch.div(d, w, out=w)
        extremes.append(torch.stack(torch.aminmax(w)))
    if not extremes:
        return False
    extremes = torch.stack(extremes).abs().amax(dim=1).to(torch.float64)  # max |d|, max rel, alternately
    read = torch.stack([extremes[0::2].max(), torch.stack(sums).sum(), extremes[1::2].max()])
    max_diff, sum_diff, max_rel = read.tolist()
    if not max_diff <= atol / 2 and not _within_half_bound(e, a, atol, rtol, diff, work):  # NaN included
        return False
    if not _set_passing_stats(result, max_diff, sum_diff, max_rel):
        return False
    result.nan_expected = result.inf_expected = result.nan_actual = result.inf_actual = 0
    return True


def _within_half_bound(
    e: torch.Tensor, a: torch.Tensor, atol: float, rtol: float, diff: torch.Tensor, work: torch.Tensor
) -> bool:
    """`_margin_pass`'s second sweep: max(|a - e| - rtol/2 * |a|) <= atol/2 over the outputs (False
    where that is NaN), in `diff` and `work`, buffers of the outputs' dtype at least a chunk long."""
    excess = []
    for _, ec, ac in flat_chunks(e, a, FAST_CHUNK_ELEMENTS):
        d, w = diff[: ec.numel()], work[: ec.numel()]
        torch.sub(ac, ec, out=d)
        d.abs_()
        torch.abs(ac, out=w)
        torch.add(d, w, alpha=-rtol / 2, out=w)  # |a - e| - rtol/2 * |a|: NaN where either is not finite
        excess.append(w.max())
    return float(torch.stack(excess).max()) <= atol / 2


def _set_passing_stats(result: TrialResult, max_diff: float, sum_diff: float, max_rel: float) -> bool:
    """Fill a passing trial's statistics (no mismatches) from its max and summed absolute difference
    and max relative difference, and return True; return False, `result` unchanged, where one of them
    overflowed, which the full float64 account (`_chunked_stats`) then takes."""
    if not all(math.isfinite(x) for x in (max_diff, sum_diff, max_rel)):
        return False
    result.max_abs_diff, result.max_rel_diff = max_diff, max_rel
    result.mean_abs_diff = sum_diff / result.numel
    result.mismatched, result.mismatch_fraction, result.first_mismatches = 0, 0.0, []
    return True


def _passing_stats(e: torch.Tensor, a: torch.Tensor, atol: float, rtol: float, result: TrialResult) -> bool:
    """The next case, after `_margin_pass` and the non-finite counts: when every chunk passes
    KernelBench's allclose and both outputs are finite, fill the statistics of a passing trial (max/mean absolute and max relative difference,
    no mismatches) and return True; otherwise change nothing and return False, and `_chunked_stats`
    makes the full float64 account a mismatch needs. Differences are taken in the outputs' common
    dtype (float32 at least) and summed in float64, each chunk's reductions left on the device until
    one read at the end: for a 1.6e9-element fp32 output, about 0.05 s on an H200 instead of 0.3 s."""
    if e.dtype != a.dtype or not (e.is_floating_point() and a.is_floating_point()):
        return False
    if result.nan_expected or result.inf_expected or result.nan_actual or result.inf_actual:
        return False
    work = torch.promote_types(e.dtype, torch.float32)
    maxes, sums, rels = [], [], []
    for _, ec, ac in flat_chunks(e, a):
        if not _allclose_or_false(ec, ac, atol, rtol):
            return False
        ec, ac = ec.to(work), ac.to(work)
        diff = (ac - ec).abs()
        maxes.append(diff.amax())
        sums.append(diff.sum(dtype=torch.float64))
        rels.append((diff / ec.abs().clamp_min(1e-12)).amax())
    max_diff, sum_diff, max_rel = (torch.stack(x).to(torch.float64) for x in (maxes, sums, rels))
    max_diff, sum_diff, max_rel = float(max_diff.max()), float(sum_diff.sum()), float(max_rel.max())
    return _set_passing_stats(result, max_diff, sum_diff, max_rel)


def _chunked_stats(
    e: torch.Tensor, a: torch.Tensor, atol: float, rtol: float, result: TrialResult
) -> tuple[bool, diagnosis.Evidence]:
    """The allclose verdict and the mismatch statistics, chunk by chunk (`flat_chunks`): a 1.6e9-element
    output needs a few hundred MB of float64 temporaries, not ~10x its size. allclose is elementwise
    followed by all(), so the chunked verdict is the same as one call's. Also what the diagnosis reads:
    the mask of wrong elements (one byte per element, kept only for chunks that have one) and a sample
    of their values."""
    passed, mismatched, n_finite, sum_diff = True, 0, 0, 0.0
    max_diff = max_rel = worst = None
    first: list[int] = []
    masks: list[torch.Tensor | int] = []
    sample: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    for start, ec, ac in flat_chunks(e, a):
        passed = _allclose_or_false(ec, ac, atol, rtol) and passed
        e64, a64 = ec.to(torch.float64), ac.to(torch.float64)
        diff = (a64 - e64).abs()
        # allclose's own element test (|e - a| <= atol + rtol*|a|; equal infinities match, NaN never does),
        # in the outputs' dtype as allclose tests it (in fp16 the bound rounds: 0.0101 passes 0 at 1e-2);
        # in float64 only where the dtypes differ, and allclose fails the trial anyway
        bad = (
            ~torch.isclose(ec, ac, rtol=rtol, atol=atol)
            if ec.dtype == ac.dtype
            else ~torch.isclose(e64, a64, rtol=rtol, atol=atol)
        )
        where = bad.nonzero().flatten()
        mismatched += where.numel()
        masks.append(bad if where.numel() else bad.numel())
        if len(first) < MAX_LISTED_MISMATCHES:
            first += [start + int(i) for i in where[: MAX_LISTED_MISMATCHES - len(first)]]
        if where.numel():
            pick = where[:: max(1, where.numel() // diagnosis.SAMPLE_PER_CHUNK)][: diagnosis.SAMPLE_PER_CHUNK]
            sample.append((pick + start, e64[pick], a64[pick]))
            ratio = diff[where] / (atol + rtol * a64[where].abs())
            ratio = ratio[torch.isfinite(ratio)]
            if ratio.numel():
                worst = max(worst or 0.0, float(ratio.max()))
        # over finite differences; NaN/Inf are counted separately (nan_*, inf_*)
        finite = diff[torch.isfinite(diff)]
        if finite.numel():
            m = float(finite.max())
            max_diff = m if max_diff is None else max(max_diff, m)
            n_finite += finite.numel()
            sum_diff += float(finite.sum())
        rel = diff / e64.abs().clamp_min(1e-12)
        rel = rel[torch.isfinite(rel)]
        if rel.numel():
            m = float(rel.max())
            max_rel = m if max_rel is None else max(max_rel, m)
    result.max_abs_diff = max_diff
    result.mean_abs_diff = sum_diff / n_finite if n_finite else None
    result.max_rel_diff = max_rel
    result.mismatched = mismatched
    result.mismatch_fraction = mismatched / result.numel
    indices = [_unravel(i, list(e.shape)) for i in first]
    result.first_mismatches = [
        {"index": ix, "expected": _scalar(e[tuple(ix)].to(torch.float64)), "actual": _scalar(a[tuple(ix)].to(torch.float64))}
        for ix in indices
    ]  # fmt: skip
    return passed, _evidence(e, masks, sample, mismatched, worst)


def _evidence(e: torch.Tensor, masks, sample, count: int, worst: float | None) -> diagnosis.Evidence:
    empty = torch.zeros(0, dtype=torch.float64, device=e.device)
    bad = torch.cat(
        [m if isinstance(m, torch.Tensor) else torch.zeros(m, dtype=torch.bool, device=e.device) for m in masks]
    ) if count else torch.zeros(e.numel(), dtype=torch.bool, device=e.device)  # fmt: skip
    return diagnosis.Evidence(
        shape=list(e.shape), bad=bad, count=count,
        sample_index=torch.cat([s[0] for s in sample]) if sample else empty.long(),
        sample_expected=torch.cat([s[1] for s in sample]) if sample else empty,
        sample_actual=torch.cat([s[2] for s in sample]) if sample else empty, worst_ratio=worst,
    )  # fmt: skip


def _unravel(flat: int, shape: list[int]) -> list[int]:
    index = []
    for dim in reversed(shape):
        flat, r = divmod(flat, dim)
        index.append(r)
    return index[::-1]


def compare_tensors(
    expected: torch.Tensor,
    actual: torch.Tensor,
    atol: float,
    rtol: float,
    result: TrialResult,
    inputs: Sequence[Any] | None = None,
    rerun: Callable[[], Any] | None = None,
) -> TrialResult:
    """Fill `result` with the verdict and mismatch statistics for one output tensor pair, and for a
    mismatch of values or shape its `diagnosis` (and `mismatch_map`), see `evaluator.diagnosis`.
    `inputs` are the trial's inputs; `rerun()` gives this output of a second candidate call on them,
    asked for only when the values differ."""
    expected, actual = plain(expected), plain(actual)
    result.expected_shape, result.actual_shape = list(expected.shape), list(actual.shape)
    result.expected_dtype, result.actual_dtype = str(expected.dtype), str(actual.dtype)
    result.numel = expected.numel()
    if expected.shape != actual.shape:
        result.passed, result.problem = False, "shape"
        if expected.is_floating_point() and actual.is_floating_point():
            result.diagnosis = diagnosis.diagnose_shape(expected, actual, atol, rtol)
        return result
    e, a = expected, actual
    if a.device != e.device:
        # torch.allclose raises for tensors on two devices (a 0-dim CPU tensor excepted, which torch lets
        # stand beside a tensor on any device), so KernelBench fails the trial: a CPU output of a CUDA
        # reference is not moved over and passed
        if not any(t.dim() == 0 and t.device.type == "cpu" for t in (e, a)):
            result.passed, result.problem = False, "device"
            return result
        a = a.to(e.device)
    if result.numel and (_identical_pass(e, a, result) or _margin_pass(e, a, atol, rtol, result)):
        result.passed = True
        return result
    if e.is_floating_point() or e.is_complex():
        result.nan_expected, result.inf_expected = _nonfinite_counts(e)
    if a.is_floating_point() or a.is_complex():
        result.nan_actual, result.inf_actual = _nonfinite_counts(a)
    evidence = None
    if result.numel and _passing_stats(e, a, atol, rtol, result):
        passed = True
    elif result.numel:
        passed, evidence = _chunked_stats(e, a, atol, rtol, result)
    else:
        passed = _allclose_or_false(e, a, atol, rtol)
    if e.dtype != a.dtype:  # torch.allclose raises on different dtypes, so KernelBench fails the trial
        result.problem = "dtype" if not passed else None
    result.passed = passed
    if not passed and result.problem is None:
        result.problem = "values"
    if result.problem == "values" and evidence is not None and evidence.count:
        result.diagnosis = diagnosis.diagnose(evidence, e, a, atol, rtol, inputs, rerun)
        nonfinite = ~torch.isfinite(a) if result.nan_actual or result.inf_actual else None
        result.mismatch_map = diagnosis.mismatch_map(evidence.bad, list(e.shape), nonfinite)
    return result


def _kind(x: Any) -> str:
    if isinstance(x, (tuple, list)):
        return f"{type(x).__name__} of {len(x)}"
    return "None" if x is None else type(x).__name__


def _structure_mismatch(expected: Any, actual: Any) -> tuple[str, str] | None:
    """(expected kind, actual kind) where the outputs differ in structure: a tensor against anything
    else, or tuples/lists of different types or lengths; None where they match."""
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        same = isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)
        return None if same else (_kind(expected), _kind(actual))
    if isinstance(expected, (tuple, list)):
        if type(actual) is not type(expected) or len(actual) != len(expected):
            return _kind(expected), _kind(actual)
        for e, a in zip(expected, actual, strict=True):
            if found := _structure_mismatch(e, a):
                return found
    return None


def compare_outputs(
    expected: Any,
    actual: Any,
    atol: float,
    rtol: float,
    trial: int,
    seed: int,
    inputs: Sequence[Any] | None = None,
    rerun: Callable[[], Any] | None = None,
) -> TrialResult:
    """Compare the reference's and the candidate's outputs of one correctness trial.

    Outputs may be tensors or (nested) tuples/lists of tensors; the first failing element decides.
    `inputs` (the trial's inputs, for the diagnosis) and `rerun` (a second candidate call on them, made
    only when a trial's values differ, to tell a nondeterministic kernel) are optional.
    """
    result = TrialResult(trial=trial, seed=seed, passed=False)
    mismatch = _structure_mismatch(expected, actual)
    if mismatch:  # KernelBench fails these too (`output.shape` of a tuple raises)
        result.problem = "type"
        result.expected_dtype, result.actual_dtype = mismatch  # the kinds of output, for type problems
        return result
    flat_e, flat_a = flatten_outputs(expected), flatten_outputs(actual)
    for i, (e, a) in enumerate(zip(flat_e, flat_a, strict=True)):
        result.output_index = i if len(flat_e) > 1 else None
        if not isinstance(e, torch.Tensor):
            e, a = torch.as_tensor(e), torch.as_tensor(a) if not isinstance(a, torch.Tensor) else a
        again = (lambda i=i: flatten_outputs(rerun())[i]) if rerun is not None else None
        compare_tensors(e, a, atol, rtol, result, inputs, again)
        if not result.passed:
            return result
    return result


def relative_error(expected, actual) -> float | None:
    """‖actual − expected‖ / ‖expected‖ over all output tensors, summed in float64; None when the
    reference output is all zeros (no scale to compare against); inf where the number of outputs or a
    shape differs or the difference holds a NaN.

    Same-dtype float32/float64 outputs take the difference in their own dtype and its norm in float64
    (`torch.linalg.vector_norm(dtype=float64)`: about 20 bytes moved per element); any other pair, and
    any result that is not finite that way (a difference past float32's range), is taken again with
    both sides cast to float64 first, about 100 bytes per element (the whole figure before
    2026-12-07). The strict trials take it per trial on the full output (1.6e9 elements for
    KernelBench 1/19)."""
    flat_e, flat_a = flatten_outputs(expected), flatten_outputs(actual)
    if len(flat_e) != len(flat_a):  # (an empty tuple for a tensor had no pair to differ, and passed)
        return float("inf")
    pairs = []
    for e, a in zip(flat_e, flat_a, strict=True):
        if not isinstance(e, torch.Tensor) or not isinstance(a, torch.Tensor) or e.shape != a.shape:
            return float("inf")
        pairs.append((plain(e), plain(a).to(e.device)))
    if not pairs:
        return None
    fast = all(e.dtype == a.dtype and e.dtype in (torch.float32, torch.float64) for e, a in pairs)
    num, den = _squared_norms(pairs, fast)
    if fast and not (math.isfinite(num) and math.isfinite(den)):
        num, den = _squared_norms(pairs, False)
    if num != num:  # a NaN anywhere in the difference
        return float("inf")
    if den == 0.0:
        return None
    return (num / den) ** 0.5


def _squared_norms(pairs: list, fast: bool) -> tuple[float, float]:
    """(‖a − e‖², ‖e‖²) over `pairs` in float64, chunk by chunk (`flat_chunks`: bounded
    temporaries), each chunk's norms left on the device until one read at the end. `fast`: the
    difference in the outputs' own dtype, cast to float64 inside the norm; else both cast first."""
    f64 = torch.float64
    nums, dens = [], []
    for e, a in pairs:
        for _, ec, ac in flat_chunks(e, a):
            if fast:
                nums.append(_vector_norm(torch.sub(ac, ec), dtype=f64))
                dens.append(_vector_norm(ec, dtype=f64))
            else:
                e64 = ec.to(f64)
                nums.append(_vector_norm(ac.to(f64) - e64))
                dens.append(_vector_norm(e64))
    if not nums:  # every output empty
        return 0.0, 0.0
    norms = torch.stack([torch.stack(nums), torch.stack(dens)]).square().sum(dim=1)
    num, den = norms.tolist()
    return num, den
