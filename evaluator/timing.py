"""Timing of one model's forward, reference and candidate alike.

Two figures, each with its method recorded:

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
  The median is reported as the figure (robust to the odd preempted trial).

On the CPU (Triton under the interpreter) only a host-clock figure (`cpu_perf_counter`) exists; it is
not comparable with anything published.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from kb_agent.evaluator.result import TimingStats

# bound at import, which the worker does before the candidate's code runs, so a candidate that replaces
# them does not change the timing (strict mode also reports the replacement)
_sync = torch.cuda.synchronize
_Event = torch.cuda.Event
_perf_counter = time.perf_counter
_get_sync_debug_mode = torch.cuda.get_sync_debug_mode
_set_sync_debug_mode = torch.cuda.set_sync_debug_mode

PARITY_METHOD = "cuda_event_sync"
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


def _capture(
    fn: Callable[..., Any], args: Sequence[Any], atol: float, rtol: float
) -> torch.cuda.CUDAGraph | None:
    """A CUDA graph of one call, or None when the model cannot be captured faithfully.

    Capture fails loudly for some models (host syncs, host reads) and silently for others: a kernel launched
    on the legacy default stream is not recorded (its launch error goes unchecked), so the graph would
    replay nothing. So the graph is checked: its output buffers are poisoned, the graph replayed, and the
    result compared with an eager call on the same inputs.

    A capture that a host sync invalidates ends inside `capture_end`, before torch takes the default CUDA
    generator out of capture mode; every later random draw on the device would then raise ("Offset
    increment outside graph capture"), failing an honest candidate in the next timing stage. So the eager
    call runs under `torch.cuda.set_sync_debug_mode("error")` (a model that syncs through torch is never
    captured), and after any failure the generator gets back the state it had before.
    """
    from kb_agent.evaluator.compare import compare_outputs, flatten_outputs

    generator = torch.cuda.default_generators[torch.cuda.current_device()]
    saved = generator.clone_state()
    debug_mode = _get_sync_debug_mode()
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
        try:
            _sync()
        except Exception:
            pass
        generator.graphsafe_set_state(saved)
        return None


def _events_loop(call: Callable[[], Any], *, warmup: int, trials: int, flusher: L2Flusher) -> list[float]:
    with torch.no_grad():
        for _ in range(warmup):
            call()
        _sync()
        pairs = []
        for _ in range(trials):
            flusher()
            start = _Event(enable_timing=True)
            end = _Event(enable_timing=True)
            start.record()
            call()
            end.record()
            pairs.append((start, end))
        _sync()
    return [s.elapsed_time(e) for s, e in pairs]


def time_device(
    fns: dict[str, tuple[Callable[..., Any], Sequence[Any]]],
    *,
    warmup: int,
    trials: int,
    flusher: L2Flusher,
    atol: float,
    rtol: float,
) -> tuple[str, dict[str, list[float]]]:
    """Device-time figures for several models with one shared method; returns (method, times in ms by key).

    `atol`/`rtol` are the tolerances a graph replay must reproduce the eager output within.
    """
    graphs = {k: _capture(fn, args, atol, rtol) for k, (fn, args) in fns.items()}
    if all(g is not None for g in graphs.values()):
        return "cuda_graph_replay", {
            k: _events_loop(g.replay, warmup=warmup, trials=trials, flusher=flusher)
            for k, g in graphs.items()
        }
    del graphs
    return "back_to_back_events", {
        k: _events_loop(lambda f=fn, a=args: f(*a), warmup=warmup, trials=trials, flusher=flusher)
        for k, (fn, args) in fns.items()
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


def time_strict(
    fn: Callable[..., Any],
    args: Sequence[Any],
    *,
    trials: int,
    flusher: L2Flusher | None,
    device: torch.device,
) -> tuple[list[float], list[float], Any]:
    """Strict-mode timing: fresh input values for every call and a device-wide synchronize in the window.

    Before each call (outside the timed window) every floating-point input gets a small random offset in
    place, so outputs cached or replayed by input value or address are stale. Each call is timed twice:
    CUDA events on the current stream, and the host clock from before the call to after
    `_sync()` (which waits for every stream, so work moved to a side stream or a thread
    is inside it). Returns (event ms, host ms, the last output).
    """
    floats = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    events, host = [], []
    out = None
    cuda = device.type == "cuda"
    with torch.no_grad():
        for _ in range(trials):
            for a in floats:
                a.add_(torch.empty((), device=a.device, dtype=a.dtype).uniform_(-1e-3, 1e-3))
            if flusher is not None:
                flusher()
            if cuda:
                _sync()
                start, end = _Event(enable_timing=True), _Event(enable_timing=True)
                t0 = _perf_counter()
                start.record()
                out = fn(*args)
                end.record()
                _sync()
                host.append((_perf_counter() - t0) * 1e3)
                events.append(start.elapsed_time(end))
            else:
                t0 = _perf_counter()
                out = fn(*args)
                host.append((_perf_counter() - t0) * 1e3)
                events.append(host[-1])
    return events, host, out
