"""What kind of mismatch a failed correctness trial shows, in one line, and a character map of where.

`compare.compare_tensors` gathers `Evidence` while it computes the statistics (the mask of wrong elements
and a sample of their values), then calls `diagnose` and `mismatch_map`. The patterns, tried in order:
NaN/Inf where the reference is finite (where it starts, whether the inputs there are extreme); the right
values in a transposed or permuted layout; a region never written (zeros, the input's values, garbage);
nondeterministic (a second call on the same inputs differs); a sign flip; a constant scale factor; a
constant offset; an error just over the tolerance (precision). Each comes with where the wrong elements
lie when they are confined: only the tail or boundary (the last partial block or tile), one row, column or
channel, one block. Only where no pattern fits does the line say so.

Everything here reads tensors the evaluator already holds; nothing decides a verdict.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

_detach = torch.Tensor.detach  # (as compare.plain: an output's own `detach` may be the candidate's)

MAP_ROWS, MAP_COLS = 16, 32  # most cells of the mismatch map
SAMPLE_PER_CHUNK = 4096  # wrong elements per statistics chunk whose values the value patterns read
LAYOUT_SAMPLE = 4096  # positions at which a permuted layout is tried
PATTERN_SHARE = 0.9  # a value pattern must explain this share of the sampled wrong elements
LAYOUT_SHARE = 0.99  # a permuted layout must explain this share of the sampled positions
PRECISION_RATIO = 10.0  # 9 in 10 wrong elements within this many times their allowed error: "just over"
EXTREME_SIGMA = 6.0  # an input this many standard deviations from its mean is extreme
MAX_PERMUTED_DIMS = 4  # layouts are tried for outputs of at most this many dimensions (24 orders)


@dataclass
class Evidence:
    """What the statistics pass saw of one wrong output: `bad` is the flat (row-major) bool mask of
    elements outside tolerance; `sample_*` the flat index, reference and candidate value (float64) of
    up to SAMPLE_PER_CHUNK wrong elements per chunk; `worst_ratio` the largest |a - e| / (atol + rtol*|a|)
    over the finite wrong elements (1.0 is the tolerance)."""

    shape: list[int]
    bad: torch.Tensor
    count: int
    sample_index: torch.Tensor
    sample_expected: torch.Tensor
    sample_actual: torch.Tensor
    worst_ratio: float | None


def diagnose(
    ev: Evidence,
    expected: torch.Tensor,
    actual: torch.Tensor,
    atol: float,
    rtol: float,
    inputs: Sequence[object] | None = None,
    rerun: Callable[[], torch.Tensor] | None = None,
) -> str:
    """One line naming the mismatch's pattern and where it lies, e.g. "only the tail is wrong: ...".

    `inputs` (the trial's inputs, any objects) let the NaN pattern say whether the inputs there are
    extreme and the never-written pattern spot an input left in place; `rerun()` returns this output of a
    second candidate call on the same inputs (only called here, at most once) for nondeterminism.
    """
    where = location(ev.bad, ev.shape, ev.count)
    tensors = [x for x in inputs or () if isinstance(x, torch.Tensor)]
    value = (
        _nonfinite(expected, actual, tensors)
        or _layout(expected, actual, atol, rtol)
        or _never_written(ev, tensors)
        or _nondeterministic(actual, rerun, atol, rtol)
        or _value_pattern(ev, atol, rtol)
    )
    if value:
        return f"{value}; the wrong elements: {where}." if where else f"{value}."
    if where and not where.startswith("spread"):
        return f"only {where} is wrong, the rest matches."
    return f"no simple pattern: the wrong elements are {where or 'spread over the output'}."


def diagnose_shape(expected: torch.Tensor, actual: torch.Tensor, atol: float, rtol: float) -> str:
    """For an output of the wrong shape holding as many elements: the right values viewed in the wrong
    shape, or transposed/permuted; "" otherwise."""
    if expected.numel() != actual.numel() or expected.numel() == 0:
        return ""
    e, a = expected.detach(), actual.detach().to(expected.device)
    idx = _spread(e.numel(), LAYOUT_SAMPLE)
    if _share_close(_at(e, idx), _at(a, idx), atol, rtol) >= LAYOUT_SHARE:
        return f"the right values in the wrong shape: view or reshape your result as {list(e.shape)}."
    found = _layout(e, a, atol, rtol)
    return f"{found}." if found else ""


# -- where ------------------------------------------------------------------------------------------------
def location(bad: torch.Tensor, shape: Sequence[int], count: int) -> str:
    """Where the wrong elements (`bad`, flat bool mask of a `shape` output, `count` of them) lie, as a
    phrase: "the tail: flat elements 4096..4099 ...", "one row: output[3]", "spread over ...". "" if none."""
    numel = bad.numel()
    if count == 0 or numel == 0:
        return ""
    shape = list(shape) or [1]
    if count == numel:
        return f"every element ({numel})"
    flat = bad.nonzero()
    first, last = int(flat[0]), int(flat[-1])
    nd = bad.view(shape)
    spans = [_span(nd, d) for d in range(len(shape))]
    box = math.prod(hi - lo + 1 for lo, hi in spans)
    restricted = [d for d, (lo, hi) in enumerate(spans) if (lo, hi) != (0, shape[d] - 1)]
    parts = [_slice(lo, hi, shape[d]) for d, (lo, hi) in enumerate(spans)]
    while len(parts) > 1 and parts[-1] == ":":
        parts.pop()
    sub = "output[" + ", ".join(parts) + "]"
    if count == 1:
        return f"one element: {sub}"
    # a tail: the wrong elements fill much of a final stretch (a few right ones, zeros of a ReLU say, may end it)
    stretch = numel - first
    tail = (
        0 < first and stretch <= numel // 4 and count >= 0.25 * stretch and last >= numel - 1 - stretch // 4
    )
    if tail and (len(shape) == 1 or restricted != [0]):  # (whole last rows: the boundary, below)
        also = f", {sub}" if len(shape) > 1 and restricted else ""
        return (f"the tail: flat elements {first}..{numel - 1} (the last {numel - first} of {numel}"
                f"{_aligned(first)}{also}): the last partial block")  # fmt: skip
    if len(shape) == 1 or not restricted:
        if count == last - first + 1 and count <= numel // 4:
            return f"one contiguous run: flat elements {first}..{last} ({count}{_aligned(first)})"
    if len(shape) > 1 and not restricted:
        edge = _edges(nd.view(-1, shape[-1]))
        if edge:
            return edge
    within = "" if count == box else f"; {count} of its {box} elements"
    if restricted:
        pinned = [d for d in restricted if spans[d][0] == spans[d][1]]
        if all(spans[d][1] == shape[d] - 1 and spans[d][0] > 0 for d in restricted):
            dims = ", ".join(
                f"the last {shape[d] - spans[d][0]} of {shape[d]} along dim {d}" for d in restricted
            )
            return f"the boundary: {sub} ({dims}: the last partial tile{within})"
        wide = all(spans[d][1] - spans[d][0] + 1 >= shape[d] / 2 for d in restricted if d not in pinned)
        if len(pinned) == 1 and wide:
            return f"{_slice_name(pinned[0], len(shape))}: {sub}" + (f" ({within[2:]})" if within else "")
        if box <= numel // 4:
            return f"one block: {sub}" + (f" ({within[2:]})" if within else "")
    share = count / numel
    return f"spread over the output ({count} of {numel}, {share:.1%})" + (
        f", within {sub}" if restricted else ""
    )


def _span(nd: torch.Tensor, d: int) -> tuple[int, int]:
    others = tuple(i for i in range(nd.dim()) if i != d)
    hit = (nd.any(dim=others) if others else nd).nonzero()
    return int(hit[0]), int(hit[-1])


def _slice(lo: int, hi: int, size: int) -> str:
    if (lo, hi) == (0, size - 1):
        return ":"
    return str(lo) if lo == hi else f"{lo}:{hi + 1}"


def _slice_name(d: int, ndim: int) -> str:
    if ndim == 2:
        return "one row" if d == 0 else "one column"
    if ndim >= 3 and d == 1:
        return "one channel (dim 1)"
    if d == 0:
        return "one batch element (dim 0)"
    return f"one slice along dim {d}"


def _aligned(start: int) -> str:
    """ ", from a multiple of 1024" for the largest power of two >= 16 dividing `start`."""
    if start <= 0:
        return ""
    power = start & -start
    return f", from a multiple of {power}" if power >= 16 else ""


def _edges(bad2: torch.Tensor) -> str:
    """The last rows and/or last columns of a 2-D view when the wrong elements lie only there (the
    partial tiles at both edges of a tiled kernel: all wrong elements outside one top-left rectangle);
    "" otherwise."""
    rows, cols = bad2.shape
    first_row = _first_true(bad2, 0)  # per column: the first wrong row (rows where none)
    first_col = _first_true(bad2, 1)  # per row: the first wrong column
    r0 = int(first_row[0])
    c0 = int(first_col[:r0].min()) if r0 else 0
    r0 = int(first_row[:c0].min()) if c0 else r0
    if not (0 < r0 < rows and 0 < c0 < cols) or bad2[:r0, :c0].any():
        return ""
    if rows - r0 > rows // 2 or cols - c0 > cols // 2:
        return ""
    return (f"the edges: the last {rows - r0} of {rows} rows and the last {cols - c0} of {cols} columns of "
            f"the 2-D view (the partial tiles at the boundary)")  # fmt: skip


def _first_true(mask: torch.Tensor, dim: int) -> torch.Tensor:
    """Along `dim`, the index of the first True (the size of `dim` where there is none)."""
    size = mask.shape[dim]
    ar = torch.arange(size, device=mask.device).view((-1, 1) if dim == 0 else (1, -1))
    return torch.where(mask, ar, size).amin(dim)


# -- what -------------------------------------------------------------------------------------------------
def _nonfinite(e: torch.Tensor, a: torch.Tensor, inputs: list[torch.Tensor]) -> str:
    if not (a.is_floating_point() and e.is_floating_point()) or bool(torch.isfinite(a).all()):
        return ""
    ours = ~torch.isfinite(a) & torch.isfinite(e)
    n = int(ours.sum())
    if n == 0:
        both_nan = int((torch.isnan(a) & torch.isnan(e)).sum())
        if both_nan:
            return (f"the reference itself gives NaN at {both_nan} elements, and NaN never equals NaN "
                    "(allclose without equal_nan): no candidate passes these inputs")  # fmt: skip
        return ""
    first = int(ours.reshape(-1).nonzero()[0])
    index = _unravel(first, list(e.shape))
    nan = int((torch.isnan(a) & ours).sum())
    kinds = ", ".join(x for x in (f"{nan} NaN" if nan else "", f"{n - nan} Inf" if n - nan else "") if x)
    value = a[tuple(index)].item()
    return (f"NaN/Inf where the reference is finite ({kinds}), starting at {index} (yours {value}, reference "
            f"{_g(e[tuple(index)].item())}); {_input_note(inputs, index, list(e.shape))}")  # fmt: skip


def _input_note(inputs: list[torch.Tensor], index: list[int], shape: list[int]) -> str:
    """Whether the inputs are extreme where the output turns non-finite (same-shape inputs at that index),
    or anywhere (others)."""
    floats = [x for x in inputs if x.is_floating_point() and x.numel()]
    if not floats:
        return "no floating-point inputs to blame"
    notes, extreme = [], False
    for k, x in enumerate(floats):
        x = x.detach()
        bad = int((~torch.isfinite(x)).sum())
        if bad:
            notes.append(f"input {k} holds {bad} NaN/Inf")
            extreme = True
            continue
        xf = x.float()
        mean, std = float(xf.mean()), float(xf.std()) if x.numel() > 1 else 0.0
        if list(x.shape) == shape:
            v = float(xf[tuple(index)])
            z = abs(v - mean) / std if std else 0.0
            notes.append(f"input {k}: {_g(v)}, {z:.1f} std from its mean")
            extreme = extreme or z > EXTREME_SIGMA
        else:
            far = float((xf - mean).abs().max())
            z = far / std if std else 0.0
            notes.append(f"input {k}'s farthest value: {z:.1f} std from its mean")
        extreme = extreme or z > EXTREME_SIGMA
    if extreme:
        return "the inputs there are extreme (" + "; ".join(notes[:3]) + "): look for an overflow"
    return "the inputs there are ordinary (" + "; ".join(notes[:3]) + ")"


def _layout(e: torch.Tensor, a: torch.Tensor, atol: float, rtol: float) -> str:
    """The reference's values in the element order of `e.permute(p)`: transposed or permuted."""
    if e.dim() < 2 or e.dim() > MAX_PERMUTED_DIMS or e.numel() != a.numel() or e.numel() < 2:
        return ""
    idx = _spread(e.numel(), LAYOUT_SAMPLE)
    theirs = _at(a, idx)
    if a.shape == e.shape and _share_close(_at(e, idx), theirs, atol, rtol) >= 0.5:
        return ""  # mostly right in place: not a layout problem
    for p in itertools.permutations(range(e.dim())):
        if list(p) == list(range(e.dim())):
            continue
        permuted = e.permute(p)
        if _share_close(_at(permuted, idx), theirs, atol, rtol) < LAYOUT_SHARE:
            continue
        order = ", ".join(map(str, p))
        if list(a.shape) == list(permuted.shape) and a.shape != e.shape:
            return f"a transposed or permuted layout: your output is the reference's .permute({order})"
        note = " (your output is the reference transposed)" if e.dim() == 2 else ""
        return (f"a transposed or permuted layout: your values are the reference's, written in the element "
                f"order of its .permute({order}){note}: check the output's index arithmetic and strides")  # fmt: skip
    return ""


def _never_written(ev: Evidence, inputs: list[torch.Tensor]) -> str:
    e, a = ev.sample_expected, ev.sample_actual
    if a.numel() == 0:
        return ""
    if _share(a == 0) >= PATTERN_SHARE and _share(e != 0) >= 0.5:
        return "a region never written: your output is 0 there and the reference is not"
    for k, x in enumerate(inputs):
        if list(x.shape) == ev.shape and x.dtype.is_floating_point and x.numel():
            xs = _at(x.detach().to(a.device), ev.sample_index).to(torch.float64)
            if _share(xs == a) >= PATTERN_SHARE and _share(xs != e) >= 0.5:
                return f"a region never written: it still holds input {k}'s values"
    scale = float(e.abs().max()) if e.numel() else 0.0
    odd = (a.abs() > 1e6 * (scale + 1.0)) | ((a != 0) & (a.abs() < 1e-30))
    if _share(odd) >= 0.5:
        return "a region never written: it holds garbage (uninitialised memory: huge or denormal values)"
    return ""


def _nondeterministic(
    a: torch.Tensor, rerun: Callable[[], torch.Tensor] | None, atol: float, rtol: float
) -> str:
    if rerun is None:
        return ""
    try:
        again = rerun()
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the candidate's second call may raise anything
        return f"a second call on the same inputs raised {type(err).__name__}: {str(err)[:200]}"
    if isinstance(again, torch.Tensor):
        again = _detach(again)
    if not isinstance(again, torch.Tensor) or again.shape != a.shape:
        return (
            "nondeterministic: a second call on the same inputs returned a different kind or shape of output"
        )
    again = again.to(a.device)
    differ = 0
    for xa, xb in zip(a.reshape(-1).split(1 << 24), again.reshape(-1).split(1 << 24), strict=True):
        xa64, xb64 = xa.to(torch.float64), xb.to(torch.float64)
        differ += int((~torch.isclose(xa64, xb64, rtol=rtol, atol=atol, equal_nan=True)).sum())
    if differ == 0:
        return ""
    return (f"nondeterministic: a second call on the same inputs differs from the first in {differ} of "
            f"{a.numel()} elements (a race: a missing barrier or atomic; a read of uninitialised memory; or state kept from an earlier call)")  # fmt: skip


def _value_pattern(ev: Evidence, atol: float, rtol: float) -> str:
    e, a = ev.sample_expected, ev.sample_actual
    finite = torch.isfinite(e) & torch.isfinite(a)
    e, a = e[finite], a[finite]
    if a.numel() == 0:
        return ""
    allowed = atol + rtol * a.abs()
    nonzero = e.abs() > allowed
    if _share(nonzero) >= 0.5:
        if _share((a + e).abs() <= allowed) >= PATTERN_SHARE:
            return "a sign flip: your values are the negatives of the reference's"
        k = float((a[nonzero] / e[nonzero]).median())
        if (
            abs(k - 1) > 1e-3
            and k != 0
            and _share((a - k * e).abs() <= allowed + 1e-3 * a.abs()) >= PATTERN_SHARE
        ):
            return f"a constant scale factor: your values are {_g(k)}{_fraction(k)} times the reference's"
    c = float((a - e).median())
    if c != 0 and _share((a - e - c).abs() <= allowed + 1e-3 * abs(c)) >= PATTERN_SHARE:
        return f"a constant offset: your values are the reference's {'+' if c > 0 else '-'} {_g(abs(c))}"
    ratio = (a - e).abs() / allowed
    typical = float(ratio.quantile(0.9)) if ratio.numel() else math.inf
    if typical <= PRECISION_RATIO:
        worst = f", the worst {ev.worst_ratio:.3g}x" if ev.worst_ratio is not None else ""
        return (f"an error just over the tolerance (9 in 10 wrong elements within {typical:.2g}x their allowed "
                f"error{worst}): precision: accumulate in fp32, keep the reference's operation order, no "
                "fast-math or TF32")  # fmt: skip
    return ""


def _fraction(k: float) -> str:
    """ " (1/64)" where `k` is close to one over a whole number, else ""."""
    # a subnormal k's inverse is inf, which round() raises on
    if 0 < abs(k) < 1 and math.isfinite(1 / abs(k)):
        n = round(1 / abs(k))
        if n > 1 and abs(abs(k) * n - 1) < 1e-3:
            return f" ({'-' if k < 0 else ''}1/{n})"
    return ""


# -- the map ----------------------------------------------------------------------------------------------
def view_2d(shape: Sequence[int]) -> tuple[int, int, str]:
    """(rows, columns, caption) of the 2-D view the map draws: dims before the last as rows and the last as
    columns; a 1-D output wrapped into MAP_ROWS rows."""
    shape = list(shape) or [1]
    if len(shape) == 1:
        n = shape[0]
        cols = max(1, math.ceil(n / MAP_ROWS))
        return math.ceil(n / cols), cols, f"the output's {n} elements wrapped in rows of {cols}"
    rows = math.prod(shape[:-1])
    dims = "dim 0" if len(shape) == 2 else f"dims 0-{len(shape) - 2}"
    return rows, shape[-1], f"{rows} rows ({dims}) x {shape[-1]} columns (dim {len(shape) - 1})"


def mismatch_map(bad: torch.Tensor, shape: Sequence[int], nonfinite: torch.Tensor | None = None) -> list[str]:
    """A character map of where `bad` (flat bool mask of a `shape` output) holds wrong elements: the first
    row is a caption, then at most MAP_ROWS rows of MAP_COLS cells: '.' all right, '+' under half wrong,
    '#' half or more wrong, 'N' some NaN/Inf (`nonfinite`, same layout)."""
    rows, cols, caption = view_2d(shape)
    n = bad.numel()
    if n == 0:
        return []
    cr, cc = min(rows, MAP_ROWS), min(cols, MAP_COLS)
    wrong = _cell_counts(bad, rows, cols, cr, cc)
    total = _cell_counts(torch.ones(n, dtype=torch.bool, device=bad.device), rows, cols, cr, cc)
    nf = _cell_counts(nonfinite.reshape(-1), rows, cols, cr, cc) if nonfinite is not None else None
    per = f"{math.ceil(rows / cr)} x {math.ceil(cols / cc)}"
    lines = [f"{caption}; one cell ~ {per} elements; '#' half or more wrong, '+' some, '.' none, 'N' NaN/Inf"]
    for i in range(cr):
        row = ""
        for j in range(cc):
            w, t = wrong[i][j], total[i][j]
            if t == 0:
                row += " "
            elif nf is not None and nf[i][j]:
                row += "N"
            else:
                row += "." if w == 0 else ("#" if 2 * w >= t else "+")
        lines.append(row.rstrip())
    return lines


def _cell_counts(mask: torch.Tensor, rows: int, cols: int, cr: int, cc: int) -> list[list[int]]:
    """Counts of True in each of cr x cc cells of the `rows` x `cols` view of flat `mask` (padded with
    False where a wrapped 1-D view's last row is short)."""
    flat = mask.reshape(-1)
    pad = rows * cols - flat.numel()
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    grid = flat.view(rows, cols)
    r_edges = [i * rows // cr for i in range(cr + 1)]
    c_edges = [j * cols // cc for j in range(cc + 1)]
    per_row = torch.stack([grid[:, c_edges[j] : c_edges[j + 1]].sum(1) for j in range(cc)], 1)  # rows x cc
    return [per_row[r_edges[i] : r_edges[i + 1]].sum(0).tolist() for i in range(cr)]


# -- helpers ----------------------------------------------------------------------------------------------
def _spread(n: int, k: int) -> torch.Tensor:
    """Up to `k` distinct flat indices in [0, n), drawn once from a fixed seed (an evenly strided set can
    fall on a square matrix's diagonal, where a transposed output matches)."""
    if n <= k:
        return torch.arange(n)
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, n, (k,), generator=g).unique()


def _at(x: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
    """x's elements at row-major flat indices (any layout), as float64."""
    flat = flat.to(x.device)
    index = []
    for size in reversed(list(x.shape)):
        index.append(flat % size)
        flat = flat // size
    return x[tuple(reversed(index))].to(torch.float64) if x.dim() else x.reshape(1).to(torch.float64)


def _share_close(e: torch.Tensor, a: torch.Tensor, atol: float, rtol: float) -> float:
    return _share(torch.isclose(e, a, rtol=rtol, atol=atol)) if e.numel() else 0.0


def _share(flags: torch.Tensor) -> float:
    return float(flags.sum()) / flags.numel() if flags.numel() else 0.0


def _unravel(flat: int, shape: list[int]) -> list[int]:
    index = []
    for dim in reversed(shape):
        flat, r = divmod(flat, dim)
        index.append(r)
    return index[::-1]


def _g(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else str(x)


__all__ = ["Evidence", "diagnose", "diagnose_shape", "location", "mismatch_map", "view_2d"]
