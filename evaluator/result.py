"""The `EvalResult` tree: what one evaluation of one candidate produced.

It crosses a process boundary (child -> parent, as JSON) and a storage boundary (the agent's SQLite
store), so every part is a dataclass that round-trips through `to_dict` / `from_dict`.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

SCHEMA_VERSION = 1


# What `kb-agent problems check` can find wrong with a reference (`evaluator.stages.problem_check`). The
# flags judged at a tolerance come at the check's own, then with `_loose`: seen only at the looser
# tolerance of another precision (fp16/bf16's 1e-2 while checking fp32).
TOLERANCE_FLAGS = ("zeros_pass", "constant_pass", "input_independent", "mostly_zeros", "mostly_constant",
                   "mostly_input_independent")  # fmt: skip
CHECK_FLAGS = ("reference_fails", "nondeterministic", "state_carried", "nonfinite_output", *TOLERANCE_FLAGS,
               *(f + "_loose" for f in TOLERANCE_FLAGS))  # fmt: skip


class Status(str, Enum):
    """Verdict of one evaluation. Every status but CORRECT comes with a message the model can act on."""

    COMPILE_ERROR = (
        "compile_error"  # syntax error, nvcc/C++ error, Triton compile error, no ModelNew, import failure
    )
    RUNTIME_ERROR = "runtime_error"  # exception, CUDA fault, out of memory, crash or exit of the child
    TIMEOUT = "timeout"  # a stage (build, correctness, timing) ran past its limit
    INCORRECT = "incorrect"  # ran, but the output differs from the reference
    REJECTED = "rejected"  # broke a rule of the evaluator (strict mode); the message says which
    CORRECT = "correct"

    def __str__(self) -> str:
        return self.value


@dataclass
class CompileInfo:
    """Building/importing the candidate module (CUDA extensions build at import via load_inline;
    Triton kernels compile at first launch, so their compile errors surface in the correctness stage)."""

    ok: bool | None = None
    backend: str | None = None  # "cuda", "triton", or "torch" when neither was found
    seconds: float | None = None  # wall seconds of the import, including any extension build
    errors: list[str] = field(default_factory=list)  # first compiler errors, "file(line): error: ..."
    log: str = ""  # compiler output, trimmed to the part that matters
    # each extension build (build.LoadInlineWrapper.builds): name, seconds, cached (an identical source
    # built before), path ("cached_binding": main.o from the binding cache, "own_binding": compiled here,
    # "stock": load_inline as it is; evaluator.bindcache), reason (why not the cached binding), binding_key,
    # and "child": "build" or "run", the child that made the call (evaluator.runner)
    builds: list[dict] = field(default_factory=list)


@dataclass
class TrialResult:
    """One correctness trial: fresh inputs from `seed`, reference vs candidate."""

    trial: int
    seed: int
    passed: bool
    expected_shape: list[int] | None = None
    actual_shape: list[int] | None = None
    expected_dtype: str | None = None
    actual_dtype: str | None = None
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None
    max_rel_diff: float | None = None
    mismatched: int | None = None  # elements failing |a - e| <= atol + rtol * |e|
    numel: int | None = None
    mismatch_fraction: float | None = None
    first_mismatches: list[dict] = field(
        default_factory=list
    )  # [{"index": [..], "expected": x, "actual": y}]
    nan_expected: int = 0
    nan_actual: int = 0
    inf_expected: int = 0
    inf_actual: int = 0
    problem: str | None = None  # "shape", "dtype", "device", "values", "type" (not a tensor); None: passed
    output_index: int | None = (
        None  # which output of a tuple/list failed (flattened order); None: the only one
    )
    diagnosis: str = ""  # the mismatch's pattern in one line ("only the tail is wrong: ..."); "" when none
    mismatch_map: list[str] = field(default_factory=list)  # caption, then rows of cells ('.', '+', '#', 'N')


@dataclass
class CorrectnessInfo:
    """KernelBench-parity correctness: `trials` fresh inputs, `torch.allclose(atol, rtol)` on each."""

    trials: int = 0
    passed: int = 0
    atol: float | None = None
    rtol: float | None = None
    seed: int | None = None
    results: list[TrialResult] = field(default_factory=list)
    seconds: float | None = None


@dataclass
class TimingStats:
    """Per-call times of one model, in milliseconds."""

    mean_ms: float
    median_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    trials: int


@dataclass
class TimingInfo:
    """How fast the candidate ran against the reference, timed in the same child with the same method.

    Which protocol produced which figure (see the evaluator's timing module):
    * `speedup` (with `reference`/`candidate`): `method`, KernelBench parity (CUDA events around each
      synchronized call, L2 flushed before each, means compared); the figure compared with published
      numbers. `speedup_ci95`: its 95 % interval (delta method on the ratio of means).
    * `device_speedup` (`device_*`): `device_method`, without host launch latency in the window, medians
      compared; `device_speedup_ci95` from the two medians' order-statistic intervals.
    * `repro_speedup` (`repro_*`): `repro_method`, the reproducible figure: reference and candidate timed
      in alternating pairs until its relative standard error `repro_rse` is under the target (or a cap:
      `repro_stopped`), `repro_trials` pairs; the median of the paired ratios, `repro_ci95` its 95 %
      order-statistic interval; the SM clock (MHz, None when unreadable) before and after. The figure to
      re-time a winner with (`evaluator.retime`).
    """

    method: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    reference: TimingStats | None = None
    candidate: TimingStats | None = None
    speedup: float | None = None  # reference.mean_ms / candidate.mean_ms
    device_method: str | None = None
    device_reference: TimingStats | None = None
    device_candidate: TimingStats | None = None
    device_speedup: float | None = None
    compile_reference: TimingStats | None = None  # torch.compile(Model), when asked for
    compile_speedup: float | None = None  # compile_reference.mean_ms / candidate.mean_ms
    seconds: float | None = None
    speedup_ci95: list[float] | None = None  # [lo, hi] of `speedup`
    device_speedup_ci95: list[float] | None = None  # [lo, hi] of `device_speedup`
    repro_method: str | None = None  # interleaved_graph_replay or _events (CPU: ..._perf_counter)
    repro_reference: TimingStats | None = None  # per-call ms over the interleaved pairs
    repro_candidate: TimingStats | None = None
    repro_speedup: float | None = None  # median over pairs of reference ms / candidate ms
    repro_ci95: list[float] | None = None  # [lo, hi] of `repro_speedup`
    repro_rse: float | None = None  # relative standard error of `repro_speedup`
    repro_trials: int | None = None  # pairs timed
    repro_stopped: str | None = None  # "rse" (target reached), "max_trials" or "time_cap"
    repro_seconds: float | None = None  # wall seconds of the timed pairs
    sm_clock_mhz_before: int | None = None  # SM clock before and after the pairs (NVML)
    sm_clock_mhz_after: int | None = None


@dataclass
class KernelRow:
    name: str
    calls: int
    total_us: float
    avg_us: float
    share: float  # fraction of GPU kernel time in one forward
    custom: bool  # True unless it is an aten/cuBLAS/cuDNN/... library kernel


@dataclass
class ProfileInfo:
    """The GPU kernels that ran in one forward of the candidate (torch.profiler)."""

    kernels: list[KernelRow] = field(default_factory=list)
    total_us: float = 0.0
    custom_kernel_ran: bool | None = None
    custom_share: float | None = None  # fraction of GPU kernel time spent in custom kernels


@dataclass
class NcuKernel:
    """One custom kernel as Nsight Compute measured it (`evaluator.ncu`): the mean over its profiled
    launches of each figure; None where ncu did not report that metric. Clocks are not locked
    (`--clock-control none`), so the figures are those of the GPU as it runs, within a few %."""

    name: str  # the kernel's function name, without parameters (demangled)
    launches: int = 1  # launches of this kernel that ncu profiled
    grid: str | None = None  # "(4096, 1, 1)"
    block: str | None = None  # "(256, 1, 1)"
    duration_us: float | None = None  # gpu__time_duration.sum, per launch, µs
    memory_pct: float | None = None  # speed of light, memory: gpu__compute_memory_throughput, % of peak
    compute_pct: float | None = None  # speed of light, compute: sm__throughput, % of peak
    dram_pct: float | None = None  # dram__throughput, % of peak
    dram_gbs: float | None = None  # dram__bytes.sum.per_second, GB/s (1e9 bytes)
    l2_hit_pct: float | None = None  # lts__t_sector_hit_rate.pct
    occupancy_pct: float | None = None  # achieved: sm__warps_active, % of peak sustained active
    theoretical_occupancy_pct: float | None = None  # sm__maximum_warps_per_active_cycle_pct
    registers: int | None = None  # launch__registers_per_thread
    shared_bytes: int | None = None  # per block, static + dynamic (launch__shared_mem_per_block_*)
    issue_cycles: float | None = None  # a warp's cycles between two issued instructions (all stall reasons)
    stalls: list[list] = field(default_factory=list)  # [[reason, its share of issue_cycles], ...], top first


@dataclass
class NcuInfo:
    """Nsight Compute's pass over a correct candidate's custom kernels (`evaluator.ncu`): a child of its
    own under `ncu`, never the timed run. `status`: "ok" (kernels measured), "no_kernels" (none of the
    candidate's kernels was profiled), "unavailable" (no ncu), "denied" (GPU performance counters not
    permitted: ERR_NVGPUCTRPERM), "timeout" (past `EvalSettings.ncu_s`) or "error"; `message` is the one
    line the feedback shows when it is not "ok"."""

    status: str = "ok"
    message: str = ""
    kernels: list[NcuKernel] = field(default_factory=list)  # by total duration, longest first
    library_skipped: int = 0  # profiled launches of library kernels left out (PyTorch, cuBLAS, cuDNN, ...)
    forwards: int | None = None  # forwards of the candidate in the profiled range
    seconds: float | None = None  # wall seconds of the whole pass, ncu's start to its report
    options: list[str] = field(default_factory=list)  # the ncu options used
    # the child's load_inline calls, as CompileInfo.builds has them: each should be "cached", its path the
    # evaluation's (its seconds are the import's, under ncu)
    builds: list[dict] = field(default_factory=list)
    detail: str = ""  # when not "ok": the last lines of ncu's messages and the child's stderr, for people


@dataclass
class HardwareInfo:
    device: str = "cpu"
    gpu_name: str | None = None
    compute_capability: str | None = None  # "9.0"
    arch_list: str | None = None  # the TORCH_CUDA_ARCH_LIST the build used
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    python: str | None = None
    precision: str | None = None
    l2_bytes: int | None = None
    sm_count: int | None = None


@dataclass
class EvalResult:
    """Everything one evaluation produced. `status` and `message` are the verdict and what to do about it."""

    status: Status
    message: str = ""
    problem: dict[str, Any] = field(default_factory=dict)  # level, problem_id, name
    backend: str | None = None
    device: str | None = None
    precision: str | None = None
    speedup: float | None = None  # KernelBench parity: reference mean ms / candidate mean ms
    runtime_ms: float | None = None  # candidate mean
    ref_runtime_ms: float | None = None  # reference mean
    compile: CompileInfo = field(default_factory=CompileInfo)
    correctness: CorrectnessInfo = field(default_factory=CorrectnessInfo)
    timing: TimingInfo = field(default_factory=TimingInfo)
    profile: ProfileInfo | None = None
    ncu: NcuInfo | None = None  # Nsight Compute's pass, when EvalSettings.ncu asked for it
    hardware: HardwareInfo = field(default_factory=HardwareInfo)
    stages: dict[str, float] = field(default_factory=dict)  # wall seconds per stage, seen by the parent
    stdout: str = ""  # the candidate's output, truncated
    stderr: str = ""
    strict: dict[str, Any] | None = None  # strict-mode checks and verdict, when strict mode ran
    # how the child started: {"method": "fork" (from the warm worker, evaluator.zygote) or "spawn",
    # "reason": why it was spawned ("" when forked), "seconds": from asking to a running child}
    child_start: dict[str, Any] = field(default_factory=dict)
    # set when nothing ran for this result: it repeats an earlier evaluation of the same source, problem
    # and settings in the same pool (`EvalPool(reuse_results=True)`); that evaluation's "stages" and
    # "child_start" (this result's own `stages` are empty: no GPU-seconds)
    reused: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def correct(self) -> bool:
        return self.status == Status.CORRECT

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = str(self.status)
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalResult:
        return _build(cls, d)

    @classmethod
    def from_json(cls, text: str) -> EvalResult:
        return cls.from_dict(json.loads(text))


def _build(tp: Any, value: Any) -> Any:
    """Rebuild a (possibly nested, possibly Optional/list-typed) dataclass value from plain JSON data."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(inner[0], value) if len(inner) == 1 else value
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return [_build(item, v) for v in value]
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(value)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp)}
        return tp(**{k: _build(hints[k], v) for k, v in value.items() if k in known})
    return value
