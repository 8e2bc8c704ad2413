"""The evaluation pool: many evaluations at once, each on a slot of its own, for `solve --jobs`,
`problems check --jobs` and any later rescoring.

    pool = EvalPool(EvalSettings(device="cuda"))      # one GPU slot per visible GPU, and build slots
    result = pool.evaluate(problem, source)           # blocks until its slots are free, then evaluates
    future = pool.submit(EvalJob(problem, source, settings))   # the same, from a helper thread

Run slots. On a CUDA device, one GPU slot per visible GPU (`visible_gpus`: the entries of
`CUDA_VISIBLE_DEVICES` when it is set, else `torch.cuda.device_count()`); a job on GPU slot i is
evaluated with `device="cuda:i"`, so its correctness trials and timing run on that GPU and on no other.
`settings.device="cuda:N"` gives one slot, on that GPU. On the CPU (`device="cpu"`), `cpu_slots` CPU slots
(default: the machine's cores). `per_gpu` above 1 lets jobs that time nothing (reference checks) share a
GPU; at 1 (the default) timing never shares a GPU with another evaluation of the pool.

Build slots. An evaluation split in two children (`EvalSettings.split_build`; by default a CUDA
candidate that builds an extension) holds a build slot while its build child imports the candidate and
compiles its extensions without the GPU, frees it, then waits for a run slot, which it holds while its
run child checks and times it (`evaluator.runner.evaluate` takes them in that order, through the job's
`JobSlots`). So several builds run at once on the CPUs while each GPU serves one run child; a job that
is not split takes its run slot only. `build_slots` defaults to half the CPUs left to the builds:
`load_inline` compiles its two translation units (main.cpp and the .cu) at once, so two CPUs a build
keep each build at full speed, and more builds at once would only share them.

CPUs. On a CUDA device each GPU's run slot gets CPUs of its own (`gpu_cores` each, default
`slots.default_gpu_cores`: 2 where the process has at least 2 per GPU and 2 more), the highest-numbered
physical cores with their hyperthread siblings; the build slots share the rest. Each child pins itself
to its slot's CPUs before it imports torch (`Slot.cores`, `worker.pin`), so a compiler never takes the
core a timing loop runs on. With too few CPUs to keep apart, or on the CPU device, nothing is pinned.

Executors. The default (`run_job_in_phases`) runs each job in fresh, isolated child processes
(`evaluator.runner`) and lets an evaluation take its slots in turn. A one-phase executor (`run_job=`:
fakes in tests) holds a run slot for the whole of each job, as the first version of the pool did; the
pool then has no build slots. A two-phase one (`run_phases=`: Ray's, a build task then a GPU task)
gets the job's `JobSlots`.

Reuse. With `reuse_results=True` (what `solve` asks for) an "evaluate" job whose source, problem and
settings equal those of an earlier job of the pool is not evaluated again: it gets a copy of that
job's `EvalResult` with `reused` set (the earlier evaluation's stages and start) and no stages of its
own, and a job arriving while its twin is still running waits for it. Only verdicts a second
evaluation would repeat are reused (`REUSABLE`: correct, incorrect, compile_error, rejected); a
timeout or runtime error, which load or the machine can cause, is evaluated again, as is anything
that raised. A model that answers with the code it already sent costs no GPU time, and a repeated
kernel's noisy timings do not get a second draw at best-of-trajectory's max (`solve`'s re-timing of
each trajectory's winner is a "retime" job, never reused). The last `REUSE_KEPT` results are kept.
`remember` adds results made before the pool (`solve --resume` gives it the run's stored ones).

Interface (what a Ray executor implements too): `run(job)` blocks and returns the job's result (an
`EvalResult`, or the check's dict for a `check_problem` job), `submit(job)` returns a `Future` of it;
`evaluate` / `retime` make the pool an `Evaluator` for the agent loop. `slots()` (run slots, then build
slots) and `gpu_busy()` are for progress displays and benchmarks. The pool imports nothing from the
agent: no LLM, no store.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from kb_agent.evaluator.result import EvalResult, Status
from kb_agent.evaluator.settings import EvalSettings
from kb_agent.evaluator.slots import Slot, Slots, default_gpu_cores, partition_cores
from kb_agent.problems import Problem

log = logging.getLogger(__name__)

JOB_KINDS = ("evaluate", "retime", "check_problem")
# the verdicts an evaluation of the same source would give again (see "Reuse" above)
REUSABLE = frozenset({Status.CORRECT, Status.INCORRECT, Status.COMPILE_ERROR, Status.REJECTED})
REUSE_KEPT = 4096  # results a pool keeps for reuse, the least recent dropped first


@dataclass(frozen=True)
class EvalJob:
    """One unit of work for the pool.

    Attributes:
        problem: the reference.
        source: the candidate module's source ("" for a `check_problem` job).
        settings: how to evaluate; the slot's device replaces `settings.device` on a GPU slot.
        kind: "evaluate" (`evaluator.runner.evaluate`), "retime" (`evaluator.retime`: the reproducible
            figure on) or "check_problem" (`evaluator.runner.check_problem`, whose result is a dict).
    """

    problem: Problem
    source: str
    settings: EvalSettings
    kind: str = "evaluate"

    def __post_init__(self) -> None:
        if self.kind not in JOB_KINDS:
            raise ValueError(f"unknown job kind {self.kind!r}; choose one of {', '.join(JOB_KINDS)}")


RunJob = Callable[[EvalJob], Any]
"""Runs one job whose settings already name the slot's device, in the calling thread; returns its result."""

RunPhases = Callable[[EvalJob, Slots], Any]
"""Runs one job in the calling thread, taking its slots (`JobSlots`) as it needs them; returns its result."""


def run_job(job: EvalJob) -> Any:
    """The local executor without a pool's slots: `job` in fresh, isolated child processes
    (`evaluator.runner`) on `job.settings.device`, a split evaluation's two children one after the other."""
    from kb_agent.evaluator.slots import Unpooled

    return run_job_in_phases(job, Unpooled(job.settings.device))


def run_job_in_phases(job: EvalJob, slots: Slots) -> Any:
    """The local executor: `job` in fresh, isolated child processes (`evaluator.runner`), each holding the
    slot it needs: an evaluation (or re-timing: `evaluator.retime`'s settings, the reproducible figure
    on) takes a build slot for its build child, then its run slot; a problem check its run slot only."""
    from kb_agent.evaluator.runner import check_problem, evaluate

    if job.kind == "check_problem":
        with slots.run() as slot:
            return check_problem(job.problem, dataclasses.replace(job.settings, device=slot.device))
    return evaluate(job.problem, job.source, job_settings(job), slots)


def job_settings(job: EvalJob) -> EvalSettings:
    """The settings an "evaluate" or "retime" job is evaluated with: a re-timing has the reproducible
    figure on (`evaluator.retime`)."""
    return dataclasses.replace(job.settings, repro_timing=True) if job.kind == "retime" else job.settings


@dataclass
class SlotState:
    """What one slot is doing, for a progress display (a copy; the pool keeps its own).

    Attributes:
        name: "gpu0", "gpu1", ..., "cpu0", ... (run slots) or "build0", ...
        device: the device its jobs are evaluated on ("cuda:0", "cpu"); "cpu" for a build slot.
        job: "<problem key> <kind>" of the job it holds ("<problem key> build" on a build slot), None
            when free.
        since_s: seconds the current job has held it (0.0 when free).
        busy_s: seconds it has been held, in all, since the pool was made.
        done: jobs it has finished (on a build slot: build children).
        kind: "gpu" or "cpu" (a run slot on that device) or "build".
        cores: the CPUs its children are pinned to, None for any.
    """

    name: str
    device: str
    job: str | None = None
    since_s: float = 0.0
    busy_s: float = 0.0
    done: int = 0
    kind: str = "gpu"
    cores: tuple[int, ...] | None = None


def visible_gpus() -> int:
    """The GPUs this process may use: the entries of `CUDA_VISIBLE_DEVICES` up to the first invalid one
    (as CUDA reads it: "" or "-1" hides them all) when it is set, else `torch.cuda.device_count()`
    (0 without torch or a driver)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        n = 0
        for entry in env.split(","):
            entry = entry.strip()
            if not entry or entry.startswith("-"):
                break
            n += 1
        return n
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception:  # no torch, or a broken driver: no GPU to hand out
        return 0


def cpu_cores() -> int:
    """Cores this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def reused(earlier: EvalResult) -> EvalResult:
    """A copy of `earlier` for a job that repeats it: `reused` holds its stages and start, and the copy
    has no stages (nothing ran: no GPU-seconds for the store's `gpu_s`)."""
    result = copy.deepcopy(earlier)
    result.reused = {"stages": dict(earlier.stages), "child_start": dict(earlier.child_start)}
    result.stages, result.child_start = {}, {}
    return result


class EvalPool:
    """Evaluation slots shared by every thread of a process (see the module docstring).

    Args:
        settings: the settings `evaluate` and `retime` use (default `EvalSettings()`); their device picks
            the run slots: "cuda" one per visible GPU, "cuda:N" one on GPU N, "cpu" CPU slots.
        gpus: GPU slots for a "cuda" device; None counts them (`visible_gpus`).
        cpu_slots: run slots for a "cpu" device; None: the cores (`cpu_cores`).
        per_gpu: jobs one GPU holds at once; 1 (the default) keeps timing alone on its GPU.
        build_slots: build children at once; None: half the CPUs the builds have (at least 1).
        gpu_cores: CPUs pinned to each GPU's run slot; None: `slots.default_gpu_cores`; 0 pins nothing.
        run_job: a one-phase executor (a job holds a run slot throughout; no build slots); tests pass fakes.
        run_phases: a two-phase executor, given each job's `JobSlots`; the default, with neither given,
            is `run_job_in_phases` (fresh child processes).
        reuse_results: give an "evaluate" job the (copied) result of an earlier one of the same source,
            problem and settings instead of evaluating it again (see "Reuse" in the module docstring).

    Raises:
        ValueError: a CUDA device with no GPU visible, a slot count below 1, or both executors given.
    """

    def __init__(
        self,
        settings: EvalSettings | None = None,
        *,
        gpus: int | None = None,
        cpu_slots: int | None = None,
        per_gpu: int = 1,
        build_slots: int | None = None,
        gpu_cores: int | None = None,
        run_job: RunJob | None = None,
        run_phases: RunPhases | None = None,
        reuse_results: bool = False,
    ):
        self.settings = settings or EvalSettings()
        self.reuse_results = reuse_results
        self._earlier: collections.OrderedDict[str, Future] = collections.OrderedDict()
        if run_job is not None and run_phases is not None:
            raise ValueError("give the pool one executor: run_job (one phase) or run_phases (two)")
        self._run_job = run_job
        self._run_phases = run_phases if run_job is None and run_phases is not None else None
        if run_job is None and run_phases is None:
            self._run_phases = run_job_in_phases
        device = self.settings.device
        if per_gpu < 1:
            raise ValueError(f"per_gpu must be 1 or more, got {per_gpu}")
        cpus = _cpu_list()
        if device == "cpu":
            n = cpu_cores() if cpu_slots is None else cpu_slots
            if n < 1:
                raise ValueError(f"cpu_slots must be 1 or more, got {n}")
            slots = [SlotState(f"cpu{i}", "cpu", kind="cpu") for i in range(n)]
            build_cores = None
        else:
            if device.startswith("cuda:"):
                devices = [device]
            else:
                n = visible_gpus() if gpus is None else gpus
                if n < 1:
                    raise ValueError(
                        "no GPU is visible (CUDA_VISIBLE_DEVICES, torch.cuda); evaluate on a GPU machine, "
                        "or on the CPU with device='cpu'"
                    )
                devices = [f"cuda:{i}" for i in range(n)]
            per_core = default_gpu_cores(len(cpus), len(devices)) if gpu_cores is None else gpu_cores
            gpu_sets, build_cores = partition_cores(cpus, len(devices), per_core)
            slots = [
                SlotState(f"gpu{d.split(':')[1]}" + (f".{k}" if per_gpu > 1 else ""), d, cores=c)
                for d, c in zip(devices, gpu_sets, strict=True)
                for k in range(per_gpu)
            ]
        if self._run_phases is None:
            n_build = 0
        else:
            n_build = max(1, len(build_cores or cpus) // 2) if build_slots is None else build_slots
            if n_build < 1:
                raise ValueError(f"build_slots must be 1 or more, got {n_build}")
        builds = [SlotState(f"build{i}", "cpu", kind="build", cores=build_cores) for i in range(n_build)]
        self._cond = threading.Condition()
        self._run = _SlotGroup(slots, self._cond)
        self._build = _SlotGroup(builds, self._cond)
        self._t0 = time.monotonic()
        # evaluations running in the pool (from a job's start to its result), and the seconds in which
        # at least one was: the denominator of gpu_busy(in_flight=True)
        self._in_flight, self._in_flight_since, self._in_flight_s = 0, 0.0, 0.0
        if run_job is None and run_phases is None and device != "cpu":  # this process's evaluations
            from kb_agent.evaluator.runner import warm_headers

            warm_headers(self.settings)

    # -- the interface -----------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """How many jobs may run on the run slots at once (GPUs × per_gpu, or CPU slots)."""
        return len(self._run.slots)

    @property
    def build_size(self) -> int:
        """How many build children may run at once (0 with a one-phase executor)."""
        return len(self._build.slots)

    @property
    def on_gpu(self) -> bool:
        """Whether the run slots are GPU slots."""
        return self._run.slots[0].device != "cpu"

    def run(self, job: EvalJob) -> Any:
        """Run `job` in this thread on the slots it needs, waiting for each (first come, first served),
        and return its result: with a one-phase executor it holds a run slot throughout; with a
        two-phase one it takes a build slot and then a run slot as its evaluation asks (`JobSlots`). A
        KeyboardInterrupt while waiting or running propagates (the runner kills the job's child first)
        and frees its slot. With `reuse_results`, an earlier twin's result instead (module docstring)."""
        key = self._reuse_key(job)
        if key is None:
            return self._run_now(job)
        with self._cond:
            earlier = self._earlier.get(key)
            if earlier is None:
                mine = self._earlier[key] = Future()
                while len(self._earlier) > REUSE_KEPT:
                    self._earlier.popitem(last=False)
            else:
                self._earlier.move_to_end(key)
        if earlier is not None:
            found = earlier.result()
            return reused(found) if found is not None else self._run_now(job)
        result = None
        try:
            result = self._run_now(job)
            return result
        finally:
            keep = isinstance(result, EvalResult) and result.status in REUSABLE
            if not keep:
                with self._cond:
                    if self._earlier.get(key) is mine:
                        del self._earlier[key]
            mine.set_result(result if keep else None)  # a twin waiting evaluates itself on None

    def remember(self, problem: Problem, source: str, result: EvalResult) -> None:
        """Keep `result`, an evaluation of `source` under the pool's settings made before this pool
        existed (a resumed run's stored turns), for reuse as if this pool had made it; an earlier one of
        the same key stays. Nothing without `reuse_results`, or for a verdict not in REUSABLE."""
        key = self._reuse_key(EvalJob(problem, source, self.settings))
        if key is None or result.status not in REUSABLE or result.reused is not None:
            return
        with self._cond:
            if key not in self._earlier:
                done: Future = Future()
                done.set_result(result)
                self._earlier[key] = done
                while len(self._earlier) > REUSE_KEPT:
                    self._earlier.popitem(last=False)

    def _reuse_key(self, job: EvalJob) -> str | None:
        if not self.reuse_results or job.kind != "evaluate":
            return None
        what = [job.problem.to_dict(), job.source, job.settings.to_dict()]
        return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()

    def _run_now(self, job: EvalJob) -> Any:
        slots = JobSlots(self, job)
        with self._cond:
            if self._in_flight == 0:
                self._in_flight_since = time.monotonic()
            self._in_flight += 1
        try:
            if self._run_phases is not None:
                return self._run_phases(job, slots)
            with slots.run() as slot:
                if job.settings.device != slot.device:
                    job = dataclasses.replace(
                        job, settings=dataclasses.replace(job.settings, device=slot.device)
                    )
                return self._run_job(job)
        finally:
            with self._cond:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._in_flight_s += time.monotonic() - self._in_flight_since

    def submit(self, job: EvalJob) -> Future:
        """`run(job)` on a helper (daemon) thread; returns a Future of its result (or its exception)."""
        future: Future = Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(self.run(job))
            except BaseException as e:  # the Future carries it to whoever waits
                future.set_exception(e)

        threading.Thread(target=work, name="eval-pool-submit", daemon=True).start()
        return future

    def evaluate(self, problem: Problem, candidate_source: str) -> EvalResult:
        """The `Evaluator` protocol: `run` an "evaluate" job under the pool's settings."""
        return self.run(EvalJob(problem, candidate_source, self.settings))

    def retime(self, problem: Problem, candidate_source: str) -> EvalResult:
        """Re-time a correct candidate in a fresh child, the reproducible figure on (`evaluator.retime`)."""
        return self.run(EvalJob(problem, candidate_source, self.settings, kind="retime"))

    def kill_running(self) -> int:
        """Kill the children of every evaluation running in this process (an interrupt); return how many.
        An evaluation between its build and run children then starts no run child."""
        from kb_agent.evaluator.runner import kill_live_children

        return kill_live_children()

    # -- state, for progress displays ----------------------------------------------------------------------
    def slots(self) -> list[SlotState]:
        """A copy of every slot's state: the run slots, then the build slots."""
        now = time.monotonic()
        with self._cond:
            return self._run.states(now) + self._build.states(now)

    def waiting(self) -> int:
        """Jobs waiting for a slot (a run slot or a build slot)."""
        with self._cond:
            return len(self._run.waiting) + len(self._build.waiting)

    def in_flight_seconds(self) -> float:
        """Seconds since the pool was made in which at least one evaluation was in it (building, waiting
        for a slot or running; a reused result takes none)."""
        with self._cond:
            now = time.monotonic()
            return self._in_flight_s + (now - self._in_flight_since if self._in_flight else 0.0)

    def gpu_busy(self, in_flight: bool = False) -> float | None:
        """Fraction (0..1) of the time since the pool was made that its GPU slots were held, summed over
        GPUs and divided by their number; None for a CPU pool. Build slots do not count. With
        `per_gpu` above 1 a GPU counts as busy while any of its slots is held. With `in_flight`, of the
        time some candidate was in the pool instead (`in_flight_seconds`): how busy the GPU is while
        candidates wait for their verdicts, the time every trajectory waits for its model left out."""
        if not self.on_gpu:
            return None
        elapsed = self.in_flight_seconds() if in_flight else time.monotonic() - self._t0
        if elapsed <= 0:
            return 0.0
        per_device: dict[str, float] = {}
        for s in self.slots():
            if s.kind == "gpu":
                per_device[s.device] = max(per_device.get(s.device, 0.0), s.busy_s)
        return min(1.0, sum(per_device.values()) / (len(per_device) * elapsed))


class JobSlots:
    """The slots of one job in `pool` (`evaluator.slots.Slots`): `build()` a build slot, `run()` a run
    slot, each waited for (first come, first served among the jobs waiting for that kind) and freed when
    the block ends, an exception included. A pool without build slots (a one-phase executor) gives its
    builds no slot to wait for."""

    def __init__(self, pool: EvalPool, job: EvalJob):
        self.pool, self.job = pool, job

    @contextlib.contextmanager
    def build(self) -> Iterator[Slot]:
        group = self.pool._build
        if not group.slots:
            yield Slot("cpu")
            return
        i = group.acquire(f"{self.job.problem.key} build")
        try:
            yield Slot("cpu", group.slots[i].cores)
        finally:
            group.release(i)

    @contextlib.contextmanager
    def run(self) -> Iterator[Slot]:
        group = self.pool._run
        i = group.acquire(f"{self.job.problem.key} {self.job.kind}")
        try:
            s = group.slots[i]
            yield Slot(s.device, s.cores)
        finally:
            group.release(i)


class _SlotGroup:
    """Slots of one kind (the run slots, or the build slots), handed out first come, first served under
    the pool's one condition."""

    def __init__(self, slots: list[SlotState], cond: threading.Condition):
        self.slots = slots
        self.cond = cond
        self.since: list[float | None] = [None] * len(slots)
        self.free = list(range(len(slots)))
        self.waiting: list[int] = []  # tickets of threads waiting for a slot
        self.tickets = 0

    def acquire(self, label: str) -> int:
        with self.cond:
            ticket = self.tickets
            self.tickets += 1
            self.waiting.append(ticket)
            try:
                while not (self.free and self.waiting[0] == ticket):
                    self.cond.wait()
            finally:
                self.waiting.remove(ticket)
                self.cond.notify_all()
            i = self.free.pop(0)
            self.slots[i].job = label
            self.since[i] = time.monotonic()
            return i

    def release(self, i: int) -> None:
        with self.cond:
            since = self.since[i]
            s = self.slots[i]
            s.busy_s += time.monotonic() - since if since is not None else 0.0
            s.done += 1
            s.job, self.since[i] = None, None
            self.free.append(i)
            self.free.sort()
            self.cond.notify_all()

    def states(self, now: float) -> list[SlotState]:
        out = []
        for s, since in zip(self.slots, self.since, strict=True):
            held = now - since if since is not None else 0.0
            out.append(dataclasses.replace(s, since_s=held, busy_s=s.busy_s + held))
        return out


def _cpu_list() -> list[int]:
    """The CPUs this process may run on (its affinity mask), in order."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


__all__ = [
    "JOB_KINDS",
    "EvalJob",
    "EvalPool",
    "JobSlots",
    "RunJob",
    "RunPhases",
    "SlotState",
    "cpu_cores",
    "run_job",
    "run_job_in_phases",
    "visible_gpus",
]
