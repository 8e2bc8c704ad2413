"""The evaluation pool: many evaluations at once, each on a slot of its own, for `solve --jobs`,
`problems check --jobs` and any later rescoring.

    pool = EvalPool(EvalSettings(device="cuda"))      # one GPU slot per visible GPU
    result = pool.evaluate(problem, source)           # blocks until a slot is free, then evaluates
    future = pool.submit(EvalJob(problem, source, settings))   # the same, from a helper thread

Slots. On a CUDA device, one GPU slot per visible GPU (`visible_gpus`: the entries of
`CUDA_VISIBLE_DEVICES` when it is set, else `torch.cuda.device_count()`); a job on GPU slot i is
evaluated with `device="cuda:i"`, so its correctness trials and timing run on that GPU and on no other.
`settings.device="cuda:N"` gives one slot, on that GPU. On the CPU (`device="cpu"`), `cpu_slots` CPU slots
(default: the machine's cores).

What a slot holds, plainly (the first version): an evaluation is ONE job, one child process doing build,
correctness and timing, and it holds its slot for its whole duration. So timing never shares a GPU with
another evaluation of the pool, at most one evaluation per GPU runs at once (`per_gpu=1`), builds do not
overlap another evaluation's GPU work on the same GPU, and on the CPU no more evaluations run at once
than there are cores. Splitting the build onto CPU slots, with only correctness and timing holding the
GPU, needs the child to wait for its GPU slot between stages; that is not done yet. `per_gpu` above 1
lets jobs that time nothing (reference checks) share a GPU.

Interface (what a Ray executor implements too): `run(job)` blocks and returns the job's result (an
`EvalResult`, or the check's dict for a `check_problem` job), `submit(job)` returns a `Future` of it;
`evaluate` / `retime` make the pool an `Evaluator` for the agent loop. `slots()` and `gpu_busy()` are for
progress displays and benchmarks. The pool imports nothing from the agent: no LLM, no store.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from kb_agent.evaluator.result import EvalResult
from kb_agent.evaluator.settings import EvalSettings
from kb_agent.problems import Problem

log = logging.getLogger(__name__)

JOB_KINDS = ("evaluate", "retime", "check_problem")


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


def run_job(job: EvalJob) -> Any:
    """The local executor: `job` in a fresh, isolated child process (`evaluator.runner`)."""
    from kb_agent.evaluator import retime
    from kb_agent.evaluator.runner import check_problem, evaluate

    if job.kind == "check_problem":
        return check_problem(job.problem, job.settings)
    if job.kind == "retime":
        return retime(job.problem, job.source, job.settings)
    return evaluate(job.problem, job.source, job.settings)


@dataclass
class SlotState:
    """What one slot is doing, for a progress display (a copy; the pool keeps its own).

    Attributes:
        name: "gpu0", "gpu1", ... or "cpu0", ...
        device: the device its jobs are evaluated on ("cuda:0", "cpu").
        job: "<problem key> <kind>" of the job it holds, None when free.
        since_s: seconds the current job has held it (0.0 when free).
        busy_s: seconds it has been held, in all, since the pool was made.
        done: jobs it has finished.
    """

    name: str
    device: str
    job: str | None = None
    since_s: float = 0.0
    busy_s: float = 0.0
    done: int = 0


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


class EvalPool:
    """Evaluation slots shared by every thread of a process (see the module docstring).

    Args:
        settings: the settings `evaluate` and `retime` use (default `EvalSettings()`); their device picks
            the slots: "cuda" one per visible GPU, "cuda:N" one on GPU N, "cpu" CPU slots.
        gpus: GPU slots for a "cuda" device; None counts them (`visible_gpus`).
        cpu_slots: slots for a "cpu" device; None: the cores (`cpu_cores`).
        per_gpu: jobs one GPU holds at once; 1 (the default) keeps timing alone on its GPU.
        run_job: the executor of one job (default `run_job`: a fresh child process); tests pass fakes.

    Raises:
        ValueError: a CUDA device with no GPU visible, or a slot count below 1.
    """

    def __init__(
        self,
        settings: EvalSettings | None = None,
        *,
        gpus: int | None = None,
        cpu_slots: int | None = None,
        per_gpu: int = 1,
        run_job: RunJob = run_job,
    ):
        self.settings = settings or EvalSettings()
        self._run_job = run_job
        device = self.settings.device
        if per_gpu < 1:
            raise ValueError(f"per_gpu must be 1 or more, got {per_gpu}")
        if device == "cpu":
            n = cpu_cores() if cpu_slots is None else cpu_slots
            if n < 1:
                raise ValueError(f"cpu_slots must be 1 or more, got {n}")
            slots = [SlotState(f"cpu{i}", "cpu") for i in range(n)]
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
            slots = [
                SlotState(f"gpu{d.split(':')[1]}" + (f".{k}" if per_gpu > 1 else ""), d)
                for d in devices
                for k in range(per_gpu)
            ]
        self._slots = slots
        self._since: list[float | None] = [None] * len(slots)
        self._free = list(range(len(slots)))
        self._waiting: list[int] = []  # tickets of threads waiting for a slot, first come first served
        self._tickets = 0
        self._cond = threading.Condition()
        self._t0 = time.monotonic()

    # -- the interface -----------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """How many jobs may run at once."""
        return len(self._slots)

    @property
    def on_gpu(self) -> bool:
        """Whether the slots are GPU slots."""
        return self._slots[0].device != "cpu"

    def run(self, job: EvalJob) -> Any:
        """Wait for a free slot (first come, first served), run `job` there in this thread, free the slot,
        return the job's result. A KeyboardInterrupt while waiting or running propagates (the runner
        kills the job's child first) and frees the slot."""
        i = self._acquire(job)
        try:
            device = self._slots[i].device
            if job.settings.device != device:
                job = dataclasses.replace(job, settings=dataclasses.replace(job.settings, device=device))
            return self._run_job(job)
        finally:
            self._release(i)

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
        """Kill the children of every evaluation running in this process (an interrupt); return how many."""
        from kb_agent.evaluator.runner import kill_live_children

        return kill_live_children()

    # -- state, for progress displays ----------------------------------------------------------------------
    def slots(self) -> list[SlotState]:
        """A copy of every slot's state."""
        now = time.monotonic()
        with self._cond:
            out = []
            for s, since in zip(self._slots, self._since, strict=True):
                held = now - since if since is not None else 0.0
                out.append(dataclasses.replace(s, since_s=held, busy_s=s.busy_s + held))
            return out

    def waiting(self) -> int:
        """Jobs waiting for a slot."""
        with self._cond:
            return len(self._waiting)

    def gpu_busy(self) -> float | None:
        """Fraction (0..1) of the time since the pool was made that its GPU slots were held, summed over
        slots and divided by their number; None for a CPU pool. With `per_gpu` above 1 a GPU counts as
        busy while any of its slots is held."""
        if not self.on_gpu:
            return None
        elapsed = time.monotonic() - self._t0
        if elapsed <= 0:
            return 0.0
        per_device: dict[str, float] = {}
        for s in self.slots():
            per_device[s.device] = max(per_device.get(s.device, 0.0), s.busy_s)
        return min(1.0, sum(per_device.values()) / (len(per_device) * elapsed))

    # -- slots ---------------------------------------------------------------------------------------------
    def _acquire(self, job: EvalJob) -> int:
        with self._cond:
            ticket = self._tickets
            self._tickets += 1
            self._waiting.append(ticket)
            try:
                while not (self._free and self._waiting[0] == ticket):
                    self._cond.wait()
            finally:
                self._waiting.remove(ticket)
                self._cond.notify_all()
            i = self._free.pop(0)
            self._slots[i].job = f"{job.problem.key} {job.kind}"
            self._since[i] = time.monotonic()
            return i

    def _release(self, i: int) -> None:
        with self._cond:
            since = self._since[i]
            s = self._slots[i]
            s.busy_s += time.monotonic() - since if since is not None else 0.0
            s.done += 1
            s.job, self._since[i] = None, None
            self._free.append(i)
            self._free.sort()
            self._cond.notify_all()


__all__ = ["JOB_KINDS", "EvalJob", "EvalPool", "RunJob", "SlotState", "cpu_cores", "run_job", "visible_gpus"]
