"""Timing of one model's forward, reference and candidate alike.

Three figures, each with its method recorded:

* **parity** (`cuda_event_sync`): KernelBench's protocol (src/kernelbench/timing.py, `cuda_event`
  method): `warmup` untimed calls, then per trial: flush L2 by writing a buffer larger than it,
  `torch.cuda.synchronize()`, CUDA events recorded around one call, synchronize again. The first
  `discard` timed calls are dropped. The mean is the figure compared with published speedups. Host
  launch latency of each call is inside the window, which penalises many small launches (Triton's
  Python launcher in particular).
* **device** (`cuda_graph_replay`, else `back_to_back_events`): the forward is captured once in a CUDA
  graph and replayed, each replay bracketed by events with L2 flushed before it, with no host
  synchronisation between trials, so launch latency stays out of the window. Models that cannot be
  captured are timed with the same loop on eager calls. Reference and candidate always share one method.
  The median is reported as the figure (robust to the odd preempted trial). Where the reproducible
  figure runs (the default on CUDA) its pairs are these calls (`stages.timing.device_figure`);
  otherwise calls go in blocks of 20 until that median's relative standard error is 0.5 %
  (`EvalSettings.device_target_rse`), 100 at most (`time_device`).
* **repro** (`interleaved_graph_replay`, else `interleaved_events`): reference and candidate timed in
  alternating pairs until the figure's relative standard error is small, with a confidence interval and
  the SM clock before and after (`time_repro`; the section "the reproducible figure" below). The figure
  to re-time and compare across processes; parity stays the one compared with published numbers.

On the CPU (Triton under the interpreter) only a host-clock figure (`cpu_perf_counter`) exists; it is
not comparable with anything published.
"""

from __future__ import annotations

import functools
import math
import os
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from kb_agent.evaluator.result import TimingStats
from kb_agent.evaluator.thresholds import STRICT_SPIN_MS

if TYPE_CHECKING:
    from kb_agent.evaluator.result import TimingInfo
    from kb_agent.evaluator.settings import EvalSettings

# bound at import, which the worker does before the candidate's code runs, so a candidate that replaces
# them does not change the timing (strict mode also reports the replacement)
_sync = torch.cuda.synchronize
_Event = torch.cuda.Event
_perf_counter = time.perf_counter
_get_sync_debug_mode = torch.cuda.get_sync_debug_mode
_set_sync_debug_mode = torch.cuda.set_sync_debug_mode
_mark = getattr(torch.cuda, "_sleep", None)  # a device-side spin: the census's marker kernel

_urandom = os.urandom


class _Entropy:
    """The operating system's randomness, through `os.urandom` as bound when this module was imported,
    before any candidate's code ran: strict timing's seeds, its order of fresh and repeated calls and its
    spot-checked call. (`random.SystemRandom` looks its methods up on a class a candidate can change: one
    that made `getrandbits` return 0 fixed every seed.)"""

    def randrange(self, n: int) -> int:
        """Uniform in [0, n) (64 spare bits make the modulo's bias negligible)."""
        return int.from_bytes(_urandom((n.bit_length() + 64 + 7) // 8), "little") % n

    def choice(self, seq: Sequence[Any]) -> Any:
        return seq[self.randrange(len(seq))]

    def shuffle(self, x: list) -> None:
        for i in range(len(x) - 1, 0, -1):
            j = self.randrange(i + 1)
            x[i], x[j] = x[j], x[i]


entropy = _Entropy()

PARITY_METHOD = "cuda_event_sync"
DEVICE_GRAPH_METHOD = "cuda_graph_replay"
DEVICE_EVENTS_METHOD = "back_to_back_events"
CPU_METHOD = "cpu_perf_counter"


def stats(times_ms: Sequence[float]) -> TimingStats:
    t = list(times_ms)
    return TimingStats(
        mean_ms=statistics.fmean(t),
        median_ms=statistics.median(t),
        std_ms=statistics.stdev(t) if len(t) > 1 else 0.0,
        min_ms=min(t),
        max_ms=max(t),
        trials=len(t),
    )


class L2Flusher:
    """Writes a buffer twice the size of the device's L2 cache (at least 64 MiB) to evict it."""

    def __init__(self, device: torch.device, enabled: bool = True):
        self.enabled = enabled
        self.nbytes = 0
        self.buf = None
        if enabled:
            l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0
            self.nbytes = max(2 * l2, 64 << 20)
            self.buf = torch.empty(self.nbytes // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        if self.buf is not None:
            self.buf.zero_()


def time_parity(
    fn: Callable[..., Any], args: Sequence[Any], *, warmup: int, discard: int, trials: int, flusher: L2Flusher
) -> list[float]:
    """Per-call times in ms under the synchronized per-call protocol (see the module docstring)."""
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args)
        _sync()
        times = []
        for i in range(discard + trials):
            flusher()
            _sync()
            start = _Event(enable_timing=True)
            end = _Event(enable_timing=True)
            start.record()
            fn(*args)
            end.record()
            _sync()
            if i >= discard:
                times.append(start.elapsed_time(end))
    return times


# ------------------------------------------------------------------------------ streams of one call
# Work a call puts on a stream other than the current one is invisible to CUDA events on the current
# stream, and CUDA graph capture of such a call can take the process down: a candidate running cuBLAS on
# a stream of its own killed the child (SIGSEGV, once SIGABRT) inside the capture (issue 11, item 4; a
# handle or stream it creates gets an error it never checks, as cudaMalloc is refused while a capture is
# open). So before any capture one eager call is profiled (`stream_census`), and only a call that used
# the current stream alone and made no runtime call that a capture refuses is captured.

# runtime and driver calls that an open stream capture refuses ("global" capture mode) or that
# synchronise the host: a call that makes them is timed eagerly, never captured
_CAPTURE_UNSAFE = re.compile(
    r"^(cudaMalloc(Host|Managed|Pitch|3D|Array)?|cudaHostAlloc|cudaFree(Host|Array)?|cudaStream(Create\w*|"
    r"Destroy|Synchronize|Query)|cudaEventSynchronize|cudaDeviceSynchronize|cudaMemcpy(2D|3D)?(ToSymbol|"
    r"FromSymbol)?|cudaMemset(2D|3D)?|cuMemAlloc\w*|cuMemFree\w*|cuMemHostAlloc|cuStream(Create\w*|Destroy\w*|"
    r"Synchronize|Query)|cuCtxSynchronize|cuEventSynchronize|cuMemcpy(HtoD|DtoH|DtoD)?(_v2)?|cuMemsetD\w*)$"
)
_MARK = "spin_kernel"  # the kernel of torch.cuda._sleep, launched on the current stream around the call
_MARK_CYCLES = 1000
_CALL_RANGE = "kb_stream_census_call"


@dataclass
class StreamCensus:
    """Where one eager call's GPU work ran, from torch.profiler (CUPTI) records.

    Attributes:
        streams: the profiler's ids of the streams other than the current one that ran kernels, copies
            or memsets during the call.
        unjoined: how many of those activities were still running when the current stream went past the
            call (a marker kernel enqueued on it right after the call had started): work the current
            stream never waited for. 0 for work that was joined back (`wait_stream`, events), and also for
            side work so short that it ended before the marker ran.
        unsafe_calls: runtime or driver calls made during the call that CUDA graph capture refuses or that
            synchronise the host (`cudaMalloc`, `cudaStreamCreate`, `cudaDeviceSynchronize`, ...).
        error: why no census could be taken ("" when it was).
    """

    streams: list[int] = field(default_factory=list)
    unjoined: int = 0
    unsafe_calls: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def capturable(self) -> bool:
        """Whether a CUDA graph capture of the call is safe to attempt."""
        return not self.error and not self.streams and not self.unsafe_calls


def stream_census(fn: Callable[..., Any], args: Sequence[Any]) -> StreamCensus:
    """Profile one eager call of `fn(*args)` (CUDA) and report where its GPU work ran (`StreamCensus`).

    One untimed call comes first, so the profiled call finds the allocator's cache warm (its `cudaMalloc`s
    would otherwise count as unsafe). A marker kernel (`torch.cuda._sleep`) is launched on the current
    stream before and right after the profiled call: the first names the current stream, the second's start
    is when the current stream went on. Never raises: a failure of the profiler or of the call is reported
    in `error`.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    if _mark is None:
        return StreamCensus(error="torch.cuda._sleep is missing")
    try:
        with torch.no_grad():
            fn(*args)  # warm: caches a capture emptied (torch.cuda.graph's empty_cache) fill up again
        _sync()
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            _mark(_MARK_CYCLES)
            with record_function(_CALL_RANGE):
                fn(*args)
            _mark(_MARK_CYCLES)
            _sync()
        events = list(prof.profiler.kineto_results.events())
    except Exception as e:  # noqa: BLE001 - no census is no verdict; the caller does not capture
        try:
            _sync()
        except Exception:  # noqa: BLE001
            pass
        return StreamCensus(error=f"{type(e).__name__}: {e}"[:300])
    return _census_of(events)


def _census_of(events: Sequence[Any]) -> StreamCensus:
    """The census from kineto events (`name()`, `device_type()`, `activity_type()`, `start_ns()`,
    `end_ns()`, `device_resource_id()`, as `torch._C._autograd._KinetoEvent` has them)."""
    cuda = torch.autograd.DeviceType.CUDA
    gpu = [e for e in events if e.device_type() == cuda and _is_work(e)]
    marks = sorted((e for e in gpu if _MARK in e.name()), key=lambda e: e.start_ns())
    if len(marks) < 2:
        return StreamCensus(error=f"the profiler saw {len(marks)} of the 2 marker kernels")
    first, last = marks[0], marks[-1]
    current = first.device_resource_id()
    work = [e for e in gpu if e is not first and e is not last and first.start_ns() <= e.start_ns()]
    side = [e for e in work if e.device_resource_id() != current]
    ranges = [e for e in events if e.name() == _CALL_RANGE and e.device_type() != cuda]
    lo, hi = (ranges[0].start_ns(), ranges[0].end_ns()) if ranges else (first.start_ns(), last.start_ns())
    unsafe = sorted({e.name() for e in events if e.device_type() != cuda and lo <= e.start_ns() <= hi
                     and _CAPTURE_UNSAFE.match(e.name())})  # fmt: skip
    return StreamCensus(
        streams=sorted({e.device_resource_id() for e in side}),
        unjoined=sum(1 for e in side if e.end_ns() > last.start_ns()),
        unsafe_calls=unsafe,
    )


def _is_work(e: Any) -> bool:
    """A GPU record of work (kernel, copy, memset), not of an annotation (the call's range shows on the
    device too) or a synchronisation."""
    kind = e.activity_type() if hasattr(e, "activity_type") else ""
    return e.name() != _CALL_RANGE and "annotation" not in kind and "sync" not in kind


def _capture(
    fn: Callable[..., Any], args: Sequence[Any], atol: float, rtol: float
) -> torch.cuda.CUDAGraph | None:
    """A CUDA graph of one call, or None when the model cannot be captured faithfully or safely.

    A call is captured only when `stream_census` found it using the current stream alone and making no
    runtime call a capture refuses (see the section's comment above).

    Capture fails loudly for some models (host syncs, host reads) and silently for others: a kernel launched
    on the legacy default stream is not recorded (its launch error goes unchecked), so the graph would
    replay nothing. So the graph is checked: its output buffers are poisoned, the graph replayed, and the
    result compared with an eager call on the same inputs.

    A capture that a host sync invalidates ends inside `capture_end`, before torch takes the default CUDA
    generator out of capture mode; every later random draw on the device would then raise ("Offset
    increment outside graph capture"), failing an honest candidate in the next timing stage. So the eager
    call runs under `torch.cuda.set_sync_debug_mode("error")` (a model that syncs through torch is never
    captured), and after any failure the generator gets back the state it had before. A failed
    `capture_end` also skips torch's exit from the capture stream, so the current stream is put back too.
    """
    from kb_agent.evaluator.compare import compare_outputs, flatten_outputs

    if not stream_census(fn, args).capturable:
        return None
    generator = torch.cuda.default_generators[torch.cuda.current_device()]
    saved = generator.clone_state()
    debug_mode = _get_sync_debug_mode()
    stream = torch.cuda.current_stream()
    try:
        with torch.no_grad():
            _set_sync_debug_mode("error")
            try:
                expected = fn(*args)
            finally:
                _set_sync_debug_mode(debug_mode)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):  # warm up on a side stream, as CUDA graph capture requires
                    fn(*args)
            torch.cuda.current_stream().wait_stream(side)
            _sync()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = fn(*args)
            _sync()
            for t in flatten_outputs(static_out):
                if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()):
                    t.fill_(float("nan"))
                elif isinstance(t, torch.Tensor):
                    t.fill_(-12345)
            graph.replay()
            _sync()
        if not compare_outputs(expected, static_out, atol, rtol, trial=0, seed=0).passed:
            return None
        return graph
    except Exception:
        _set_sync_debug_mode(debug_mode)
        torch.cuda.set_stream(stream)
        try:
            _sync()
        except Exception:
            pass
        generator.graphsafe_set_state(saved)
        return None


def captured_graphs(
    fns: dict[str, tuple[Callable[..., Any], Sequence[Any]]],
    atol: float,
    rtol: float,
    memo: dict[str, torch.cuda.CUDAGraph | None] | None = None,
) -> dict[str, torch.cuda.CUDAGraph] | None:
    """The CUDA graph of one call of each model of `fns` (`_capture`), or None when any of them cannot be
    captured. `memo`, a dict the caller keeps between calls on the same models and inputs (the device
    figure's and then the reproducible figure's), holds each key's capture or failure: each model is
    captured once (on an H200 a capture of a 1.6e9-element level-1 model, with its check, is ~0.18 s).
    Once one of them fails, the others' graphs are dropped from the memo too (None): no figure can replay
    them, and each would hold its memory pool through the eager figures that follow."""
    memo = {} if memo is None else memo
    for k, (fn, args) in fns.items():
        if k not in memo:
            memo[k] = _capture(fn, args, atol, rtol)
    graphs = {k: memo[k] for k in fns}
    if all(g is not None for g in graphs.values()):
        return graphs
    for k in fns:
        memo[k] = None
    return None


def _events_loop(
    call: Callable[[], Any],
    *,
    warmup: int,
    trials: int,
    flusher: L2Flusher,
    min_trials: int | None = None,
    target_rse: float | None = None,
) -> list[float]:
    """Per-call times in ms of `call`, each bracketed by events after an L2 flush, no host sync between
    calls. `trials` calls; with `target_rse` and `min_trials`, calls go in blocks of `min_trials` (one
    sync per block) and stop after the first block at which the median's relative standard error
    (`median_rse`) is at most `target_rse`, at `trials` at the latest."""
    block = min(min_trials, trials) if target_rse and min_trials else trials
    with torch.no_grad():
        for _ in range(warmup):
            call()
        _sync()
        times: list[float] = []
        while len(times) < trials:
            pairs = []
            for _ in range(min(block, trials - len(times))):
                flusher()
                start = _Event(enable_timing=True)
                end = _Event(enable_timing=True)
                start.record()
                call()
                end.record()
                pairs.append((start, end))
            _sync()
            times += [s.elapsed_time(e) for s, e in pairs]
            if target_rse and median_rse(times) <= target_rse:
                break
    return times


def time_device(
    fns: dict[str, tuple[Callable[..., Any], Sequence[Any]]],
    *,
    warmup: int,
    trials: int,
    flusher: L2Flusher,
    atol: float,
    rtol: float,
    graphs: dict[str, torch.cuda.CUDAGraph | None] | None = None,
    min_trials: int | None = None,
    target_rse: float | None = None,
) -> tuple[str, dict[str, list[float]]]:
    """Device-time figures for several models with one shared method; returns (method, times in ms by key).

    `atol`/`rtol` are the tolerances a graph replay must reproduce the eager output within; `graphs` a
    memo of captures shared with later calls on the same models and inputs (`captured_graphs`).
    `trials` calls per model, or, with `target_rse` and `min_trials`, as many blocks of `min_trials`
    calls as each model's median needs to reach that relative standard error (`_events_loop`): a
    steady 3 ms kernel stops at the first block instead of timing 100 calls.
    """
    kw = dict(warmup=warmup, trials=trials, flusher=flusher, min_trials=min_trials, target_rse=target_rse)
    captured = captured_graphs(fns, atol, rtol, graphs)
    if captured is not None:
        return DEVICE_GRAPH_METHOD, {k: _events_loop(g.replay, **kw) for k, g in captured.items()}
    return DEVICE_EVENTS_METHOD, {
        k: _events_loop(lambda f=fn, a=args: f(*a), **kw) for k, (fn, args) in fns.items()
    }


def time_cpu(fn: Callable[..., Any], args: Sequence[Any], *, warmup: int, trials: int) -> list[float]:
    """Host-clock per-call times in ms, for the CPU device."""
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args)
        times = []
        for _ in range(trials):
            t0 = _perf_counter()
            fn(*args)
            times.append((_perf_counter() - t0) * 1e3)
    return times


# The early read: right after the call returns, before any synchronisation, a sample of the output is
# copied in the current stream's order (`early_read`), and compared with the same elements after a
# device-wide synchronize. A consumer on the current stream sees what the early read saw; an output whose
# work runs on a stream the current stream does not wait for is a race there, even when every later check
# (which synchronises first) sees it done. Seen on the H200: a ReLU on a private stream (0.1 ms, 16384
# blocks) left the copies, queued behind its pending blocks, reading a finished output in 2 of 3 strict
# trials, hence the high-priority reader stream.
_READ_TAIL = 4096  # elements at the end of each output (what a block-ordered kernel writes last)
_READ_SAMPLE = 4096  # elements spread over the rest


@dataclass
class EarlyRead:
    """Samples of a call's output tensors, copied on the current stream before any synchronisation."""

    views: list[Callable[[], torch.Tensor]]
    copies: list[torch.Tensor]

    def changed(self) -> int:
        """Elements whose value now (call after a synchronize) differs from the early copy; NaN = NaN."""
        n = 0
        for view, early in zip(self.views, self.copies, strict=True):
            now = view()
            same = early == now
            if early.is_floating_point() or early.is_complex():
                same |= early.isnan() & now.isnan()
            n += int((~same).sum())
        return n


def early_read(out: Any) -> EarlyRead:
    """Copy a sample of every CUDA tensor in `out` (the last `_READ_TAIL` elements of its flattened
    values and `_READ_SAMPLE` spread over the rest) as a consumer on the current stream would see it: on a
    high-priority stream that first waits for the current one (so its small copies are not queued behind
    the pending blocks of a large kernel on another stream), which the current stream then waits for. Does
    not synchronise; read `EarlyRead.changed()` after `torch.cuda.synchronize()`."""
    from kb_agent.evaluator.compare import flatten_outputs, plain

    views: list[Callable[[], torch.Tensor]] = []
    copies: list[torch.Tensor] = []
    by_device: dict[torch.device, list[Callable[[], torch.Tensor]]] = {}
    for t in flatten_outputs(out):
        if not isinstance(t, torch.Tensor):
            continue
        t = plain(t)
        if t.device.type != "cuda" or t.numel() == 0:
            continue
        flat = t.reshape(-1)
        n = flat.numel()
        mine = by_device.setdefault(t.device, [])
        mine.append(lambda f=flat, n=n: f[max(0, n - _READ_TAIL) :])
        if n > _READ_TAIL:
            step = max(1, (n - _READ_TAIL) // _READ_SAMPLE)
            mine.append(lambda f=flat, n=n, s=step: f[: n - _READ_TAIL : s])
    for device, mine in by_device.items():
        current, reader = torch.cuda.current_stream(device), _reader(device)
        reader.wait_stream(current)
        with torch.cuda.stream(reader):
            copies += [v().clone() for v in mine]
        current.wait_stream(reader)
        views += mine
    return EarlyRead(views=views, copies=copies)


_readers: dict[torch.device, torch.cuda.Stream] = {}


def _reader(device: torch.device) -> torch.cuda.Stream:
    if device not in _readers:
        _readers[device] = torch.cuda.Stream(device=device, priority=-100)  # the highest there is
    return _readers[device]


@dataclass
class StrictTimes:
    """What `time_strict` measured, one entry per call (ms).

    Attributes:
        events_ms: CUDA events on the current stream around the call, the start event behind a
            device-side spin (STRICT_SPIN_MS): the device's time of the call.
        host_ms: host clock from before the spin to after a device-wide synchronize (data only: it also
            holds the time other processes' work on a shared GPU delays ours).
        after_stream_ms: host clock from the timed stream's end event being done (with the early read
            behind it) to a device-wide synchronize returning: the device work of this process that the
            timed stream never waited for (other processes' work does not count here).
        unready: calls whose output, read on the current stream right after the call, differed from its
            value after the device-wide synchronize (`early_read`).
        out: the last call's output; that call gets fresh values (`trials` >= 1).
        repeat_events_ms: CUDA events (host clock on the CPU) around the calls that repeated the previous
            call's inputs unchanged; empty for `trials=0`.
        before_last: a copy of the arguments as the last call got them (after its fresh values were
            written, before it ran), for checking its output and what it did to its inputs; None for
            `trials=0`.
        judged_events_ms: the times of the calls whose outputs are judged: the spot-checked call (where
            `judge` was given and there were at least two fresh calls), then the last call. Unlike
            `events_ms`, whose calls nobody checks, these are the times of outputs held to the
            reference's, once judged (`no_parity_replay` compares the parity figure with them).
        last_seed: the seed `before_call` was given before the last call (None without `before_call`).
        last_drawn: whether the last call's values were a draw (`draw`), not the harness's offsets.
    """

    events_ms: list[float]
    host_ms: list[float]
    after_stream_ms: list[float]
    unready: int
    out: Any
    repeat_events_ms: list[float] = field(default_factory=list)
    before_last: list | None = None
    judged_events_ms: list[float] = field(default_factory=list)
    last_seed: int | None = None
    last_drawn: bool = False


def work_escaped(events_ms: Sequence[float], after_stream_ms: Sequence[float]) -> bool:
    """strict mode's `timed_work_on_stream` rule on `time_strict`'s figures (ms per call): the median wait
    for the device after the timed stream was done exceeds `thresholds.STREAM_ESCAPE_FACTOR` times the
    timed stream's median plus `STREAM_ESCAPE_SLACK_MS`. The host clock around the whole call is not
    used: on a GPU shared with other processes it also holds their time slices."""
    from kb_agent.evaluator.thresholds import STREAM_ESCAPE_FACTOR, STREAM_ESCAPE_SLACK_MS

    limit = STREAM_ESCAPE_FACTOR * statistics.median(events_ms) + STREAM_ESCAPE_SLACK_MS
    return statistics.median(after_stream_ms) > limit


def time_strict(
    fn: Callable[..., Any],
    args: Sequence[Any],
    *,
    trials: int,
    flusher: L2Flusher | None,
    device: torch.device,
    judge: Callable[[list, Any, int], None] | None = None,
    before_call: Callable[[int], None] | None = None,
    draw: Callable[[int], list | None] | None = None,
) -> StrictTimes:
    """Strict-mode timing: fresh input values for every call, and the device work the timed stream missed.

    `trials` calls get fresh values: before each (outside the timed window) every input tensor is
    written with new values, so outputs cached or replayed by input value, address or version are
    stale, and whatever the candidate wrote into its inputs is gone. The values are `draw(seed)`, a new
    set of arguments under a seed drawn at random (the stage's `get_inputs()`: the problem's own
    distribution, so the structure it guarantees, a symmetric or triangular matrix, holds), written in
    place (`_write_drawn`); where `draw` is None or returns None (a draw of other sizes) they are the
    values `args` held when this was called (a copy the candidate never sees), a floating-point tensor
    plus small random offsets, one per element (`_write_fresh`, `add_offsets`). As many calls again,
    shuffled in among them at random, repeat the previous call's inputs unchanged (`repeat_events_ms`): `no_replay` compares the two kinds, timed in one loop under the same
    protocol, so what slows every call alike (launch latency of a tiny kernel, a profiler's callbacks,
    another process on the GPU) slows both. On CUDA each call is timed with events on the current stream,
    the start event behind a device-side spin of STRICT_SPIN_MS (the device's time of the call, without
    the host's launch latency, which the host work before a fresh call inflates); a repeated call's
    values are drawn there too, and dropped, so the host works and the device idles before it as before a
    fresh call (an honest 13 us conv + Triton BatchNorm read 0.15 ms on fresh values, 0.0135 ms
    repeated, and failed `no_replay` in 2 of 3 evaluations: the GPU's clocks drop while it waits on the
    draw's host work; H100, 2026-12-07);
    then the output is sampled on that stream (`early_read`), the host waits for the end event and the
    sample, and then for the whole device (`_sync()`, every stream of this process): that last wait is
    the work moved to another stream or a thread (`after_stream_ms`). On the CPU every figure is the host
    clock around the call. The last call gets fresh values, and a copy of its arguments as it got them
    is kept (`before_last`) for its output and its inputs to be checked. A candidate can count the
    fresh calls (each writes its inputs), so it knows which is the last: one more fresh call, drawn at
    random and written as every other (`spot`), is judged right after it ran: `judge(before, out, seed,
    drawn)` gets the arguments as that call got them (a copy of the timed tensors once the draw was
    written, or made again from the harness's copy and the call's offsets, whose private generator's
    seed is kept), its output, the seed `before_call` was given for it and whether its values were a
    draw, while the next call waits. Tensors inside list or tuple arguments are written too. Holds one copy of the arguments besides them, and a
    draw while one is written or judged. `before_call(seed)`, when given, runs before every call, outside the timed window, with a seed drawn at random for that
    call (the stage seeds the RNGs with it, as KernelBench does before each model call, so that a judged
    call of a model that draws random numbers is compared with the reference's under the same seed; a
    fixed seed would let a candidate reuse draws it made once for it). See `StrictTimes`.

    Raises:
        InputsAltered: the candidate changed a timed tensor's shape, strides, dtype or device.
    """
    from kb_agent.evaluator.compare import clone_args, flatten_outputs

    timed = [a for a in flatten_outputs(list(args)) if isinstance(a, torch.Tensor)]
    layout = [_layout_of(a) for a in timed]
    rng = entropy
    # the harness's own copy, what a fresh call's values are made from where no draw fits
    base = clone_args(list(args))
    pairs = list(zip(timed, (b for b in flatten_outputs(base) if isinstance(b, torch.Tensor)), strict=True))
    events, host, after, repeats = [], [], [], []
    unready = 0
    out = before_last = last_seed = None
    last_drawn = False
    cuda = device.type == "cuda"
    # the first and the last call are fresh (the last one's output is checked); the rest, fresh and
    # repeated, in an order the candidate cannot foresee
    middle = [False] * max(0, trials - 2) + [True] * trials
    rng.shuffle(middle)
    plan = [] if trials < 1 else [True, False] if trials == 1 else [False, *middle, False]
    fresh_before_last = [k for k, repeat in enumerate(plan[:-1]) if not repeat]
    spot = rng.choice(fresh_before_last) if judge is not None and fresh_before_last else None
    judged: list[float] = []
    with torch.no_grad():
        for k, repeat in enumerate(plan):
            last = k == len(plan) - 1
            offsets_seed, call_seed = rng.randrange(2**63), rng.randrange(2**31)
            # the values this call gets, where they are a draw; None where it does not fit (a get_inputs()
            # of random sizes) and the harness's copy gets offsets instead
            if not repeat:
                _check_layouts(timed, layout)
            given = draw(rng.randrange(2**31)) if draw is not None and (cuda or not repeat) else None
            if repeat:  # on CUDA drawn and dropped: the host's work, and the device's idle time, before
                given = None  # the call are a fresh call's (see the docstring)
            drawn_values = given is not None
            if drawn_values:
                _write_drawn(timed, given)
                given = None  # the draw goes before a copy is made
                # a judged call's values as it gets them: dense copies of the timed tensors, as every
                # stage hands the reference (a draw's own tensors may be views it cannot take)
                given = clone_args(list(args)) if last or k == spot else None
            elif not repeat:
                _write_fresh(pairs, into_base=last, seed=offsets_seed)
            if last:
                before_last = given if drawn_values else base  # its values as the last call gets them
            if flusher is not None:
                flusher()
            if before_call is not None:
                before_call(call_seed)
            if last:
                last_seed, last_drawn = call_seed, drawn_values
            if cuda:
                _sync()
                start, end, read = (_Event(enable_timing=True) for _ in range(3))
                t0 = _perf_counter()
                # the window opens once the spin is done, by when the host has launched the call: the
                # device's work alone, not the host's launch latency, which the host work of a fresh
                # call's draw, look and copy inflated 2-3.5x against a repeated call's (an honest 10 us
                # kernel failed no_parity_replay and no_replay, H100, 2026-12-07)
                if _spin is not None:
                    _spin(int(STRICT_SPIN_MS * _SPIN_CYCLES_PER_MS))
                start.record()
                out = fn(*args)
                end.record()
                sample = early_read(out)
                read.record()
                read.synchronize()
                t1 = _perf_counter()
                _sync()
                t2 = _perf_counter()
                if repeat:
                    repeats.append(start.elapsed_time(end))
                    continue
                host.append((t2 - t0) * 1e3)
                after.append((t2 - t1) * 1e3)
                events.append(start.elapsed_time(end))
                unready += sample.changed() > 0
            else:
                t0 = _perf_counter()
                out = fn(*args)
                (repeats if repeat else host).append((_perf_counter() - t0) * 1e3)
                if not repeat:
                    events.append(host[-1])
                    after.append(0.0)
            if last or k == spot:
                judged.append(events[-1])
            if k == spot:
                if not drawn_values:  # the values this call got: the harness's copy plus its offsets
                    given = clone_args(base)
                    _offset_like(given, offsets_seed)
                judge(given, out, call_seed, drawn_values)
                out = None
            given = None
    return StrictTimes(events_ms=events, host_ms=host, after_stream_ms=after, unready=unready, out=out,
                       repeat_events_ms=repeats, before_last=before_last, judged_events_ms=judged,
                       last_seed=last_seed, last_drawn=last_drawn)  # fmt: skip


# Tensor's own methods, for the harness's reads and writes of the timed tensors: the candidate has had
# them, and a method looked up on one can be an attribute of its own (`x.copy_ = f` ran the candidate's
# code at each fresh draw, which computed the next output there, outside the timed window, helper-24,
# 2026-12-07; `strict.shadowed_methods` names such a tensor)
_copy_into = torch.Tensor.copy_
_stride = torch.Tensor.stride
_is_float = torch.Tensor.is_floating_point


class InputsAltered(Exception):
    """A tensor the candidate is timed with changed its shape, strides, dtype or device between calls
    (`resize_`, `as_strided_`, `set_` on its own input): its values can no longer be written as the
    protocol has them."""


def _write_fresh(pairs: list, into_base: bool, seed: int) -> None:
    """Fresh values for a timed call: each timed tensor gets the harness's copy of its values, a
    floating-point one plus new random offsets (`add_offsets`, from a generator of the harness's own
    seeded with `seed`, so that `_offset_like` can make the same values again and nothing the candidate
    does to torch's default generator shows in them), so nothing the candidate wrote into its inputs in
    an earlier call survives and offsets do not add up. `into_base`: the offsets go into the harness's
    copy first (which then holds exactly what the call gets).
    (Their layouts are checked first, `_check_layouts`.)
    """
    gens = seeded_generators(seed)
    for a, b in pairs:
        if into_base and _is_float(a):
            add_offsets(b, gens(b.device))
            _copy_into(a, b)
        else:
            _copy_into(a, b)
            if _is_float(a):
                add_offsets(a, gens(a.device))


def _layout_of(t: torch.Tensor) -> tuple:
    # its class too: an input given a subclass of the candidate's (`x.__class__ = ...`) runs its
    # __torch_function__ in every write of the harness's, Tensor's own methods included (helper-25)
    return (tuple(t.shape), _stride(t), t.dtype, t.device, type(t))


def _check_layouts(timed: list, layout: list) -> None:
    """Raises InputsAltered where a timed tensor's shape, strides, dtype or device differ from `layout`
    (as the stage made them), or it has attributes of its own over Tensor's, before fresh values are
    written into it."""
    from kb_agent.evaluator.strict import shadowed_methods

    for i, (a, then) in enumerate(zip(timed, layout, strict=True)):
        if own := shadowed_methods(a):
            raise InputsAltered(
                f"input tensor {i} was given attributes of its own over Tensor's ({', '.join(own[:4])}) between "
                "timed calls: the harness's writes of fresh values would run the candidate's code"
            )
        if type(a) is not then[4]:
            raise InputsAltered(
                f"input tensor {i} was made a {type(a).__module__}.{type(a).__name__} between timed calls: the "
                "harness's writes of fresh values would run the candidate's code"
            )
        if _layout_of(a) != then:
            raise InputsAltered(
                f"input tensor {i} changed from shape {then[0]}, strides {then[1]} to shape "
                f"{tuple(a.shape)}, strides {_stride(a)} between timed calls: the candidate resized or "
                "restrided its own input in place"
            )


def _write_drawn(timed: list, values: list) -> None:
    """Write the tensors of a draw (`values`, the arguments' structure, each tensor of its timed
    tensor's shape and dtype: the caller's `draw` says so) into the timed tensors, in order (their
    layouts checked first, `_check_layouts`)."""
    from kb_agent.evaluator.compare import flatten_outputs

    new = [v for v in flatten_outputs(values) if isinstance(v, torch.Tensor)]
    with torch.no_grad():
        for a, v in zip(timed, new, strict=True):
            _copy_into(a, v)


def _offset_like(values: list, seed: int) -> None:
    """Add to the floating-point tensors of `values` (a copy of the harness's copy, in place) the offsets
    `_write_fresh(..., into_base=False, seed=seed)` gave the timed tensors: the values that call got."""
    from kb_agent.evaluator.compare import flatten_outputs

    gens = seeded_generators(seed)
    for t in flatten_outputs(values):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            add_offsets(t, gens(t.device))


def seeded_generators(seed: int) -> Callable[[torch.device], torch.Generator]:
    """A generator per device, each seeded with `seed` when first asked for, then drawn on in turn."""
    made: dict[torch.device, torch.Generator] = {}

    def get(device: torch.device) -> torch.Generator:
        if device not in made:
            made[device] = torch.Generator(device=device)
            made[device].manual_seed(seed)
        return made[device]

    return get


OFFSET = 1e-3  # strict timing's fresh values: each element moved by at most this much
_OFFSET_CHUNK = 1 << 24  # elements of random offsets made at once (64 MiB of fp32)


def add_offsets(t: torch.Tensor, generator: torch.Generator | None = None) -> None:
    """Add an independent random offset in [-OFFSET, OFFSET] to every element of floating-point `t`, in
    place, without grad, drawn from `generator` (torch's default one when None). One offset per element,
    not one per tensor: with a single constant c a fresh input is the last one plus c, and a candidate can
    derive its output from a cached one wherever the operation is linear or shift-invariant in c (a
    matmul, a softmax). Made a chunk at a time where `t` is contiguous, so the extra memory stays small
    for the largest inputs; the same generator state gives the same offsets to tensors of one layout."""
    with torch.no_grad():
        if not t.is_contiguous():
            t.add_(torch.empty_like(t).uniform_(-OFFSET, OFFSET, generator=generator))
            return
        flat = t.view(-1)
        for start in range(0, flat.numel(), _OFFSET_CHUNK):
            part = flat[start : start + _OFFSET_CHUNK]
            part.add_(torch.empty_like(part).uniform_(-OFFSET, OFFSET, generator=generator))


# ------------------------------------------------------------------------------ the reproducible figure
# A third figure, beside parity and device (issue 11, goal P3: the same candidate timed in two fresh
# processes within 1 % median, 3 % p95). Reference and candidate are timed in alternating pairs (AB BA AB
# ...), so drift, clock changes and throttling hit both; each call follows an L2 flush; the calls are CUDA
# graph replays where both models capture faithfully (`_capture`), else eager calls, in blocks enqueued
# behind a device-side spin so the host's launch latency stays out of every window. Pairs are added until
# the relative standard error (RSE) of the reference's median, the candidate's median and the speedup are
# all under a target, within trial and time caps. The speedup is the median of the paired per-pair ratios
# (reference ms / candidate ms); its 95 % confidence interval is the distribution-free interval of a median
# (order statistics at Binomial(n, 1/2) quantiles, `median_ci`), and every RSE is that interval's
# half-width / (1.96 × median).

REPRO_GRAPH_METHOD = "interleaved_graph_replay"
REPRO_EVENTS_METHOD = "interleaved_events"
REPRO_CPU_METHOD = "interleaved_cpu_perf_counter"
CI_LEVEL = 0.95
# bound at import, like the timers above
_spin = getattr(torch.cuda, "_sleep", None)
_clock_rate = getattr(torch.cuda, "clock_rate", None)
_SPIN_CYCLES_PER_MS = 2.0e6  # a spin of this many cycles per ms lasts at least that long below 2 GHz


@functools.lru_cache(maxsize=4096)
def _median_ci_ranks(n: int, level: float) -> int:
    """How many order statistics `median_ci` drops at each end: the largest j with
    P(Binomial(n, 1/2) <= j - 1) <= (1 - level) / 2 (0 when even the extremes cover less)."""
    tail = (1.0 - level) / 2.0
    log_p = -n * math.log(2.0)  # log P(B = 0)
    cdf, j = 0.0, 0
    for k in range(n // 2 + 1):
        if k:
            log_p += math.log(n - k + 1) - math.log(k)
        cdf += math.exp(log_p)
        if cdf > tail:
            break
        j = k + 1
    return j


def median_ci(values: Sequence[float], level: float = CI_LEVEL) -> tuple[float, float]:
    """Distribution-free confidence interval of a median: the order statistics x(j) and x(n+1-j) of the
    sorted sample, j from `_median_ci_ranks`. Covers the population median with probability at least
    `level` for independent draws from any continuous distribution. Below 6 values at 95 % no such j
    exists and (min, max) is returned, which covers less.

    Raises:
        ValueError: `values` is empty.
    """
    x = sorted(values)
    if not x:
        raise ValueError("median_ci of no values")
    j = _median_ci_ranks(len(x), level)
    return (x[0], x[-1]) if j == 0 else (x[j - 1], x[len(x) - j])


def _z(level: float) -> float:
    return statistics.NormalDist().inv_cdf((1.0 + level) / 2.0)


def median_rse(values: Sequence[float], level: float = CI_LEVEL) -> float:
    """Relative standard error of the sample median: half the width of `median_ci` over z × median
    (z = 1.96 at 95 %); inf for a median of 0 or fewer than 2 values."""
    if len(values) < 2:
        return math.inf
    lo, hi = median_ci(values, level)
    med = statistics.median(values)
    return (hi - lo) / (2.0 * _z(level) * abs(med)) if med else math.inf


def mean_ratio_ci(
    reference: TimingStats, candidate: TimingStats, level: float = CI_LEVEL
) -> list[float] | None:
    """Confidence interval [lo, hi] of reference.mean_ms / candidate.mean_ms, two independent samples, by
    the delta method on the log ratio: se² = (sd_r / (mean_r √n_r))² + (sd_c / (mean_c √n_c))²,
    interval = ratio × exp(±z se). None when a mean is not positive."""
    if reference.mean_ms <= 0 or candidate.mean_ms <= 0:
        return None
    se = math.hypot(
        reference.std_ms / (reference.mean_ms * math.sqrt(max(reference.trials, 1))),
        candidate.std_ms / (candidate.mean_ms * math.sqrt(max(candidate.trials, 1))),
    )
    ratio = reference.mean_ms / candidate.mean_ms
    return [ratio * math.exp(-_z(level) * se), ratio * math.exp(_z(level) * se)]


def median_ratio_ci(
    reference_ms: Sequence[float], candidate_ms: Sequence[float], level: float = CI_LEVEL
) -> list[float] | None:
    """Confidence interval [lo, hi] of median(reference) / median(candidate), two independent samples:
    each median's RSE from `median_rse`, combined on the log ratio (delta method). None when either RSE
    is not finite."""
    se = math.hypot(median_rse(reference_ms, level), median_rse(candidate_ms, level))
    if not math.isfinite(se):
        return None
    ratio = statistics.median(reference_ms) / statistics.median(candidate_ms)
    return [ratio * math.exp(-_z(level) * se), ratio * math.exp(_z(level) * se)]


def sm_clock_mhz(device: torch.device) -> int | None:
    """The SM clock in MHz as NVML last sampled it (`torch.cuda.clock_rate`, through nvidia-ml-py), or None
    on the CPU or when NVML cannot be read."""
    if device.type != "cuda" or _clock_rate is None:
        return None
    try:
        return int(_clock_rate(device))
    except Exception:  # noqa: BLE001 - no pynvml, no NVML in the sandbox, ...: the clock is data, not a verdict
        return None


class EventTimer:
    """Times calls with CUDA events on the current stream, enqueued back to back; `read()` synchronises once
    and returns the ms of every call since the last read. `hold(ms)` enqueues a device-side spin first, so
    the host can queue a whole block while the device waits, and no window holds a launch gap."""

    def __init__(self):
        self._pending: list[tuple[Any, Any]] = []

    def time(self, call: Callable[[], Any]) -> None:
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        start.record()
        call()
        end.record()
        self._pending.append((start, end))

    def read(self) -> list[float]:
        _sync()
        out = [s.elapsed_time(e) for s, e in self._pending]
        self._pending = []
        return out

    def hold(self, ms: float) -> None:
        if _spin is not None and ms > 0:
            _spin(int(ms * _SPIN_CYCLES_PER_MS))


class HostTimer:
    """Times calls with the host clock (the CPU device); same interface as `EventTimer`."""

    def __init__(self):
        self._pending: list[float] = []

    def time(self, call: Callable[[], Any]) -> None:
        t0 = _perf_counter()
        call()
        self._pending.append((_perf_counter() - t0) * 1e3)

    def read(self) -> list[float]:
        out, self._pending = self._pending, []
        return out

    def hold(self, ms: float) -> None:
        pass


@dataclass
class Interleaved:
    """What `time_interleaved` measured: per-call ms of each model (pair i of one list beside pair i of the
    other), the keys in the order they were timed, and why the loop stopped ("rse": every RSE under the
    target; "max_trials"; "time_cap")."""

    times: dict[str, list[float]]
    order: list[str]
    stopped: str
    seconds: float
    blocks: int

    def ratios(self, num: str, den: str) -> list[float]:
        return [a / b if b > 0 else math.inf for a, b in zip(self.times[num], self.times[den], strict=True)]


def time_interleaved(
    calls: dict[str, Callable[[], Any]],
    *,
    timer: EventTimer | HostTimer,
    flusher: Callable[[], None],
    warmup: int,
    min_trials: int,
    max_trials: int,
    max_seconds: float,
    target_rse: float,
    clock: Callable[[], float] = _perf_counter,
) -> Interleaved:
    """Time two zero-argument calls (reference first, candidate second) in alternating pairs.

    Pair i runs A then B for even i and B then A for odd i, each call after `flusher()`; `warmup` pairs are
    run untimed first. Pairs are enqueued in blocks of about `thresholds.REPRO_BLOCK_MS` of timed work
    (at most `REPRO_MAX_BLOCK_PAIRS`), each behind `timer.hold()` for the host time the previous block took
    to enqueue, and read back at the block's end. The loop stops after a block once there are at least
    `min_trials` pairs and the RSE (`median_rse`) of A's median, B's median and the paired ratios A/B are
    all at most `target_rse`; or at `max_trials` pairs; or once `max_seconds` (host clock, from the first
    timed pair) have passed, but never below `REPRO_FEWEST_PAIRS` pairs.

    Raises:
        ValueError: `calls` does not hold exactly two calls.
    """
    from kb_agent.evaluator.thresholds import REPRO_BLOCK_MS, REPRO_FEWEST_PAIRS, REPRO_MAX_BLOCK_PAIRS

    if len(calls) != 2:
        raise ValueError(f"time_interleaved times two calls, not {len(calls)}")
    a, b = calls
    times: dict[str, list[float]] = {a: [], b: []}
    order: list[str] = []
    with torch.no_grad():
        t0 = clock()
        for i in range(warmup):
            for k in (a, b) if i % 2 == 0 else (b, a):
                flusher()
                calls[k]()
        timer.read()
        host_ms_per_pair = (clock() - t0) * 1e3 / max(warmup, 1)
        start, pairs, block, blocks, stopped = clock(), 0, 1, 0, "max_trials"
        while pairs < max_trials:
            timer.hold(min(1.25 * host_ms_per_pair * block, 50.0))
            keys: list[str] = []
            t_enq = clock()
            for i in range(pairs, pairs + block):
                for k in (a, b) if i % 2 == 0 else (b, a):
                    flusher()
                    timer.time(calls[k])
                    keys.append(k)
            host_ms_per_pair = (clock() - t_enq) * 1e3 / block
            got = timer.read()
            for k, ms in zip(keys, got, strict=True):
                times[k].append(ms)
            order += keys
            pairs, blocks = pairs + block, blocks + 1
            ratios = [x / y if y > 0 else math.inf for x, y in zip(times[a], times[b], strict=True)]
            if (
                pairs >= min_trials
                and max(median_rse(times[a]), median_rse(times[b]), median_rse(ratios)) <= target_rse
            ):
                stopped = "rse"
                break
            if clock() - start >= max_seconds and pairs >= REPRO_FEWEST_PAIRS:
                stopped = "time_cap"
                break
            per_pair_ms = sum(got) / block
            block = max(
                1,
                min(REPRO_MAX_BLOCK_PAIRS, max_trials - pairs, int(REPRO_BLOCK_MS / max(per_pair_ms, 1e-3))),
            )
    return Interleaved(times=times, order=order, stopped=stopped, seconds=clock() - start, blocks=blocks)


def time_repro(
    info: TimingInfo,
    fns: dict[str, tuple[Callable[..., Any], Sequence[Any]]],
    settings: EvalSettings,
    *,
    device: torch.device,
    flusher: L2Flusher | None,
    atol: float,
    rtol: float,
    graphs: dict[str, torch.cuda.CUDAGraph | None] | None = None,
) -> Interleaved:
    """The reproducible figure of `fns` ({"reference": (model, inputs), "candidate": (model, inputs)}),
    written into `info`'s `repro_*` and `sm_clock_mhz_*` fields (see the section's comment above).

    On CUDA the calls are graph replays when `settings.repro_method` is "auto" and both models capture
    faithfully (`repro_method` "interleaved_graph_replay"), else eager calls ("interleaved_events"); on the
    CPU, eager calls on the host clock ("interleaved_cpu_perf_counter", no flush). Times in ms;
    `repro_speedup` is the median of the paired ratios reference / candidate, `repro_ci95` its 95 %
    interval [lo, hi], `repro_trials` the number of pairs. `graphs`: the captures' memo
    (`captured_graphs`) of an earlier figure on the same models and inputs. Returns the pairs as timed
    (the device figure's calls too, `stages.timing.device_figure`).
    """
    cuda = device.type == "cuda"
    info.sm_clock_mhz_before = sm_clock_mhz(device)
    method = REPRO_CPU_METHOD
    calls = {k: (lambda f=fn, a=args: f(*a)) for k, (fn, args) in fns.items()}
    if cuda:
        method = REPRO_EVENTS_METHOD
        if settings.repro_method == "auto":
            captured = captured_graphs(fns, atol, rtol, graphs)
            if captured is not None:
                method, calls = REPRO_GRAPH_METHOD, {k: g.replay for k, g in captured.items()}
    run = time_interleaved(
        calls,
        timer=EventTimer() if cuda else HostTimer(),
        flusher=flusher if cuda and flusher is not None else (lambda: None),
        warmup=settings.warmup,
        min_trials=settings.repro_min_trials,
        max_trials=settings.repro_max_trials,
        max_seconds=settings.repro_max_s,
        target_rse=settings.repro_target_rse,
    )
    info.sm_clock_mhz_after = sm_clock_mhz(device)
    ratios = run.ratios("reference", "candidate")
    info.repro_method = method
    info.repro_reference = stats(run.times["reference"])
    info.repro_candidate = stats(run.times["candidate"])
    info.repro_speedup = statistics.median(ratios)
    info.repro_ci95 = list(median_ci(ratios))
    info.repro_rse = median_rse(ratios)
    info.repro_trials = len(ratios)
    info.repro_stopped = run.stopped
    info.repro_seconds = run.seconds
    info.settings["repro"] = {
        "target_rse": settings.repro_target_rse,
        "min_trials": settings.repro_min_trials,
        "max_trials": settings.repro_max_trials,
        "max_s": settings.repro_max_s,
        "warmup": settings.warmup,
        "blocks": run.blocks,
    }
    return run
