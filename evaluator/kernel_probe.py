"""Whether a candidate's custom kernels do some of the reference's work (strict mode's
`custom_kernels_do_the_work`), whatever share of the GPU time they take.

KernelBench lets a candidate replace some operators and leave the others to PyTorch (cuBLAS, cuDNN): a
library GEMM with a fused custom epilogue is the winning level-2 pattern, and is accepted. What is
rejected is a candidate whose custom kernels do none of the work. `KernelProbe` observes every custom
launch of one forward, a launch being a Triton kernel launched from the host (`JITFunction.run`, or
`InterpretedFunction.run` under TRITON_INTERPRET=1) or a call of a function of a `load_inline` extension
module (`evaluator.build.LoadInlineWrapper` wraps them in strict mode). For each launch it snapshots the
tensors passed in, and afterwards knows which of them the launch changed (bitwise) and which tensors it
returned: its writes. Two passes use that:

* observe (`probe.passing("observe")`): the launches that completed, and whether each one only copied,
  i.e. every element it wrote is bitwise the element at the same place of a tensor it was given (a copy
  of a result PyTorch computed, or of an input), or wrote nothing (a touch such as `y *= 1.0`);
* poison (`probe.passing("poison")`): every launch's floating-point writes are overwritten with NaN after
  it returns (integer and boolean ones are left alone: as indices they would send later kernels out of
  bounds). An output that still matches the reference never depended on a custom kernel: a dead kernel,
  a decoy, a ghost branch. Where no launch wrote a floating-point tensor the rule is not applied.

Both passes must run on input values that the previous call did not see: a candidate that keeps its
output buffer across calls writes the same values again on the same inputs, which reads as no write.
`verdict(...)` turns the facts into the check's (passed, detail). Launches of CUDA graphs
(`torch.cuda.CUDAGraph.replay`) cannot be observed this way; they are counted, the poison and copy rules
are then not applied, and a forward with no observed launch is judged by a GPU profile's kernel names.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Launch:
    """One custom launch that returned: its name, how many tensors it wrote (changed arguments plus
    returned tensors), and (observe pass) whether every write was a copy of a tensor it was given."""

    name: str
    wrote: int = 0
    copy: bool = False
    poisoned: int = 0
    # (written tensor, its source, the source's version then): checked whole when the pass ends
    pending: list = field(default_factory=list, repr=False, compare=False)


@dataclass
class ProbeFacts:
    """What one pass saw: the launches that completed, the launches that raised, CUDA graph replays."""

    launches: list[Launch] = field(default_factory=list)
    failed: int = 0
    graph_replays: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "launches": len(self.launches),
            "names": sorted({x.name for x in self.launches})[:8],
            "copies": sum(x.copy for x in self.launches),
            "wrote_nothing": sum(x.wrote == 0 for x in self.launches),
            "poisoned": sum(x.poisoned for x in self.launches),
            "failed": self.failed,
            "graph_replays": self.graph_replays,
        }


def _tensor_args(torch, args, kwargs) -> list:
    """The distinct tensors among the arguments, inside tuples and lists too (Triton takes tuples of
    tensors as one argument, an extension a std::vector of them; a kernel that wrote its output through
    `io[1]` of an `(x, y)` argument was read as writing nothing: helper-26), the tensor behind a
    pointer-like object included (`_tensor_behind`)."""
    out, seen = [], set()

    def visit(a) -> None:
        if isinstance(a, (tuple, list)):
            for v in a:
                visit(v)
            return
        if not isinstance(a, torch.Tensor):
            a = _tensor_behind(torch, a)
        if a is not None and id(a) not in seen:
            seen.add(id(a))
            out.append(a)

    for a in [*args, *kwargs.values()]:
        visit(a)
    return out


def _tensor_behind(torch, a):
    """The tensor a pointer-like argument stands for, or None: a TensorDescriptor's `base`, or the tensor
    whose bound `data_ptr` it hands out (Triton takes any object with `data_ptr()` as a pointer; one that
    forwarded every lookup to the copy's source hid that source, and a copy kernel read as computing:
    helper-28)."""
    try:
        base = getattr(a, "base", None)
        if isinstance(base, torch.Tensor):
            return base
        owner = getattr(getattr(a, "data_ptr", None), "__self__", None)
    except Exception:  # noqa: BLE001 - an object whose lookups raise: nothing to snapshot
        return None
    return owner if isinstance(owner, torch.Tensor) else None


def _flat_tensors(torch, value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat_tensors(torch, v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flat_tensors(torch, v)]
    return []


_INT_OF_SIZE = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def bits(torch, t):
    """`t` viewed as integers of the same width, so that comparisons are bitwise (NaN equals NaN)."""
    if t.dtype == torch.bool or not (t.is_floating_point() or t.is_complex()):
        return t
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view(getattr(torch, _INT_OF_SIZE[t.element_size()]))


def poison(torch, t) -> bool:
    """Overwrite every element of a floating-point `t` with NaN; True when it did. Integer and boolean
    results are left alone: as indices they would send later kernels out of bounds."""
    if t.is_floating_point() or t.is_complex():
        t.fill_(float("nan"))
        return True
    return False


def _source_of(torch, written, mask, sources) -> int | None:
    """The index of the first of `sources` whose elements at the places `mask` selects are bitwise those
    of `written`, or None."""
    for i, s in enumerate(sources):
        if copied_from(torch, written, mask, [s]):
            return i
    return None


def _settle(torch, facts) -> None:
    """At the end of an observe pass: a launch stays a copy only if each tensor it wrote is, whole, its
    source (when the source is unchanged since; else the elementwise reading stands)."""
    for launch in facts.launches:
        for written, src, version in launch.pending:
            try:
                same_version = src._version == version
            except Exception:  # noqa: BLE001
                same_version = False
            if same_version and not copied_from(torch, written, None, [src]):
                launch.copy = False
        launch.pending = []


def copied_from(torch, written, mask, sources) -> bool:
    """Whether the elements of `written` where `mask` is set (all, when None) are bitwise those at the
    same places of one of `sources` (tensors of the same number of elements and element width; a source
    may be a host snapshot of a device tensor, `snapshot`). Compared in chunks of `CHUNK_ELEMENTS`, so
    the temporaries stay small beside tensors of gigabytes."""
    w = bits(torch, written).reshape(-1)
    m = None if mask is None else mask.reshape(-1)
    for s in sources:
        if s.numel() != written.numel() or s.element_size() != written.element_size():
            continue
        sv = bits(torch, s).reshape(-1)
        if sv.dtype != w.dtype:
            continue
        if _equal_in_chunks(torch, w, sv, m):
            return True
    return False


CHUNK_ELEMENTS = 1 << 26  # elements per chunk of a comparison (256 MiB of float32)
# device memory a snapshot must leave free beside itself, or it is taken in host memory instead: the
# forward goes on allocating after the launch, and the comparisons need a chunk's temporaries
SNAPSHOT_RESERVE_BYTES = 1 << 30


def _chunks(n: int):
    for i in range(0, n, CHUNK_ELEMENTS):
        yield slice(i, min(n, i + CHUNK_ELEMENTS))


def _equal_in_chunks(torch, w, s, mask=None) -> bool:
    """Whether the flat `w` and `s` are equal wherever `mask` is set (everywhere, when None), `s`
    brought chunk by chunk to `w`'s device; one host sync at the end."""
    ok = torch.ones((), dtype=torch.bool, device=w.device)
    for c in _chunks(w.numel()):
        eq = w[c] == s[c].to(w.device)
        if mask is not None:
            eq = eq | ~mask[c]
        ok &= eq.all()
    return bool(ok)


def changed_mask(torch, t, before):
    """A boolean tensor on `t`'s device, True where `t` differs bitwise from its snapshot `before`
    (on the device or in host memory), built chunk by chunk; shaped as `bits(t)` (a complex `t` has one
    more dimension, of 2)."""
    tb = bits(torch, t)  # a complex tensor's bits have a last dimension of 2 (real, imaginary)
    w, b = tb.reshape(-1), bits(torch, before).reshape(-1)
    out = torch.empty(w.numel(), dtype=torch.bool, device=w.device)
    for c in _chunks(w.numel()):
        torch.ne(w[c], b[c].to(w.device), out=out[c])
    return out.view(tb.shape)


def snapshot(torch, tensors: list) -> list:
    """Copies of `tensors` as they are before a launch: on their device where it has room for all of them
    and `SNAPSHOT_RESERVE_BYTES` more, else in host memory (slower, but a probe that runs the device out
    of memory would fail an honest candidate that fits it: 1/19's 6 GiB ReLU on an 80 GB GPU did).
    Copies on the CPU, or on a device whose free memory cannot be read, stay on their device."""
    device = next((t.device for t in tensors if t.device.type == "cuda"), None)
    if device is None:
        return [t.clone() for t in tensors]
    need = sum(t.numel() * t.element_size() for t in tensors if t.device == device)
    try:
        free, _ = torch.cuda.mem_get_info(device)
        free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    except Exception:  # noqa: BLE001 - no reading: as before
        return [t.clone() for t in tensors]
    if need + SNAPSHOT_RESERVE_BYTES <= free:
        return [t.clone() for t in tensors]
    return [t.to("cpu", copy=True) if t.device == device else t.clone() for t in tensors]


class KernelProbe:
    """Observes custom launches during a pass (see the module doc); a pass-through outside one."""

    def __init__(self, torch_mod):
        self.torch = torch_mod
        self.mode: str | None = None
        self.facts = ProbeFacts()
        # custom launches (Triton's and the extensions' functions) since the probe was made, in every call
        # of the candidate, passes or not: the timing stage reads how many its timed calls made
        self.launches = 0

    def install_triton(self, modules) -> None:
        """Hook the launches of Triton's kernel classes in `modules` (sys.modules), for good: once before
        the candidate's import and once after it, never taken off. A hook put on for each pass and taken
        off after it was a tell: a candidate that compared the class's `run` with the one it saw at import
        launched its kernel while probed and called PyTorch otherwise (helper-31, helper-34)."""
        for cls in _triton_classes(modules):
            orig = cls.__dict__["run"]
            if getattr(orig, "_kb_probe", None) is not self:
                hooked = _hooked_run(self, orig)
                hooked._kb_probe = self
                cls.run = hooked

    def call(self, name: str, fn, args: tuple, kwargs: dict):
        """Run one custom launch `fn(*args, **kwargs)` under the current pass."""
        if self.mode is None:
            return fn(*args, **kwargs)
        torch = self.torch
        given = _tensor_args(torch, args, kwargs)
        before = snapshot(torch, given)
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            self.facts.failed += 1
            raise
        ids = {id(t) for t in given}
        changed = []
        for t, b in zip(given, before, strict=True):
            diff = changed_mask(torch, t, b)
            if bool(diff.any()):
                changed.append((t, diff))
        returned = [r for r in _flat_tensors(torch, result) if id(r) not in ids]
        launch = Launch(name=name, wrote=len(changed) + len(returned))
        if self.mode == "observe":
            # elements compared where they changed (a copy launched in chunks is still a copy), and, at
            # the end of the pass, the whole written tensor against its source: an honest ReLU written into
            # a zeroed buffer (fresh pages on the CPU, a new segment on a GPU) changes only where x > 0, and
            # there it equals x, so by its changed elements alone it read as a copy of its input
            matches = [_source_of(torch, t, m, before) for t, m in changed]
            launch.copy = all(i is not None for i in matches) and all(
                copied_from(torch, r, None, before) for r in returned
            )
            if launch.copy:
                written = {id(t) for t, _ in changed}
                for (t, _), i in zip(changed, matches, strict=True):
                    src = given[i]
                    if id(src) not in written:
                        with contextlib.suppress(Exception):  # an inference tensor has no version counter
                            launch.pending.append((t, src, src._version))
        elif self.mode == "poison":
            launch.poisoned = sum(poison(torch, t) for t in [*(t for t, _ in changed), *returned])
        self.facts.launches.append(launch)
        return result

    @contextlib.contextmanager
    def passing(self, mode: str):
        """One pass ("observe" or "poison"): CUDA graph replays are hooked for its duration (Triton's
        launches are hooked for good, `install_triton`, and extension functions wrapped once, at build);
        yields the pass's `ProbeFacts`."""
        import sys

        self.mode, self.facts = mode, ProbeFacts()
        restore = []
        try:
            self.install_triton(sys.modules)
            graph = getattr(self.torch.cuda, "CUDAGraph", None)
            if graph is not None and "replay" in graph.__dict__:
                orig_replay = graph.__dict__["replay"]

                def replay(g, *a, **k):
                    self.facts.graph_replays += 1
                    return orig_replay(g, *a, **k)

                graph.replay = replay
                restore.append((graph, "replay", orig_replay))
            yield self.facts
        finally:
            for cls, attr, orig in restore:
                setattr(cls, attr, orig)
            if self.mode == "observe":
                _settle(self.torch, self.facts)
            self.mode = None


def _triton_classes(modules) -> list:
    """Triton's launchable kernel classes, if the candidate imported Triton (never imported here)."""
    out = []
    jit = modules.get("triton.runtime.jit")
    if jit is not None and "run" in getattr(jit, "JITFunction", type).__dict__:
        out.append(jit.JITFunction)
    interp = modules.get("triton.runtime.interpreter")
    if interp is not None and "run" in getattr(interp, "InterpretedFunction", type).__dict__:
        out.append(interp.InterpretedFunction)
    return out


def _hooked_run(probe: KernelProbe, orig):
    @functools.wraps(orig)
    def run(self, *args, grid, warmup, **kwargs):
        if warmup:
            return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
        probe.launches += 1
        if probe.mode is None:  # outside a pass: counted, nothing else
            return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
        name = getattr(self, "__name__", None) or getattr(getattr(self, "fn", None), "__name__", "triton")
        return probe.call(
            f"triton:{name}", lambda *a, **k: orig(self, *a, grid=grid, warmup=warmup, **k), args, kwargs
        )

    return run


def wrap_extension(module, probe: KernelProbe, label: str) -> None:
    """Route every function of a built extension module through `probe.call` (in place). Functions only:
    pybind11 classes and plain attributes are left alone."""
    for name, obj in list(vars(module).items()):
        if name.startswith("__") or type(obj).__name__ != "builtin_function_or_method":
            continue
        setattr(module, name, _wrapped(probe, f"{label}.{name}", obj))


def _wrapped(probe: KernelProbe, name: str, fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        probe.launches += 1
        if probe.mode is None:
            return fn(*args, **kwargs)
        return probe.call(name, fn, args, kwargs)

    return call


def output_unchanged(torch, poisoned, expected, atol: float, rtol: float) -> bool:
    """Whether the output of the poison pass still matches the reference's (shapes equal, finite where
    the reference is finite, allclose elsewhere): then no custom kernel's result reached it."""
    from kb_agent.evaluator.compare import flatten_outputs, plain

    p, e = flatten_outputs(poisoned), flatten_outputs(expected)
    if len(p) != len(e):
        return False
    for a, b in zip(p, e, strict=True):
        if not isinstance(b, torch.Tensor):
            if a != b:
                return False
            continue
        if not isinstance(a, torch.Tensor):
            return False
        a = plain(a)
        if a.shape != b.shape:
            return False
        a = a.to(b.device)
        if b.is_floating_point() or b.is_complex():
            if not bool(torch.isclose(a.to(b.dtype), b, rtol=rtol, atol=atol, equal_nan=True).all()):
                return False
        elif not torch.equal(a.to(b.dtype), b):
            return False
    return True


def output_is_an_input(torch, expected, inputs) -> bool:
    """Whether every tensor of the reference's output is bitwise one of its inputs (an identity on these
    values, as ReLU is on non-negative inputs): then a kernel that copies does the reference's work."""
    from kb_agent.evaluator.compare import flatten_outputs

    outs = [t for t in flatten_outputs(expected) if isinstance(t, torch.Tensor)]
    ins = [t for t in inputs if isinstance(t, torch.Tensor)]
    return bool(outs) and all(copied_from(torch, o, None, ins) for o in outs)


def verdict(observed: list[ProbeFacts], poisoned: ProbeFacts | None, unchanged: bool | None,
            identity: bool, unseen_custom: bool = False) -> tuple[bool, str]:  # fmt: skip
    """The check `custom_kernels_do_the_work` from the passes' facts.

    Args:
        observed: the observe passes (the first on the declared input distribution; later ones, on other
            distributions, are asked for only when every launch of the first only copied).
        poisoned: the poison pass; None when it could not run.
        unchanged: whether the poisoned output still matched the reference (None: not measured; the
            rule also needs a floating-point write poisoned and no CUDA graph replayed).
        identity: whether the reference's output is bitwise one of its inputs on the observe inputs.
        unseen_custom: where the probe saw no launch, whether a GPU profile of the forward showed kernels
            named as no library names them (replayed from a CUDA graph, or launched from a precompiled
            Triton kernel): custom code the probe cannot follow, so the other rules are not applied.

    Returns (passed, detail): rejected when no custom kernel ran in a forward; when poisoning every
    custom launch's result left the output right; when every launch only copied or wrote nothing on every
    distribution tried (unless the reference itself is an identity there, or its output is a copy).
    """
    first = observed[0]
    if not first.launches:
        if unseen_custom:
            return True, ""
        why = "no custom kernel ran in a forward"
        if first.failed:
            why += f" ({first.failed} launch(es) raised, and the forward went on without them)"
        if first.graph_replays:
            why += " (it replayed CUDA graphs of library kernels only)"
        return False, why + ": the output was computed by PyTorch alone"
    measurable = (
        poisoned is not None and not poisoned.graph_replays and any(x.poisoned for x in poisoned.launches)
    )
    if measurable and unchanged:
        return False, (
            f"with the results of all {len(poisoned.launches)} custom launch(es) overwritten with NaN, the "
            "output was still right: it does not depend on the custom kernels (a dead kernel, a decoy, or "
            "a branch that never uses them)"
        )
    copies_only = all(f.launches and all(x.copy for x in f.launches) for f in observed)
    if copies_only and not identity and not first.graph_replays:
        return False, (
            "every custom launch only copied tensors it was given or wrote nothing (on every input "
            "distribution tried): the computation itself ran in PyTorch/library ops"
        )
    return True, ""
