"""The parent side of an evaluation: spawn the child, watch its stages, and assemble the `EvalResult`.

Isolation, as DESIGN.md sets it out: every candidate runs in a freshly spawned Python process
(`evaluator.worker`) in its own process group and temporary working directory, with the user's secrets
removed from its environment. Its reports come back on a private pipe, never from its stdout. Each stage
has a wall-clock limit; past it, or at the end of the evaluation, the whole process group is killed. A
crash, `os._exit`, hang or CUDA fault in the child becomes a status; the parent carries on.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kb_agent.evaluator import zygote
from kb_agent.evaluator.judge import Fate, judge
from kb_agent.evaluator.procs import group_members, group_rss_bytes, machine_memory_bytes
from kb_agent.evaluator.result import (
    CHECK_FLAGS,
    CompileInfo,
    CorrectnessInfo,
    EvalResult,
    HardwareInfo,
    ProfileInfo,
    Status,
    TimingInfo,
    _build,
)
from kb_agent.evaluator.settings import EvalSettings, StageLimits
from kb_agent.evaluator.slots import Slot, Slots, Unpooled, taken
from kb_agent.evaluator.thresholds import HOST_MEMORY_FRACTION
from kb_agent.evaluator.workdir import new_workdir
from kb_agent.problems import Problem

log = logging.getLogger(__name__)

# Environment variables whose names look like credentials never reach the candidate.
SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASS|CREDENTIAL|COOKIE|SESSION|AUTH|PRIVATE|(^|_)PAT($|_)|SALT|SIGN|DSN|"
    r"DATABASE_URL|_URI$|PROXY|API_BASE|WEBHOOK|^KB_DB$",
    re.IGNORECASE,
)
# ... and neither do values that carry credentials whatever their name: a URL's password
# (PIP_INDEX_URL=https://user:token@host, REDIS_URL=redis://user:password@host; helper-31) and the shapes
# of the common providers' keys and tokens
SECRET_VALUE = re.compile(
    r"://[^/\s:@]+:[^/\s@]+@"
    r"|\b(?:sk-[A-Za-z0-9_-]{16,}|sk-ant-[\w-]{8,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|glpat-[\w-]{8,}"
    r"|xox[abposr]-[\w-]{8,}|AKIA[0-9A-Z]{16}|AIza[\w-]{30,}|hf_[A-Za-z0-9]{20,})"
)
# What the child's environment keeps of the parent's at all: the variables that compilers, CUDA, torch,
# Triton, Python, the math libraries and the C library read, and the evaluator's own (KB_...). Secrets
# come in too many shapes for a list of what to drop alone: connection strings (Password=, AccountKey=),
# a token as a URL's user, a query string's token, a JWT under a harmless name (helper-34).
CHILD_ENV = re.compile(
    r"(?:PATH|LD_LIBRARY_PATH|LD_PRELOAD|LANG|LANGUAGE|LC_\w+|TZ|TERM|USER|LOGNAME|SHELL|HOME|TMPDIR"
    r"|CUDA_\w+|NVIDIA_\w+|NVCC_\w+|CUDAHOSTCXX|CUBLAS_\w+|CUBLASLT_\w+|CUDNN_\w+|NCCL_\w+"
    r"|TORCH_\w+|TORCHINDUCTOR_\w+|PYTORCH_\w+|TRITON_\w+|PYTHON\w*|VIRTUAL_ENV|CONDA_PREFIX|KB_\w+"
    r"|CC|CXX|CPATH|LIBRARY_PATH|C_INCLUDE_PATH|CPLUS_INCLUDE_PATH|MAX_JOBS"
    r"|OMP_\w+|MKL_\w+|OPENBLAS_\w+|KMP_\w+|GOMP_\w+|HF_HUB_OFFLINE|HF_DATASETS_OFFLINE)"
)
_PROJECT_ROOT = Path(__file__).resolve().parent.parent


def default_build_root() -> Path:
    """Where extension builds are kept between evaluations: `$KB_BUILD_DIR`, else ~/.cache/kb-agent/build.
    Each candidate source has its own folder in it (`candidate_build_root`)."""
    # resolved here: the child runs in its own work directory, where a relative path would land (and be
    # deleted with it)
    return (
        Path(os.environ.get("KB_BUILD_DIR") or Path.home() / ".cache" / "kb-agent" / "build")
        .expanduser()
        .resolve()
    )


def candidate_build_root(candidate_source: str) -> Path:
    """The build cache's folder for one candidate source: `default_build_root()`/<sha256 of the source,
    16 hex digits>, holding its extension builds and Triton cache. Only a byte-identical source reuses
    it, and under strict mode's sandbox an evaluation can write (and read) only its own: a candidate can
    no longer overwrite the `.so` or Triton cache entry that a later, different candidate loads."""
    return (
        default_build_root()
        / hashlib.sha256(candidate_source.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    )


def child_env(settings: EvalSettings, workdir: Path, build_root: Path) -> dict[str, str]:
    """The child's environment: the parent's variables that `CHILD_ENV` names, minus anything that looks
    like a secret by its name (`SECRET_NAME`) or its value (`SECRET_VALUE`), plus our settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if CHILD_ENV.fullmatch(k) and not SECRET_NAME.search(k) and not SECRET_VALUE.search(v)
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["TORCH_EXTENSIONS_DIR"] = str(build_root)
    # Triton's cache is keyed by a hash of the kernel source and options, so sharing it with the build
    # cache is as safe as the extension builds' hash-keyed directories
    env["TRITON_CACHE_DIR"] = str((build_root if settings.reuse_builds else workdir) / "triton_cache")
    env.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    # the candidate's home and temporary files live in the evaluation's own directory
    for var, sub in (("HOME", "home"), ("TMPDIR", "tmp")):
        (workdir / sub).mkdir(exist_ok=True)
        env[var] = str(workdir / sub)
    if settings.device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # Triton runs on CPU tensors only under its interpreter
    else:
        env.pop("TRITON_INTERPRET", None)
        env.pop("TORCH_CUDA_ARCH_LIST", None)  # the child detects the GPU and sets it
    return env


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - limit} characters cut] …\n{text[-half:]}"


def _read(f, limit: int) -> str:
    """The child's stdout or stderr, through the parent's own descriptor `f`: never by name, because the
    child owns the work directory and could put a symlink (to a file only the parent may read) or a
    FIFO (which blocks the open) there. Reads at most the head and tail it keeps."""
    try:
        size = os.fstat(f.fileno()).st_size
        f.seek(0)
        if size <= 4 * limit + 64:
            return _truncate(f.read().decode(errors="replace"), limit)
        head = f.read(2 * limit).decode(errors="replace")
        f.seek(size - 2 * limit)
        tail = f.read().decode(errors="replace")
        return f"{head[: limit // 2]}\n… [{size - limit} bytes cut] …\n{tail[-(limit // 2) :]}"
    except (OSError, ValueError):
        return ""


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "did not exit"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = {
            "SIGSEGV": " (segmentation fault)",
            "SIGABRT": " (abort)",
            "SIGKILL": " (killed)",
            "SIGBUS": " (bus error)",
        }
        return f"was killed by {name}{hint.get(name, '')}"
    return f"exited with code {returncode}"


_LIVE: set[subprocess.Popen] = set()  # children being watched, for `kill_live_children`
_LIVE_LOCK = threading.Lock()


def kill_live_children() -> int:
    """Kill every evaluation child still running (and all it started); return how many there were.

    For an interrupted caller with several evaluations in flight on other threads (`problems check
    --jobs`): their watchers then see the channel close and return at once.
    """
    with _LIVE_LOCK:
        procs = list(_LIVE)
        _KILLS[0] += 1  # an evaluation between its two children sees it and starts no other
    for proc in procs:
        _kill_group(proc)
    return len(procs)


_KILLS = [0]  # calls of kill_live_children so far (an interrupt)


def _killed_since(count: int) -> bool:
    with _LIVE_LOCK:
        return _KILLS[0] != count


def _kill_group(proc: subprocess.Popen, spoke: bool = True) -> None:
    """Kill every process the child started: its process group, the rest of its session (ninja starts
    each compiler command in a process group of its own) and whatever is below it. The child itself goes
    last: on Linux it is the supervising half (`evaluator.procs.supervise`), which then kills what left
    the session and lost its parent, and exits; it is killed if it has not within 15 s (its sweep
    gives up after 10 s). A child that never `spoke` (sent no message: it was still starting, had not
    confined itself, and no candidate code had run) is killed at once instead; waited for, it sat out
    the 15 s (found by a new user with `--stage-limits start=0.001`)."""
    for _ in range(50):  # a dying ninja may still be starting a compiler: sweep until none is left
        members = [p for p in group_members(proc.pid) if p != proc.pid]
        if not members:
            break
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
    if not spoke:  # nothing below it to sweep: its evaluation half, if forked yet, dies with it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def evaluate(
    problem: Problem, candidate_source: str, settings: EvalSettings, slots: Slots | None = None
) -> EvalResult:
    """Build, check and time `candidate_source` against `problem`'s reference in isolated children.

    One child does it all, or two (`EvalSettings.split_build`, `build_plan`): a build child that sees no
    GPU imports the candidate, so every `load_inline` build lands in the candidate's build folder, and
    ends the evaluation at a compile error (`stages.build.BuildVerdict`: the status and message one
    child gives); then a run child in a fresh work directory imports it again, finds its builds cached,
    and checks and times it. The run child's verdict is the evaluation's: whatever else the build child
    met (an import that fails without a GPU, a crash) the run child meets again, or not. What the build
    child can write, its own candidate's build folder, an earlier evaluation of the same source can
    write too; strict mode's sandbox holds both children.

    Args:
        problem: the reference program.
        candidate_source: a full Python module defining `class ModelNew` (KernelBench's contract).
        settings: backend, device, precision, trials and stage limits (see `EvalSettings`).
        slots: where the children run (`evaluator.slots`): `EvalPool` gives the job's own, so the build
            child holds a CPU build slot and the run child the GPU's, each only while it runs; None
            runs them here one after the other, the run child on `settings.device`.

    Returns:
        An `EvalResult`; its status (decided by `evaluator.judge`) is one of compile_error, runtime_error, timeout, incorrect, rejected, correct.
        `stages` (wall seconds): "setup" and "build" are the first child's (with two, the build child's),
        "run_setup" and "run_load" the run child's start and import (its builds cached) with the models'
        construction, "correctness" and "timing" the run child's; with `slots`, "build_wait" and
        "run_wait" the seconds spent waiting for them; "total" all but those waits. `compile.builds`
        holds every `load_inline` call of both children, each with "child": "build" or "run".
        This function does not raise for anything the candidate does.
    """
    t_start, kills = time.perf_counter(), _KILLS[0]
    pool, slots = slots is not None, slots or Unpooled(settings.device)
    waits: dict[str, float] = {}
    ev = _Phases(problem, candidate_source, settings)
    try:
        plan = build_plan(settings, candidate_source, ev.build_root)
        if plan is not None:
            with taken(slots.build(), waits, "build_wait") as slot:
                if ev.build(plan, slot, kills):
                    return ev.finished(t_start, waits, pool)
        with taken(slots.run(), waits, "run_wait") as slot:
            ev.run(slot, kills, split=plan is not None)
    except BaseException:  # interrupted: run_child killed the child; leave no directory behind either
        ev.remove_dirs()
        raise
    return ev.finished(t_start, waits, pool)


@dataclasses.dataclass
class BuildPhase:
    """What the build phase of a split evaluation (`evaluate_build`) hands to its run phase
    (`evaluate_run`), which may run in another process of the same machine: an executor that sends the
    build to a CPU and the run to a GPU as separate tasks (`evaluator.ray_executor`). JSON-able
    (`to_dict`, `from_dict`).

    Attributes:
        result: the `EvalResult` so far (the build child's stages and records); the evaluation's own when
            `ended`.
        ended: whether the build child's outcome is the evaluation's (a compile error, a limit, forged
            lines, an interrupt); then nothing is left to run.
        workdir: the build child's working directory, which the run phase removes (with `reuse_builds`
            off the builds are in it); "" when it is gone already (`evaluate_build`'s, whose builds are in
            the build cache).
        seconds: the build phase's wall seconds, counted into the result's "total".
    """

    result: EvalResult
    ended: bool
    workdir: str
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "result": self.result.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BuildPhase:
        return cls(
            EvalResult.from_dict(d["result"]), bool(d["ended"]), str(d["workdir"]), float(d["seconds"])
        )


def evaluate_build(problem: Problem, candidate_source: str, settings: EvalSettings) -> BuildPhase | None:
    """The build phase of `evaluate` alone, in this process: the build child, on any CPU. None when the
    evaluation is not split (`build_plan`: a Triton candidate, one built before, the CPU device unless
    `split_build`) or keeps no builds (`reuse_builds` off: they would live in this process's work
    directory, which any later evaluation sweeps once this process is gone): then `evaluate` does all of it. Hand the `BuildPhase` to `evaluate_run` on the same
    machine (the builds are in its build folders). Raises nothing for anything the candidate does."""
    if not settings.reuse_builds:  # the builds would be in a work directory that dies with this process
        return None
    t_start, kills = time.perf_counter(), _KILLS[0]
    ev = _Phases(problem, candidate_source, settings)
    try:
        plan = build_plan(settings, candidate_source, ev.build_root)
        if plan is None:
            ev.remove_dirs()
            return None
        ended = ev.build(plan, Slot("cpu"), kills)
    except BaseException:
        ev.remove_dirs()
        raise
    ev.remove_dirs()  # the builds are in the build cache: nothing of the build child's directory is needed
    if ended:
        return BuildPhase(ev.finished(t_start, {}, False), True, "", time.perf_counter() - t_start)
    return BuildPhase(ev.result, False, "", time.perf_counter() - t_start)


def evaluate_run(
    problem: Problem, candidate_source: str, settings: EvalSettings, built: BuildPhase
) -> EvalResult:
    """The run phase of `evaluate` after `evaluate_build` (`built`, not ended) ran on this machine: the
    run child on `settings.device`, which finds the candidate's builds cached. Returns the evaluation's
    `EvalResult`, as `evaluate` would have; its "total" counts both phases. Raises nothing for anything
    the candidate does."""
    if built.ended:
        return copy.deepcopy(built.result)
    t_start = time.perf_counter() - built.seconds
    ev = _Phases(
        problem, candidate_source, settings, dataclasses.replace(built, result=copy.deepcopy(built.result))
    )
    try:
        ev.run(Slot(settings.device), _KILLS[0], split=True)
    except BaseException:
        ev.remove_dirs()
        raise
    return ev.finished(t_start, {}, False)


class _Phases:
    """One evaluation's state between its children: work directory, build folder, the result so far."""

    def __init__(
        self, problem: Problem, source: str, settings: EvalSettings, built: BuildPhase | None = None
    ):
        warm_headers(settings)
        self.problem, self.source, self.settings = problem, source, settings
        # sweeps those a killed harness left (evaluator.workdir)
        self.workdir = Path(built.workdir) if built and built.workdir else new_workdir("kb-eval-")
        self.build_root = candidate_build_root(source) if settings.reuse_builds else self.workdir / "build"
        self.build_root.mkdir(parents=True, exist_ok=True)
        self.result = built.result if built else EvalResult(
            status=Status.RUNTIME_ERROR,
            problem={"level": problem.level, "problem_id": problem.problem_id, "name": problem.name},
            device=settings.device,
            precision=settings.precision,
            backend=settings.backend,
        )  # fmt: skip
        self.job = candidate_job(problem, source, settings, self.workdir, self.build_root)
        self.dirs = [self.workdir]
        # a run phase apart whose build child's directory is gone: this fresh one is the run child's
        self.run_in_workdir = built is not None and not built.workdir

    def build(self, plan: dict, slot: Slot, kills: int) -> bool:
        """The build child on `slot`; True when the evaluation ends with it (judged: the build's verdict,
        or an interrupt since `kills`), False when the run child's verdict is to count."""
        child = run_child({**self.job, "mode": "build", **plan["job"], "cores": _cores(slot)}, self.settings,
                          self.workdir, self.build_root, _absorber(self.result, "build"), self.result.stages)  # fmt: skip
        _publish_bindings(self.settings, self.build_root)  # while the run child runs
        ends = _build_ends_it(child)
        if ends:
            _hardware_of_build(self.result, self.settings, plan["gpu"])
        if ends or _killed_since(kills):
            _judged(self.result, self.settings, self.problem, child)
            return True
        return False

    def run(self, slot: Slot, kills: int, split: bool) -> None:
        """The run child on `slot` (after a build child when `split`), and the verdict."""
        result, settings = self.result, dataclasses.replace(self.settings, device=slot.device)
        result.device = slot.device
        if _killed_since(kills):  # an interrupt while this job waited for its slot
            _judged(result, settings, self.problem, None, Fate("died", "the evaluation was stopped (an "
                    "interrupt killed the evaluation children) before its run child started"))  # fmt: skip
            return
        run_dir = new_workdir("kb-eval-") if split and not self.run_in_workdir else self.workdir
        if run_dir not in self.dirs:
            self.dirs.append(run_dir)
        stages: dict[str, float] = {}
        child = run_child({**self.job, "settings": settings.to_dict(), "workdir": str(run_dir),
                           "cores": _cores(slot)}, settings, run_dir, self.build_root,
                          _absorber(result, "run"), stages if split else result.stages)  # fmt: skip
        result.stages.update({_RUN_STAGES.get(k, k): v for k, v in stages.items()})
        _judged(result, settings, self.problem, child)
        if settings.ncu and result.status == Status.CORRECT and settings.device != "cpu":
            # a pass of its own, never the timed run, still on the run slot's GPU
            from kb_agent.evaluator.ncu import profile_candidate

            result.ncu = profile_candidate(self.problem, self.source, settings, self.build_root)
            result.stages["ncu"] = result.ncu.seconds or 0.0
        if not split:
            _publish_bindings(settings, self.build_root)

    def remove_dirs(self) -> None:
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)

    def finished(self, t_start: float, waits: dict[str, float], pool: bool) -> EvalResult:
        return _finished(self.result, t_start, waits, pool, self.dirs)


# the run child's stages as a split evaluation's result names them (the build child's keep their names)
_RUN_STAGES = {"setup": "run_setup", "build": "run_load"}


def build_plan(settings: EvalSettings, candidate_source: str, build_root: Path) -> dict | None:
    """Whether to split the evaluation (`EvalSettings.split_build`; None for one child) and what the
    build child needs: {"job": its job's additions, "gpu": the `hardware.GpuArch` it builds for, or None
    on the CPU device}. The build child sees no GPU (CUDA_VISIBLE_DEVICES="") and builds for the one the
    run child will use: its architecture read here, once per process, without starting CUDA
    (`hardware.gpu_arch`), as the TORCH_CUDA_ARCH_LIST the run child sets (else the build's cache key
    differs and the run child builds again). Where it cannot be read (visible GPUs that differ, no
    driver), one child."""
    from kb_agent.evaluator.build import detect_backend

    split = settings.split_build
    if split is None:
        split = (
            settings.device != "cpu"
            and detect_backend(candidate_source) == "cuda"
            and not any(build_root.glob("*/*.so"))  # built before: the run child finds it cached
        )
    if not split:
        return None
    env = {"CUDA_VISIBLE_DEVICES": ""}
    if settings.device == "cpu":  # the architecture nvcc's checks name, as a child on the CPU sets it
        return {"job": {"arch": "9.0", "env": env}, "gpu": None}
    from kb_agent.evaluator.hardware import gpu_arch

    arch = gpu_arch(settings.device)
    if arch is None:
        log.info("one evaluation child, not two: the architecture of the GPUs of %s is not known here",
                 settings.device)  # fmt: skip
        return None
    env["TORCH_CUDA_ARCH_LIST"] = arch.arch_list
    return {"job": {"arch": arch.compute_capability, "env": env}, "gpu": arch}


def _build_ends_it(child: ChildOutcome) -> bool:
    """Whether the build child's outcome is the evaluation's: a `BuildVerdict` (its "done" says `final`),
    lines on the result channel that were not the evaluator's, or a stage past its limit or the memory
    limit (the run child would build from the same nothing: a build that did not finish left none)."""
    return bool(child.forged or child.timed_out or child.memory_stage or (child.done or {}).get("final"))


def _hardware_of_build(result: EvalResult, settings: EvalSettings, gpu) -> None:
    """An evaluation that ended in its build child: the child's record (versions; it saw no GPU), on the
    device asked for, with the GPU as the harness read it (`hardware.GpuArch`; no L2 size, no SM count)."""
    result.hardware.device = settings.device
    if gpu is not None:
        result.hardware.gpu_name, result.hardware.driver = gpu.name, gpu.driver
        result.hardware.compute_capability, result.hardware.arch_list = gpu.compute_capability, gpu.arch_list


def _cores(slot: Slot) -> list[int] | None:
    return list(slot.cores) if slot.cores else None


def _judged(
    result: EvalResult, settings: EvalSettings, problem: Problem, child: ChildOutcome | None, fate=None
) -> None:
    """The verdict, from how `child` ended (or `fate`, a `judge.Fate`, when no child ran), and the figures
    it allows."""
    if child is not None:
        result.stdout, result.stderr = child.stdout, child.stderr
        fate = _fate(child, settings, problem, result.stderr)
    done = (child.done if child is not None else None) or {}
    verdict = judge(done.get("status"), done.get("message", ""), result.strict, fate)
    result.status, result.message = verdict.status, verdict.message
    if result.strict is not None:
        result.strict["checks"] = verdict.checks
    result.backend = result.compile.backend or result.backend  # what the candidate is, not what was asked
    parity_correct = result.status == Status.CORRECT or (
        result.strict is not None and result.strict.get("parity_status") == str(Status.CORRECT)
    )
    if parity_correct and result.timing.reference and result.timing.candidate:
        result.ref_runtime_ms = result.timing.reference.mean_ms
        result.runtime_ms = result.timing.candidate.mean_ms
        result.speedup = result.timing.speedup


def warm_headers(settings: EvalSettings) -> None:
    """Start precompiling torch/extension.h for the binding cache (`bindcache.spawn_pch_warmer`: once per
    process, detached) where candidates will build on a GPU; the first evaluation and an evaluation pool
    on a GPU call it."""
    if settings.device == "cpu" or not settings.reuse_builds:
        return
    from kb_agent.evaluator import bindcache

    try:
        bindcache.spawn_pch_warmer(bindcache.cache_dir(default_build_root()))
    except OSError as e:  # the cache is an optimisation: an evaluation never fails for it
        log.warning("binding cache: the header warmer could not start: %s", e)


def _publish_bindings(settings: EvalSettings, build_root: Path) -> None:
    """Hand the binding objects a child asked for to the harness's own publisher (`evaluator.bindcache`:
    it compiles them again in a process no candidate ran in, so nothing a candidate touched is ever
    shared); detached, not waited for, and a no-op when the child asked for nothing."""
    if not settings.reuse_builds:
        return
    from kb_agent.evaluator import bindcache

    try:
        bindcache.spawn_publisher(build_root, bindcache.cache_dir(default_build_root()))
    except OSError as e:  # the cache is an optimisation: an evaluation never fails for it
        log.warning("binding cache: the publisher could not start: %s", e)


def _finished(
    result: EvalResult, t_start: float, waits: dict[str, float], pool: bool, dirs: list[Path]
) -> EvalResult:
    if pool:
        result.stages.update({k: waits.get(k, 0.0) for k in ("build_wait", "run_wait")})
    result.stages["total"] = time.perf_counter() - t_start - sum(waits.values())
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    return result


def _fate(child: ChildOutcome, settings: EvalSettings, problem: Problem, stderr: str) -> Fate:
    """How the child ended, in the judge's terms, with the sentence the model reads for each ending."""
    stage, stage_limit = child.stage, _stage_limits(settings.limits)
    if child.memory_stage is not None:
        return Fate("memory", f"the {child.memory_stage} stage used more than {memory_limit_gb(settings):g} GiB of "
                    "host memory (the evaluation's whole process group, compilers included) and was killed")  # fmt: skip
    if child.timed_out:
        hint = ""
        if stage_limit[stage] != _stage_limits(StageLimits())[stage]:
            hint = f" (a limit set with --stage-limits {_LIMIT_NAMES[stage]}=SECONDS)"
        elif stage != "build":
            hint = (" (the Triton interpreter is slow: on --device cpu use small problems such as toy/relu)"
                    if settings.device == "cpu" and problem.level != 0 else " (a hang or an infinite loop?)")  # fmt: skip
        return Fate(
            "timeout", f"the {stage} stage ran past its {stage_limit[stage]:g} s limit and was killed{hint}"
        )
    if child.forged:
        return Fate("done", forged=child.forged, leftovers=child.leftovers)
    if child.done is None:
        message = f"the evaluation process {_describe_exit(child.returncode)} during the {stage} stage"
        tail = stderr.strip().splitlines()[-12:]
        return Fate("died", message + (":\n" + "\n".join(tail) if tail else ""))
    return Fate("done", leftovers=child.leftovers)


# a stage as results and the channel name it -> its name in StageLimits (`<name>_s`) and --stage-limits
_LIMIT_NAMES = {"setup": "start", "build": "build", "correctness": "correctness", "timing": "timing"}


def _stage_limits(limits: StageLimits) -> dict[str, float]:
    """Seconds allowed per stage, keyed as the channel names the stages."""
    return {stage: getattr(limits, f"{name}_s") for stage, name in _LIMIT_NAMES.items()}


@dataclasses.dataclass
class ChildOutcome:
    """How a child process ended: its verdict message (`done`, None if it never sent one), the stage it
    was in, whether a stage ran out of time or the group out of memory, and what it printed."""

    done: dict | None
    stage: str
    timed_out: bool
    memory_stage: str | None
    returncode: int | None
    stdout: str
    stderr: str
    leftovers: int  # processes still running after the verdict (killed since)
    forged: int = 0  # lines on the result channel that were not the evaluator's
    start: dict = dataclasses.field(default_factory=dict)  # how it was started (EvalResult.child_start)


def candidate_job(
    problem: Problem, candidate_source: str, settings: EvalSettings, workdir: Path, build_root: Path
) -> dict:
    """The job a child evaluating `candidate_source` on `problem` reads (`evaluator.worker`), its "mode"
    not set: an evaluation's, and the base of every other child that builds the candidate (a split
    evaluation's build child, Nsight Compute's pass), so that each finds the same builds and caches."""
    return {
        "problem": problem.to_dict(),
        "candidate": candidate_source,
        "settings": settings.to_dict(),
        "workdir": str(workdir),
        "build_root": str(build_root),
        # the sandbox probe's answer (no child may write there), and beside it the binding-object cache
        "sandbox_cache": str(default_build_root()),
    }


def run_child(
    job: dict, settings: EvalSettings, workdir: Path, build_root: Path, on_event, stages: dict[str, float]
) -> ChildOutcome:
    """Run `evaluator.worker` on `job` in a fresh process group, feeding each channel message other than
    stage changes and the verdict to `on_event`, with the per-stage limits and the memory limit of
    `settings`. Stage wall times go into `stages`. Never raises for what the child does.

    The child is forked from the warm worker (`evaluator.zygote`) where `settings.fork_server` allows
    it and that works, else spawned; how, and why it was spawned, goes to `on_event` first as
    {"event": "child_start", "child_start": {"method", "reason", "seconds", "memory_limit_gb"}}
    (`EvalResult.child_start`; the memory limit that applied, `memory_limit_gb`)
    and into the outcome. A forked child's supervising half counts in its RSS the warm worker's memory
    that it shares copy-on-write; that much (`ForkedChild.inherited_bytes`) is added to the memory limit,
    so the candidate's budget is a spawned child's."""
    env = child_env(settings, workdir, build_root)
    key = secrets.token_bytes(32)
    memory_stage = None
    t0 = time.perf_counter()
    proc, files, start = _start_child(json.dumps(job), settings, workdir, env)
    start["seconds"] = round(time.perf_counter() - t0, 4)
    try:
        with _LIVE_LOCK:
            _LIVE.add(proc)
        files.give_key(key)
        start["memory_limit_gb"] = memory_limit_gb(settings)
        on_event({"event": "child_start", "child_start": start})
        max_rss = start["memory_limit_gb"] * 2**30 + getattr(proc, "inherited_bytes", 0)
        try:
            done, stage, timed_out, forged = _watch(
                proc, files.r, on_event, stages, _stage_limits(settings.limits), max_rss, key
            )
        except MemoryExceeded as e:
            done, stage, timed_out, memory_stage, forged = None, e.args[0], False, e.args[0], 0
        except BaseException:  # Ctrl-C, SIGTERM as an exception, a bug: the child must not outlive us
            _kill_group(proc)
            files.close_all()
            raise
    finally:
        files.close(files.r)
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    _kill_group(proc)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    out, err = files.read_output(settings.max_output_chars)
    if getattr(proc, "lost", None):  # the warm worker died (killed?) while its child ran, and ended it
        err += (f"\nkb-agent: the warm worker this evaluation was forked from died during it "
                f"({proc.lost.splitlines()[0]}), and ended it\n")  # fmt: skip
    swept = files.read_swept()
    leftovers = swept if done is not None else 0
    return ChildOutcome(
        done, stage, timed_out, memory_stage, proc.returncode, out, err, leftovers, forged, start
    )


class _ChildFiles:
    """What one start of a child is given, made anew for each start (a request that reached the warm
    worker may have started a child on the last ones): the job file (the child deletes it once read),
    the result channel, the key pipe, the sweep pipe (`procs.supervise`'s count of processes left
    running) and the stdout/stderr files, read back through these descriptors, never by name. Used by
    `run_child` (forked or spawned) and `run_wrapped` (spawned under a wrapper)."""

    def __init__(self, workdir: Path, job_text: str, job_name: str):
        self.job_path = workdir / job_name
        self.job_path.write_text(job_text)
        self.r, self.w = os.pipe()
        self.key_r, self.key_w = os.pipe()
        self.sweep_r, self.sweep_w = os.pipe()
        self._open = {self.r, self.w, self.key_r, self.key_w, self.sweep_r, self.sweep_w}
        out_path, err_path = workdir / "stdout.txt", workdir / "stderr.txt"
        for path in (out_path, err_path):  # new files: what an earlier start was given writes elsewhere
            path.unlink(missing_ok=True)
        self.out_f, self.err_f = open(out_path, "w+b"), open(err_path, "w+b")

    def child_fds(self) -> tuple[int, ...]:
        """(channel write end, key read end, sweep write end, stdout, stderr): the child's copies."""
        return self.w, self.key_r, self.sweep_w, self.out_f.fileno(), self.err_f.fileno()

    def worker_command(self, parent_pid: int) -> list[str]:
        """`python -m kb_agent.evaluator.worker` with these pipes and job file; the worker dies with
        process `parent_pid` (0: with whatever process is its parent, a wrapper such as ncu)."""
        return [sys.executable, "-m", "kb_agent.evaluator.worker", str(self.w), str(self.job_path),
                str(self.key_r), str(parent_pid), str(self.sweep_w)]  # fmt: skip

    def popen(self, command: list[str], workdir: Path, env: dict[str, str]) -> subprocess.Popen:
        """Spawn `command` in `workdir` in a session of its own, given these files (stdin empty);
        on any error everything is closed and the error raised."""
        try:
            return subprocess.Popen(command, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=self.out_f,
                                    stderr=self.err_f, pass_fds=(self.w, self.key_r, self.sweep_w),
                                    start_new_session=True)  # fmt: skip
        except BaseException:
            self.close_all()
            raise

    def give_key(self, key: bytes) -> None:
        """Once the child has started: close this process's copies of its ends, write the channel key."""
        self.close_child_ends()
        os.write(self.key_w, key)
        self.close(self.key_w)

    def read_output(self, limit: int) -> tuple[str, str]:
        """(stdout, stderr) as the child left them, each truncated to `limit` characters; closes both."""
        with self.out_f, self.err_f:
            return _read(self.out_f, limit), _read(self.err_f, limit)

    def read_swept(self) -> int:
        """How many processes were still running after the verdict: the supervising half killed them,
        and says how many on its own pipe (not stderr: the candidate's processes share that file and its
        write position). 0 if it did not finish (the pipe is still held open) or wrote no count. Closes
        the pipe."""
        os.set_blocking(self.sweep_r, False)
        try:
            swept = os.read(self.sweep_r, 64).decode(errors="replace").strip()
        except BlockingIOError:  # still held open: the supervising half did not finish
            swept = ""
        finally:
            self.close(self.sweep_r)
        return int(swept) if swept.isdigit() else 0

    def close(self, *fds: int) -> None:
        for fd in fds:
            if fd in self._open:
                self._open.discard(fd)
                os.close(fd)

    def close_child_ends(self) -> None:
        self.close(self.w, self.key_r, self.sweep_w)

    def close_all(self) -> None:
        self.close(*list(self._open))
        self.out_f.close()
        self.err_f.close()
        self.job_path.unlink(missing_ok=True)


def _start_child(
    job_text: str, settings: EvalSettings, workdir: Path, env: dict[str, str]
) -> tuple[subprocess.Popen | zygote.ForkedChild, _ChildFiles, dict]:
    """Start the child, forked from the warm worker where allowed and possible, else spawned, in its own
    session and process group (killpg reaches everything). Returns (its Popen-like handle, the files it
    was given, the `child_start` record: "method", "reason")."""
    reason = zygote.unavailable(settings.fork_server)
    job_name = "job.json"
    if reason is None:
        files = _ChildFiles(workdir, job_text, job_name)
        try:
            proc = zygote.fork_child(env, str(workdir), str(files.job_path), files.child_fds(), settings.device,
                                     settings.limits.start_s)  # fmt: skip
        except BaseException as e:
            files.close_all()
            if not isinstance(e, zygote.ForkUnavailable):
                raise
            reason = _truncate(str(e), 600)
            log.info("evaluation child spawned, not forked: %s", e)
        else:
            return proc, files, {"method": "fork", "reason": ""}
        job_name = "job-spawned.json"  # not the name the warm worker's child (if any) was told
    files = _ChildFiles(workdir, job_text, job_name)
    proc = files.popen(files.worker_command(os.getpid()), workdir, env)
    return proc, files, {"method": "spawn", "reason": reason}


def run_wrapped(
    wrapper: list[str],
    job: dict,
    settings: EvalSettings,
    workdir: Path,
    build_root: Path,
    on_event,
    stages: dict[str, float],
    limit_s: float,
) -> ChildOutcome:
    """`run_child` under a wrapper command (Nsight Compute's `ncu OPTIONS`, `evaluator.ncu`): always a
    freshly spawned `wrapper + [python -m kb_agent.evaluator.worker ...]` in a session of its own, whose
    worker is told its parent pid is 0 (the wrapper, not this process, is its parent). One wall-clock
    limit, `limit_s` seconds from the spawn, holds for the whole run (then `timed_out`); before it, the
    wrapper is waited for after the worker's verdict (a profiler writes its report when its target has
    exited). The memory limit and the result channel are `run_child`'s. Never raises for what the child
    or the wrapper does; an interrupt kills the group and is raised."""
    files = _ChildFiles(workdir, json.dumps(job), "job.json")
    key, end = secrets.token_bytes(32), time.perf_counter() + limit_s
    memory_stage, expired = None, threading.Event()
    try:
        proc = files.popen(
            [*wrapper, *files.worker_command(0)], workdir, child_env(settings, workdir, build_root)
        )
    except OSError as e:
        return ChildOutcome(None, "setup", False, None, None, "", f"could not start {wrapper[0]}: {e}", 0)
    # past the limit the wrapper goes first: the worker dies with it (die_with_parent), and its supervising
    # half sweeps what it started; _kill_group takes the rest
    timer = threading.Timer(limit_s, lambda: (expired.set(), proc.kill(), _kill_group(proc)))
    with _LIVE_LOCK:
        _LIVE.add(proc)
    try:
        files.give_key(key)
        timer.start()
        limits = dict.fromkeys(_LIMIT_NAMES, limit_s)
        try:
            done, stage, _, forged = _watch(
                proc, files.r, on_event, stages, limits, memory_limit_gb(settings) * 2**30, key
            )
        except MemoryExceeded as e:
            done, stage, memory_stage, forged = None, e.args[0], e.args[0], 0
        try:
            proc.wait(timeout=max(0.0, end - time.perf_counter()))
        except subprocess.TimeoutExpired:
            expired.set()
            proc.kill()
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        timer.cancel()
        files.close(files.r)
        with _LIVE_LOCK:
            _LIVE.discard(proc)
        _kill_group(proc)
        out, err = files.read_output(settings.max_output_chars)
        swept = files.read_swept()
    leftovers = swept if done is not None else 0
    return ChildOutcome(
        done, stage, expired.is_set(), memory_stage, proc.returncode, out, err, leftovers, forged
    )


def memory_limit_gb(settings: EvalSettings) -> float:
    """Host memory (RSS, GiB) an evaluation child's process group may use: `settings.max_memory_gb`, but
    at most `HOST_MEMORY_FRACTION` of this machine's memory (where /proc/meminfo reads), rounded down to
    0.1 GiB, so that the harness, not the kernel's OOM killer, stops a child that would exhaust it."""
    total = machine_memory_bytes()
    if total is None:
        return settings.max_memory_gb
    return min(settings.max_memory_gb, int(HOST_MEMORY_FRACTION * total / 2**30 * 10) / 10)


class MemoryExceeded(Exception):
    pass


def _watch(proc, r_fd, on_event, stages: dict, stage_limit: dict, max_rss: float, key: bytes):
    """Read the child's channel until it closes, a stage overruns, or the verdict arrives.

    Only lines whose HMAC verifies with `key` and whose sequence number follows the last are accepted;
    the others are counted (returned as `forged`) and ignored. Also polls the host memory of the child's
    whole process group (compilers included) once a second and kills the group past `max_rss` bytes
    (raises MemoryExceeded). Returns (done message or None, stage, timed_out, forged count)."""
    buf = b""
    last_mem_check = 0.0
    stage, t_stage = "setup", time.perf_counter()
    first_limit = stage_limit["setup"]
    deadline = t_stage + first_limit
    done = None
    forged = 0
    seq = 0
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            _kill_group(proc, spoke=seq > 0)
            stages[stage] = time.perf_counter() - t_stage
            return done, stage, True, forged
        ready, _, _ = select.select([r_fd], [], [], min(remaining, 1.0))
        if time.perf_counter() - last_mem_check >= 1.0:
            last_mem_check = time.perf_counter()
            if group_rss_bytes(proc.pid) > max_rss:
                _kill_group(proc)
                stages[stage] = time.perf_counter() - t_stage
                raise MemoryExceeded(stage)
        if not ready:
            if proc.poll() is not None and not _pending(r_fd):
                break
            continue
        chunk = os.read(r_fd, 1 << 16)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        if len(buf) > _MAX_LINE:  # no evaluator message is this long: a flood meant to exhaust the harness
            forged += 1
            buf = b""
        for line in lines:
            msg = _verify(line, key)
            if msg is None or msg.get("seq") != seq + 1 or done is not None:
                forged += bool(line.strip())
                continue
            seq += 1
            event = msg.get("event")
            if event == "stage":
                now = time.perf_counter()
                stages[stage] = now - t_stage
                stage, t_stage = str(msg.get("name")), now
                deadline = now + stage_limit.get(stage, first_limit)
            elif event == "done":
                done = msg
            else:
                try:
                    on_event(msg)
                except (
                    Exception
                ) as e:  # a malformed part is the evaluator's bug, never a crash of the harness
                    log.warning("could not read the %r part of a result: %s", event, e)
    stages[stage] = time.perf_counter() - t_stage
    return done, stage, False, forged


_MAX_LINE = 16 << 20  # bytes; the evaluator's longest message (a profile) is well under 1 MiB


def _verify(line: bytes, key: bytes) -> dict | None:
    """The message of a `<hmac hex> <json>` line when its signature verifies, else None."""
    sig, _, body = line.partition(b" ")
    expected = hmac.new(key, body, hashlib.sha256).hexdigest().encode()
    if not hmac.compare_digest(sig, expected):
        return None
    try:
        msg = json.loads(body)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


def _pending(fd: int) -> bool:
    ready, _, _ = select.select([fd], [], [], 0)
    return bool(ready)


_PARTS = {
    "hardware": ("hardware", HardwareInfo),
    "compile": ("compile", CompileInfo),
    "correctness": ("correctness", CorrectnessInfo),
    "timing": ("timing", TimingInfo),
    "profile": ("profile", ProfileInfo),
    "child_start": ("child_start", dict),  # from run_child itself, not the child
}


def _absorber(result: EvalResult, child: str):
    """`_absorb` into `result` for the build or the run child (`child`: "build", "run")."""
    sealed: dict[str, dict] = {}
    return lambda msg: _absorb(result, msg, child, sealed)


def _absorb(result: EvalResult, msg: dict, child: str = "run", sealed: dict | None = None) -> None:
    event = msg["event"]
    sealed = {} if sealed is None else sealed
    if event == "sealed":  # a parity figure as measured (`stages.timing.seal`): one per model, or none counts
        model = str(msg.get("model"))
        sealed[model] = None if model in sealed else json.dumps(msg.get("stats"), sort_keys=True)
        return
    if event == "strict" and (changed := _unsealed(result, sealed)):
        checks = msg["strict"].setdefault("checks", {})
        checks["tampering"] = {"passed": False, "detail": (
            f"the timing record's parity figure of the {' and the '.join(changed)} changed after it was "
            "measured and sent: something in the candidate's process rewrote it")}  # fmt: skip
    if event in _PARTS:
        attr, cls = _PARTS[event]
        earlier = result.compile.builds if child == "run" else []  # the build child's, if it ran
        setattr(result, attr, _build(cls, msg[attr]))
        if event == "compile":  # each load_inline call, named by the child that made it
            result.compile.builds = earlier + [{**b, "child": child} for b in msg.get("builds") or []]
            if result.compile.builds:
                result.stages["extension_builds"] = sum(b["seconds"] for b in result.compile.builds)
    elif event == "strict":
        result.strict = msg["strict"]
    elif event == "profile_error":
        log.info("profiling failed: %s", msg.get("message"))


def _unsealed(result: EvalResult, sealed: dict) -> list[str]:
    """The models whose parity figure in the timing record differs from the one sealed when measured, or
    was sealed more than once (a second seal is no figure the stage sent)."""
    timing = result.timing
    if timing is None:
        return []
    now = {"reference": timing.reference, "candidate": timing.candidate}
    return [m for m, stats in sealed.items()
            if stats is None or now.get(m) is None or json.dumps(dataclasses.asdict(now[m]), sort_keys=True) != stats]  # fmt: skip


def check_problem(problem: Problem, settings: EvalSettings) -> dict:
    """Check one reference for degeneracy in an isolated child (see `evaluator.worker.check_problem`).

    Returns a dict: level, problem_id, name, device, precision, gpu_name, status ("ok", "flagged",
    "unchecked", "error" or "timeout"), flags (a list of `CHECK_FLAGS`), one entry per flag, findings
    (flag, atol, rtol, fraction, threshold, precisions), measures (fractions per tolerance), unchecked
    ({"reason", "message"} or None), details, message, seconds and memory_limit_gb (the host memory
    limit that applied, GiB: `memory_limit_gb`).
    """
    job = {"mode": "check_problem", "problem": problem.to_dict()}
    parts, child, stages = _run_reference_job("kb-check-", job, settings)
    found = parts.get("problem_check", {}).get("check", {})
    hw = parts.get("hardware", {}).get("hardware", {})
    status, message = _reference_outcome(child, settings, "check", "the reference ran past the {stage} stage's "
                                         "{limit:g} s limit (a hang, or too large for this device?)")  # fmt: skip
    return {"level": problem.level, "problem_id": problem.problem_id, "name": problem.name, "key": problem.key,
            "code_sha256": problem.code_sha256,
            "device": settings.device, "precision": settings.precision, "gpu_name": hw.get("gpu_name"),
            "status": status, "message": message, "flags": found.get("flags", []),
            **{k: found.get(k) for k in CHECK_FLAGS},
            **{k: found.get(k) for k in ("findings", "measures", "unchecked")},
            "details": found.get("details", []), "seconds": sum(stages.values()),
            "memory_limit_gb": child.start.get("memory_limit_gb")}  # fmt: skip


def _run_reference_job(prefix: str, job: dict, settings: EvalSettings) -> tuple[dict, ChildOutcome, dict]:
    """Run a job that involves no candidate (a problem check, a baseline) in a fresh child: its work
    folder named by `prefix`, each channel part kept by event name. Returns (parts, child, stage seconds)."""
    workdir = new_workdir(prefix)
    job = {**job, "candidate": "", "settings": settings.to_dict(), "workdir": str(workdir),
           "build_root": str(workdir / "build")}  # fmt: skip
    parts: dict = {}
    stages: dict[str, float] = {}
    try:
        child = run_child(
            job, settings, workdir, workdir / "build", lambda m: parts.update({m["event"]: m}), stages
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return parts, child, stages


def _reference_outcome(
    child: ChildOutcome, settings: EvalSettings, what: str, timeout: str
) -> tuple[str, str]:
    """(status, message) of a job without a candidate, from how its child ended: the child's own verdict,
    else "error" (forged channel lines, so nothing it sent can be trusted; host memory; a crash) or
    "timeout" with `timeout` formatted with the stage and its limit in seconds."""
    if child.forged:  # the reference wrote to the result channel
        return "error", f"{child.forged} message(s) on the result channel were not the evaluator's"
    if child.done is not None:
        return child.done["status"], child.done["message"]
    if child.memory_stage is not None:  # read by agent.checks as out of memory: checked again alone
        return "error", (f"out of memory: the {child.memory_stage} stage used more than "
                         f"{memory_limit_gb(settings):g} GiB of host memory and was killed")  # fmt: skip
    if child.timed_out:
        return "timeout", timeout.format(stage=child.stage, limit=_stage_limits(settings.limits)[child.stage])
    tail = child.stderr.strip().splitlines()[-6:]
    message = f"the {what} process {_describe_exit(child.returncode)} during the {child.stage} stage"
    return "error", message + ((":\n" + "\n".join(tail)) if tail else " (nothing on stderr)")


def compile_cache_env(cache_dir: str | Path) -> dict[str, str]:
    """The variables a baseline child sets (`time_baseline`, `warm_baseline` with `cache_dir`) to keep
    torch.compile's on-disk caches in `cache_dir`: inductor's (FX graph and AOT autograd caches, its C++
    builds) in `cache_dir`/inductor, Triton's compiled kernels in `cache_dir`/triton."""
    root = Path(cache_dir).resolve()
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TRITON_CACHE_DIR": str(root / "triton")}


def _baseline_job(problem: Problem, compile_mode: str, cache_dir: str | Path | None) -> dict:
    job = {"mode": "baseline", "compile_mode": compile_mode, "problem": problem.to_dict()}
    if cache_dir is not None:
        job.update(compile_cache=True, env=compile_cache_env(cache_dir))
    return job


_BASELINE_TIMEOUT = "the {stage} stage ran past its {limit:g} s limit (raise it with --stage-limits)"


def time_baseline(
    problem: Problem,
    settings: EvalSettings,
    compile_mode: str = "default",
    cache_dir: str | Path | None = None,
) -> dict:
    """Time `problem`'s reference eager and under `torch.compile(mode=compile_mode)` in an isolated child
    (`evaluator.stages.baseline`: the timing stage's protocol for the reference; no candidate).

    Args:
        compile_mode: "default" (inductor's default) or "max-autotune".
        cache_dir: a folder for torch.compile's on-disk caches (`compile_cache_env`), shared with the
            warm-up child that compiled the reference first (`warm_baseline`); None: the child's own,
            removed with it (every compilation cold).

    Returns a dict: key, level, problem_id, name, code_sha256, device, precision, gpu_name (None on the
    CPU), torch (the child's torch version), compile_mode, status ("ok", "compile_failed": torch.compile
    failed or its output differed, the eager figure stands; "error": no figure; "timeout"), message,
    method, settings, eager and compiled (TimingStats dicts, ms; None when not measured), eager_ms and
    compile_ms (their means, ms), compile_s (seconds of the first compiled call), compile_error,
    compile_cache (that call's FX graph and AOT autograd cache hits, misses and bypasses, or None),
    seconds (the child's stages together), stages (seconds per stage, as the supervisor saw them) and
    child_start (`run_child`'s record: "fork" or "spawn", why, seconds). Does not raise for anything the
    reference does.
    """
    job = _baseline_job(problem, compile_mode, cache_dir)
    parts, child, stages = _run_reference_job("kb-base-", job, settings)
    found = parts.get("baseline", {}).get("baseline", {})
    hw = parts.get("hardware", {}).get("hardware", {})
    status, message = _reference_outcome(child, settings, "baseline", _BASELINE_TIMEOUT)
    if child.forged:
        found = {}
    eager, compiled = found.get("eager"), found.get("compiled")
    if status == "timeout" and eager:  # torch.compile ran out of time; the eager figure stands
        status, found["compile_error"] = "compile_failed", message
    return {"key": problem.key, "level": problem.level, "problem_id": problem.problem_id, "name": problem.name,
            "code_sha256": problem.code_sha256, "device": settings.device, "precision": settings.precision,
            "gpu_name": hw.get("gpu_name"), "torch": hw.get("torch"), "compile_mode": compile_mode,
            "status": status, "message": message, "method": found.get("method"),
            "settings": found.get("settings") or {}, "eager": eager, "compiled": compiled,
            "eager_ms": eager["mean_ms"] if eager else None, "compile_ms": compiled["mean_ms"] if compiled else None,
            "compile_s": found.get("compile_s"), "compile_error": found.get("compile_error"),
            "compile_cache": found.get("compile_cache"), **_child_seconds(child, stages)}  # fmt: skip


def _child_seconds(child: ChildOutcome, stages: dict[str, float]) -> dict:
    """A reference job's seconds: in all, per stage (rounded to ms) and how its child started."""
    return {"seconds": sum(stages.values()), "stages": {k: round(v, 3) for k, v in stages.items()},
            "child_start": dict(child.start)}  # fmt: skip


def warm_baseline(
    problem: Problem,
    settings: EvalSettings,
    compile_mode: str = "default",
    cache_dir: str | Path | None = None,
    compile_threads: int | None = None,
) -> dict:
    """Compile `problem`'s reference under `torch.compile(mode=compile_mode)` in an isolated child, timing
    nothing but the first compiled call (`evaluator.stages.baseline.warm`: the reference, inputs and
    eager call `time_baseline`'s child makes first), so that a `time_baseline` given the same `cache_dir`
    compiles from its caches. Times nothing else, so several may share a device; `compile_threads`
    caps inductor's compile workers in the child (None: one per CPU), so several share the CPUs.

    Returns a dict: key, status ("ok"; "compile_failed": torch.compile raised; "error": the reference
    failed or a stage ran out of memory, the message then begins "out of memory"; "timeout"), message,
    compile_s (wall seconds of the first compiled call: the cold compilation where `cache_dir` was
    empty; None when it did not finish), compile_error, compile_cache, seconds, stages and child_start
    (as `time_baseline`'s). Does not raise for anything the reference does.
    """
    job = {
        **_baseline_job(problem, compile_mode, cache_dir),
        "warmup": True,
        "compile_threads": compile_threads,
    }
    parts, child, stages = _run_reference_job("kb-base-", job, settings)
    found = {} if child.forged else parts.get("baseline", {}).get("baseline", {})
    status, message = _reference_outcome(child, settings, "baseline warm-up", _BASELINE_TIMEOUT)
    return {"key": problem.key, "status": status, "message": message, "compile_s": found.get("compile_s"),
            "compile_error": found.get("compile_error"), "compile_cache": found.get("compile_cache"),
            **_child_seconds(child, stages)}  # fmt: skip
