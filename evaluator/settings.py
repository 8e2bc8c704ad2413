"""`EvalSettings`: everything that decides how a candidate is evaluated. Recorded with every result."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# KernelBench's tolerances (src/eval.py, `get_tolerance_for_precision`): fp32 1e-4; fp16 and bf16 1e-2.
TOLERANCES = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}
PRECISIONS = tuple(TOLERANCES)
BACKENDS = ("auto", "cuda", "triton")
REPRO_METHODS = ("auto", "events")
# the largest stage limit `StageLimits.parse` takes: 30 days, as good as none (a limit past Python's
# threading.TIMEOUT_MAX, 292 years, raised OverflowError in the wait for the child's start)
MAX_STAGE_LIMIT_S = 30 * 24 * 3600.0


@dataclass
class StageLimits:
    """Wall-clock limits in seconds per stage; past one, the child's whole process group is killed."""

    start_s: float = 60.0  # spawning the child and importing torch
    build_s: float = (
        300.0  # importing the candidate (CUDA extensions build here) and constructing both models
    )
    correctness_s: float = 120.0  # all correctness trials (Triton kernels compile on first launch here)
    timing_s: float = 300.0  # timing reference and candidate, and profiling

    @classmethod
    def parse(cls, text: str) -> StageLimits:
        """Limits from "build=600,timing=120" (seconds; stages: start, build, correctness, timing);
        stages not named keep their defaults.

        Raises:
            ValueError: an unknown stage, or a limit that is not a positive number of seconds up to
                `MAX_STAGE_LIMIT_S`.
        """
        limits, seen = cls(), set()
        for part in filter(None, (p.strip() for p in text.split(","))):
            stage, eq, value = (x.strip() for x in part.partition("="))
            stage = "start" if stage == "setup" else stage  # results call the start stage "setup"
            name = f"{stage}_s"
            if name not in cls.__dataclass_fields__:
                raise ValueError(
                    f"unknown stage {stage!r} in {text!r}; stages: start, build, correctness, timing"
                )
            if not eq:
                raise ValueError(f"{part!r} has no limit; write STAGE=SECONDS, e.g. {stage}=600")
            if name in seen:
                raise ValueError(f"the {stage} limit is given twice in {text!r}")
            seen.add(name)
            try:
                seconds = float(value)
            except ValueError:
                seconds = -1.0
            if not seconds > 0 or seconds == float("inf"):
                raise ValueError(f"the {stage} limit {value!r} is not a positive number of seconds")
            if seconds > MAX_STAGE_LIMIT_S:
                raise ValueError(
                    f"the {stage} limit {value!r} is over {MAX_STAGE_LIMIT_S:.0f} s (30 days), the most it takes"
                )
            setattr(limits, name, seconds)
        return limits


@dataclass
class EvalSettings:
    """How to evaluate one candidate. Defaults follow KernelBench (src/eval.py) where it has one.

    Attributes:
        backend: "auto" (tell CUDA from Triton by the source), "cuda" or "triton".
        device: "cuda" (the default) or "cpu" (Triton under the interpreter; no timing figures
            comparable with anything).
        precision: "fp32" (KernelBench's default), "fp16" or "bf16": floating-point inputs and both
            models are cast to it; integer inputs keep their dtype.
        correctness_trials: KernelBench's 5.
        seed: KernelBench's 42, set before constructing each model and to draw the trial seeds.
        atol, rtol: None means KernelBench's tolerance for the precision (`TOLERANCES`).
        warmup: untimed calls before timing (KernelBench 3).
        discard: timed calls thrown away after warm-up (the first timed call can pay lazy init).
        timed_trials: KernelBench's 100.
        flush_l2: write a buffer larger than L2 before every timed call.
        device_timing: also report the launch-latency-free device-time figure.
        device_target_rse, device_min_trials: that figure's calls per model go in blocks of
            `device_min_trials` until the relative standard error of the model's median
            (`timing.median_rse`) is at most `device_target_rse`, `timed_trials` at most (our figure,
            not KernelBench's: a steady kernel of milliseconds needs no 100 calls for a median known to
            0.5 %); None: always `timed_trials`. Only where the reproducible figure is off: where it
            runs, its interleaved pairs are the device figure's calls too.
        baseline_compile: also time `torch.compile(Model)` and report that speedup.
        profile: profile one forward of a correct candidate (torch.profiler).
        limits: per-stage wall-clock limits.
        reuse_builds: keep extension builds and Triton's cache in a folder per candidate source (its
            sha256) of `$KB_BUILD_DIR` (default ~/.cache/kb-agent/build), so re-evaluating an identical
            candidate skips the build; False builds in the evaluation's temporary directory.
        split_build: evaluate in two children (`evaluator.runner.evaluate`): a build child without the
            GPU (on a CPU slot of the pool) imports the candidate, so its `load_inline` builds land in the
            build cache, and ends the evaluation at a compile error; then the run child, on the GPU
            slot, imports it again (its builds cached) for correctness and timing, so no JIT build runs
            in the process that is timed. True splits every candidate, False never; None (the default):
            on a CUDA device, candidates that build an extension (`build.detect_backend` "cuda") and whose
            build folder holds none yet. Not split by default: Triton and torch candidates (nothing to
            build before the first launch, which is the run child's), sources built before (the run
            child finds them cached), and the CPU device (no GPU to keep free: builds and runs share the
            same cores).
        max_output_chars: the candidate's stdout/stderr are truncated to this many characters.
        strict: run the strict checks (`evaluator.strict`) beside KernelBench's rules; a failed check
            makes the status `rejected`. The parity verdict is kept in `EvalResult.strict`.
        strict_timed_trials: timed calls on fresh input values in strict mode; on a GPU the most, fewer
            for a kernel of milliseconds (`stages.timing.fresh_calls`).
        sandbox: in strict mode, confine the evaluation child with Landlock where the kernel has it
            (evaluator.sandbox): files written only in its work and build folders, no TCP, no signals
            to other processes. Native code is held too, which the audit hook alone cannot do.
        fork_server: start each evaluation child by forking it from a warm worker that has imported
            torch, triton and the evaluator but never initialised CUDA (`evaluator.zygote`; Linux),
            instead of a fresh interpreter (seconds of interpreter start and imports per evaluation);
            the child is as isolated as a spawned one. False, or KB_FORK_SERVER=0 in the environment,
            spawns every child. Where the fork path fails the child is spawned; `EvalResult.child_start`
            records which and why.
        inputs_on_device: draw `get_inputs()` on the device (same seeds and distributions, values from
            the device's generator; seconds faster per trial on large inputs); False draws them on the
            CPU and moves them, as KernelBench does, for its exact input values.
        max_memory_gb: host memory (RSS, GiB) the child's whole process group may use, compilers included.
        repro_timing: also time the reproducible figure (`TimingInfo.repro_*`: reference and candidate in
            alternating pairs until its relative standard error is under `repro_target_rse`, with a 95 %
            interval and the SM clock; `evaluator.timing.time_repro`). None (the default): on CUDA
            devices only; True: on the CPU too (host clock); False: never.
        repro_method: "auto" (CUDA-graph replays when both models capture faithfully, else eager calls)
            or "events" (always eager calls); both time with back-to-back CUDA events.
        repro_target_rse: stop adding pairs once the relative standard error of the reference's median,
            the candidate's median and the speedup are all at most this (0.005: issue 11's 0.5 %, which
            puts two independent figures within about 0.7 % of each other at one standard deviation).
        repro_min_trials, repro_max_trials: pairs (one reference and one candidate call each) timed at
            least (unless `repro_max_s` runs out first, never below 6 pairs) and at most.
        repro_max_s: wall seconds for the pairs, both models together (issue 11: at most 2 s a model).
        ncu: after a correct evaluation on a GPU, profile the candidate's custom kernels with Nsight
            Compute in a child of their own (`evaluator.ncu`; never the timed run). The agent turns it
            on when the feedback recipe has `ncu` or `speed_of_light`; off by default (it costs seconds).
        ncu_s: wall seconds for that whole pass, ncu's start to its report (120: a few sections over a
            few kernels take 5-30 s; a first Triton compile or a cold extension build adds to it).
    """

    backend: str = "auto"
    device: str = "cuda"
    precision: str = "fp32"
    correctness_trials: int = 5
    seed: int = 42
    atol: float | None = None
    rtol: float | None = None
    warmup: int = 3
    discard: int = 1
    timed_trials: int = 100
    flush_l2: bool = True
    device_timing: bool = True
    device_target_rse: float | None = 0.005
    device_min_trials: int = 20
    baseline_compile: bool = False
    profile: bool = True
    limits: StageLimits = field(default_factory=StageLimits)
    reuse_builds: bool = True
    split_build: bool | None = None
    max_output_chars: int = 4000
    strict: bool = True
    strict_timed_trials: int = 20
    sandbox: bool = True
    fork_server: bool = True
    max_memory_gb: float = 32.0
    inputs_on_device: bool = True
    repro_timing: bool | None = None
    repro_method: str = "auto"
    repro_target_rse: float = 0.005
    repro_min_trials: int = 30
    repro_max_trials: int = 10000
    repro_max_s: float = 4.0
    ncu: bool = False
    ncu_s: float = 120.0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        if self.device not in ("cuda", "cpu") and not self.device.startswith("cuda:"):
            raise ValueError(f"unknown device {self.device!r}; choose cuda, cuda:N or cpu")
        if self.repro_method not in REPRO_METHODS:
            raise ValueError(
                f"unknown repro_method {self.repro_method!r}; choose one of {', '.join(REPRO_METHODS)}"
            )
        if not self.ncu_s > 0:
            raise ValueError(f"ncu_s must be a positive number of seconds (got {self.ncu_s})")
        if not (self.repro_target_rse > 0 and self.repro_max_s > 0):
            raise ValueError("repro_target_rse and repro_max_s must be positive numbers")
        if not 1 <= self.repro_min_trials <= self.repro_max_trials:
            raise ValueError(
                f"repro trial counts must satisfy 1 <= min <= max (got min {self.repro_min_trials}, "
                f"max {self.repro_max_trials})"
            )
        if self.device_min_trials < 1 or (
            self.device_target_rse is not None and not self.device_target_rse > 0
        ):
            raise ValueError(
                f"device_min_trials must be at least 1 and device_target_rse a positive number or None (got "
                f"{self.device_min_trials}, {self.device_target_rse})"
            )
        if isinstance(self.limits, dict):
            self.limits = StageLimits(**self.limits)

    def repro_on(self, device_type: str) -> bool:
        """Whether the reproducible figure is timed on a device of this type ("cuda" or "cpu")."""
        return self.repro_timing if self.repro_timing is not None else device_type == "cuda"

    @property
    def tolerance(self) -> tuple[float, float]:
        """(atol, rtol) in force."""
        t = TOLERANCES[self.precision]
        return (self.atol if self.atol is not None else t, self.rtol if self.rtol is not None else t)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> EvalSettings:
        return cls(**d)
