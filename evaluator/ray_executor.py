"""Evaluations on a Ray cluster: the evaluation pool's jobs as Ray tasks (`pip install "kb-agent[ray]"`).

    with RayExecutor() as cluster:                      # a local Ray instance, shut down on the way out
        pool = cluster.pool(EvalSettings(device="cuda"))  # an EvalPool with one slot per GPU of the cluster
        result = pool.evaluate(problem, source)         # the same EvalResult a local pool gives
    RayExecutor("head-node:6379")                       # a running cluster (its GCS address); left running

What runs where. The driver (this process) keeps the model calls, the store and the pool's slots (first
come, first served, as `EvalPool` does); each job that takes a slot becomes one Ray task, in a fresh
worker process (`max_calls=1`: the worker exits after it; `fresh_workers=False` lets Ray reuse workers),
which runs the job exactly as the local pool does (`evaluator.pool.run_job`: an isolated child process
per evaluation, secrets stripped from its environment by `evaluator.runner`). Job and result cross as plain dicts (`Problem.to_dict`,
`EvalSettings.to_dict`, `EvalResult.to_dict`), so a worker returns the `EvalResult` a local pool would.

Two phases, as the local pool runs them. An evaluation the runner splits (a CUDA candidate that builds
an extension: `runner.build_plan`) is two tasks: its build child in a CPU task (`runner.evaluate_build`),
holding one of the pool's build slots, then, unless the build ended it (a compile error), its run child
in a GPU task (`runner.evaluate_run`) on the same node, which finds the build's products in that node's
build cache; so the GPU waits for no compiler. On a cluster of several nodes both tasks are pinned to
one node with a GPU (the one with the fewest of this pool's evaluations in flight). Any other job is
one task holding its run slot throughout: a Triton candidate, a problem check, a re-timing (of a winner,
built when it was evaluated), a source this executor built before, and any evaluation whose builds are
not kept (`reuse_builds` off: they would live in the build worker's work directory). An interrupt
(`kill_running`) while an evaluation waits between its two tasks starts no run task.
(In one phase, every build holding the GPU's slot, a sweep of 6 level-1 problems x 3 turns of CUDA
replies at --jobs 8 took 243 s on one H100 node against 80 s for the local pool.)

Resources (`task_options`): on a CUDA device a GPU job (evaluate, retime, check_problem) asks for
`num_gpus=1` (a share of one for checks, which time nothing) and one CPU, and runs on `cuda:0`, the GPU
Ray gave it (Ray sets the task's `CUDA_VISIBLE_DEVICES`); every other job, and every job on the CPU
device, asks for one CPU and no GPU, so a build job, once the runner splits builds off, is a CPU task.
The pool has one slot per GPU of the cluster (`cluster_resources()["GPU"]`, counted when the pool is
made), or one per CPU with device "cpu", and on a GPU cluster (CPUs - GPUs) / 2 build slots, so that
builds leave a CPU to every GPU task.

The connection. No address: a local instance started here (`ray.init(address="local")` with this
machine's cores and visible GPUs, no dashboard, usage statistics off unless `RAY_USAGE_STATS_ENABLED` is
set), its processes started with every secret-looking variable (`runner.SECRET_NAME`) taken out of the
environment, and shut down by `close`. An address: that cluster, which must answer on it within
`CONNECT_TIMEOUT_S` (Ray itself waits minutes), with this version of kb-agent installed on every node:
the pool's first task (`probe`) compares the workers' evaluator sources with this checkout's and refuses
a difference. Nothing is put into a runtime_env: the workers get no variable of the driver's. Every
failure to get a cluster is a `RayExecutorError` (one line, exit 2 in the CLI).

Interrupts: `kill_running` (the loop's Ctrl-C) cancels the tasks in flight (Ray raises KeyboardInterrupt
in each worker, whose runner then kills its child; after `FORCE_AFTER_S` the workers are killed), and
the threads waiting on them get KeyboardInterrupt, as a local pool's do. A task that Ray loses (its
worker or node died twice: `max_retries=1`) raises RayExecutorError.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kb_agent.evaluator.pool import EvalJob, EvalPool, cpu_cores, visible_gpus
from kb_agent.evaluator.result import EvalResult
from kb_agent.evaluator.runner import BuildPhase
from kb_agent.evaluator.settings import EvalSettings
from kb_agent.evaluator.slots import Slots, taken
from kb_agent.problems import Problem
from kb_agent.problems.errors import KBAgentError

log = logging.getLogger(__name__)

INSTALL_HINT = 'pip install "kb-agent[ray]"'
GPU_KINDS = ("evaluate", "retime", "check_problem")
"""Job kinds that use the GPU on a CUDA device; any other kind (a build) is a CPU task."""
CONNECT_TIMEOUT_S = 5.0
"""Seconds a cluster's address has to accept a TCP connection before `RayExecutorError` (ray.init waits minutes)."""
PROBE_TIMEOUT_S = 300.0
"""Seconds the first task (`probe`) may wait for a worker: a busy cluster, or one without the resources."""
FORCE_AFTER_S = 5.0
"""Seconds after `kill_running` cancels a task before its worker is killed outright."""


class RayExecutorError(KBAgentError):
    """Ray cannot be used as asked: not installed, no cluster at the address, no GPU in it, workers that
    run another evaluator, or a task Ray lost. The message is one line saying what to do."""


def import_ray() -> Any:
    """The `ray` module; RayExecutorError saying how to install it when it is missing."""
    try:
        import ray
    except ImportError:
        raise RayExecutorError(f"Ray is not installed here; {INSTALL_HINT}") from None
    return ray


def task_options(kind: str, device: str, gpu_share: float = 1.0) -> dict[str, Any]:
    """Ray resources of one job of `kind` on `device`: a GPU job on a CUDA device asks for `gpu_share`
    GPUs (1: alone on it) and one CPU; anything else for one CPU."""
    if device.startswith("cuda") and kind in GPU_KINDS:
        return {"num_cpus": 1, "num_gpus": gpu_share}
    return {"num_cpus": 1, "num_gpus": 0}


def evaluator_digest() -> str:
    """SHA-256 (16 hex digits) of this installation's evaluator and problem loader sources (every .py
    under `kb_agent.evaluator` and `kb_agent.problems`): two installations that give it alike judge a
    candidate alike."""
    import kb_agent.evaluator
    import kb_agent.problems

    h = hashlib.sha256()
    for pkg in (kb_agent.evaluator, kb_agent.problems):
        root = Path(pkg.__file__).resolve().parent
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# -- what runs in a Ray worker (module-level functions: Ray ships them by reference) ----------------------
def _job_of(payload: dict[str, Any]) -> EvalJob:
    return EvalJob(
        Problem.from_dict(payload["problem"]),
        payload["source"],
        EvalSettings.from_dict(payload["settings"]),
        payload["kind"],
    )


def _run_task(payload: dict[str, Any]) -> dict[str, Any]:
    """One job in this (fresh) worker, through the local executor; its result as a dict."""
    from kb_agent.evaluator.pool import run_job

    out = run_job(_job_of(payload))
    return {"eval_result": out.to_dict()} if isinstance(out, EvalResult) else {"dict": out}


def _build_task(payload: dict[str, Any]) -> dict[str, Any]:
    """The build phase of an evaluation job in this worker (`runner.evaluate_build`): {"built": the
    `BuildPhase` as a dict, or None when the runner does not split it}."""
    from kb_agent.evaluator.pool import job_settings
    from kb_agent.evaluator.runner import evaluate_build

    job = _job_of(payload)
    built = evaluate_build(job.problem, job.source, job_settings(job))
    return {"built": None if built is None else built.to_dict()}


def _run_after_build_task(payload: dict[str, Any], built: dict[str, Any]) -> dict[str, Any]:
    """The run phase of an evaluation job whose build phase ran on this node (`runner.evaluate_run`)."""
    from kb_agent.evaluator.pool import job_settings
    from kb_agent.evaluator.runner import evaluate_run

    job = _job_of(payload)
    out = evaluate_run(job.problem, job.source, job_settings(job), BuildPhase.from_dict(built))
    return {"eval_result": out.to_dict()}


def _probe(on_gpu: bool) -> dict[str, Any]:
    """What a worker runs: its evaluator's digest and, on a GPU, that GPU's name and compute capability."""
    info: dict[str, Any] = {"digest": evaluator_digest(), "host": socket.gethostname()}
    if on_gpu:
        import torch

        major, minor = torch.cuda.get_device_capability(0)
        info.update(gpu_name=torch.cuda.get_device_name(0), arch=f"{major}.{minor}")
    return info


@contextlib.contextmanager
def _environment_for_ray() -> Iterator[None]:
    """os.environ without secret-looking variables (Ray's own `RAY_*` kept) and with usage statistics
    off unless set, for the processes a local instance starts; restored afterwards."""
    from kb_agent.evaluator.runner import SECRET_NAME

    saved = {k: v for k, v in os.environ.items() if SECRET_NAME.search(k) and not k.startswith("RAY_")}
    usage_set = "RAY_USAGE_STATS_ENABLED" in os.environ
    for k in saved:
        del os.environ[k]
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        yield
    finally:
        os.environ.update(saved)
        if not usage_set:
            os.environ.pop("RAY_USAGE_STATS_ENABLED", None)


def _answers(address: str, timeout_s: float) -> str | None:
    """None when `address` ("host:port", optionally "ray://host:port") accepts a TCP connection within
    `timeout_s`; else why not, in a few words. Addresses without a port ("auto") are left to Ray."""
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout_s):
            return None
    except OSError as e:
        return e.strerror or type(e).__name__


def _source_key(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def _with_waits(result: Any, waits: dict[str, float]) -> Any:
    """An `EvalResult` with the pool's waits among its stages (a check's dict as it is)."""
    if isinstance(result, EvalResult):
        result.stages.update({k: round(waits.get(k, 0.0), 6) for k in ("build_wait", "run_wait")})
    return result


class RayExecutor:
    """A connection to Ray and the executor of jobs on it (see the module docstring).

    Args:
        address: a running cluster's address ("host:port" of its head, or "auto" for one started on this
            machine with `ray start`); None starts a local instance here.
        num_cpus: the local instance's CPUs; None: this process's cores (`pool.cpu_cores`).
        num_gpus: the local instance's GPUs; None: the visible GPUs (`pool.visible_gpus`).
        fresh_workers: each task in a new worker process (`max_calls=1`, the default). False lets Ray
            reuse a worker for later tasks, so the evaluator's fork server (`evaluator.zygote`) started in
            it stays warm: each evaluation's child is as fresh either way (forked from a process that
            never ran candidate code, or spawned), and a task no longer pays a worker's start and the
            imports of torch (on 2 shared cores, toy problems: about 7 s of each evaluation).

    Raises:
        RayExecutorError: Ray is not installed, or no cluster answers at `address` (in `CONNECT_TIMEOUT_S`), or
            Ray refused to connect or start (its message, first line).
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        num_gpus: int | None = None,
        fresh_workers: bool = True,
    ):
        self.ray = ray = import_ray()
        self.address = address
        self._owns = False  # whether close() shuts Ray down (a connection made here)
        self._live: dict[Any, float | None] = {}  # task ref -> when kill_running cancelled it (None: not yet)
        self._lock = threading.Lock()
        self._probes: dict[bool, dict[str, Any]] = {}
        remote = ray.remote(max_calls=1 if fresh_workers else 0, max_retries=1)
        self._task, self._build, self._after_build = (
            remote(_run_task),
            remote(_build_task),
            remote(_run_after_build_task),
        )
        self._node_load: dict[str, int] = {}  # node id -> this executor's evaluations in flight there
        self._built: set[str] = set()  # sources whose build task ran (`_source_key`)
        self._kills = 0  # calls of kill_running, which an evaluation between its two tasks looks at
        self._probe = ray.remote(max_calls=1, max_retries=1)(_probe)
        if ray.is_initialized():  # the caller's own connection: used, left open
            return
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        if address:
            why = _answers(address, CONNECT_TIMEOUT_S)
            if why is not None:
                raise RayExecutorError(f"no Ray cluster answers at {address} ({why}); start one (`ray start --head`) "
                               "or leave out --ray-address for a local instance")  # fmt: skip
        main_thread = threading.current_thread() is threading.main_thread()
        sigterm = signal.getsignal(signal.SIGTERM) if main_thread else None
        try:
            if address:
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
            else:
                with _environment_for_ray():
                    ray.init(address="local", num_cpus=num_cpus or cpu_cores(),
                             num_gpus=visible_gpus() if num_gpus is None else num_gpus, include_dashboard=False,
                             logging_level=logging.ERROR, log_to_driver=False)  # fmt: skip
        except Exception as e:  # ConnectionError, ValueError (a bad address), RuntimeError, ...
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise RayExecutorError(f"could not use {where}: {first}") from None
        finally:
            if main_thread:  # ray.init installs a SIGTERM handler of its own (sys.exit); the caller's stays
                signal.signal(signal.SIGTERM, sigterm)
        self._owns = True
        log.info("Ray: %s, resources %s", where, self.resources())

    # -- the cluster -----------------------------------------------------------------------------------
    def resources(self) -> dict[str, float]:
        """The cluster's total resources ("CPU", "GPU", ...), as Ray counts them now."""
        return dict(self.ray.cluster_resources())

    def gpus(self) -> int:
        """Whole GPUs in the cluster."""
        return int(self.resources().get("GPU", 0))

    def probe(self, on_gpu: bool) -> dict[str, Any]:
        """Run one task (on a GPU when `on_gpu`) and return what the worker says (`_probe`: digest, host,
        gpu_name, arch); done once per kind. RayExecutorError: the worker's evaluator differs from this one, or
        no worker ran it within `PROBE_TIMEOUT_S`, or the worker could not import kb_agent."""
        if on_gpu in self._probes:
            return self._probes[on_gpu]
        ref = self._probe.options(**task_options("evaluate", "cuda" if on_gpu else "cpu")).remote(on_gpu)
        try:
            info = self.ray.get(ref, timeout=PROBE_TIMEOUT_S)
        except self.ray.exceptions.GetTimeoutError:
            self.ray.cancel(ref, force=True)
            raise RayExecutorError(f"no Ray worker{' with a GPU' if on_gpu else ''} started within {PROBE_TIMEOUT_S:g} s; "
                           f"the cluster is busy or short of resources ({self.resources()})") from None  # fmt: skip
        except self.ray.exceptions.RayError as e:
            first = (str(e).strip().splitlines() or [""])[-1]
            raise RayExecutorError(f"a Ray worker could not run kb-agent's evaluator ({first}); install this version "
                           "of kb-agent on every node") from None  # fmt: skip
        if info["digest"] != evaluator_digest():
            raise RayExecutorError(f"the Ray workers on {info['host']} run another evaluator (sources {info['digest']}, "
                           f"{evaluator_digest()} here); install this checkout of kb-agent on every node")  # fmt: skip
        self._probes[on_gpu] = info
        return info

    def gpu_target(self) -> dict[str, str]:
        """{"gpu_name", "arch"} of a GPU of the cluster (the one the probe ran on), for the task prompt."""
        info = self.probe(on_gpu=True)
        return {"gpu_name": info["gpu_name"], "arch": info["arch"]}

    def pool(self, settings: EvalSettings | None = None, *, per_gpu: int = 1) -> RayPool:
        """An `EvalPool` whose jobs are tasks of this cluster (`RayPool`)."""
        return RayPool(settings, executor=self, per_gpu=per_gpu)

    def checker(self, jobs: int, device: str) -> Callable[[Problem, EvalSettings], dict[str, Any]]:
        """A `check` for `agent.checks.check_problems` with `jobs` checks at once on `device`: each a task
        holding 1/ceil(jobs / GPUs) of a GPU (checks time nothing), or one CPU on the CPU device.
        RayExecutorError as `RayPool` raises it."""
        if device.startswith("cuda"):
            self._require_gpus()
        self.probe(on_gpu=False)
        share = 1.0 / -(-jobs // max(1, self.gpus()))

        def check(problem: Problem, settings: EvalSettings) -> dict[str, Any]:
            return self.run_job(EvalJob(problem, "", settings, kind="check_problem"), gpu_share=share)

        return check

    def _require_gpus(self) -> None:
        if self.gpus() < 1:
            raise RayExecutorError(f"the Ray cluster has no GPU ({self.resources()}); add GPU nodes, or evaluate "
                           "on the CPU (--device cpu)")  # fmt: skip

    # -- jobs ------------------------------------------------------------------------------------------
    def run_job(self, job: EvalJob, gpu_share: float = 1.0) -> Any:
        """Run `job` as one Ray task and wait for it; return what `pool.run_job` returns for it (an
        `EvalResult`, or a check's dict). A CUDA job runs on the GPU Ray gives it (`cuda:0` in the task).

        Raises:
            KeyboardInterrupt: `kill_running` cancelled it, or the wait was interrupted (the task is cancelled).
            RayExecutorError: Ray lost the task (its worker or node died, twice).
            The job's own exception, when the job raised in the worker (a bug, as with a local pool).
        """
        out = self._call(self._task, job, task_options(job.kind, job.settings.device, gpu_share))
        return EvalResult.from_dict(out["eval_result"]) if "eval_result" in out else out["dict"]

    def run_phases(self, job: EvalJob, slots: Slots, gpu_share: float = 1.0) -> Any:
        """Run `job` holding `slots` as the local pool does (the module docstring's "Two phases"): an
        evaluation the runner splits as a CPU build task on a build slot, then a GPU run task on the run
        slot, on one node; any other job as one task (`run_job`) on the run slot. The result's stages
        hold the seconds waited for each slot ("build_wait", "run_wait"), as a local pool's do.

        Raises:
            KeyboardInterrupt: `kill_running` was called while the job waited between its two tasks (no
                run task starts), or as `run_job` says.
            RayExecutorError: as `run_job` says.
        """
        waits: dict[str, float] = {}
        if not self._splits(job):
            with taken(slots.run(), waits, "run_wait"):
                return _with_waits(self.run_job(job, gpu_share), waits)
        kills = self._kills
        node = self._pick_node()  # None: Ray's own placement (one node)
        try:
            with taken(slots.build(), waits, "build_wait"):
                out = self._call(self._build, job, task_options("build", job.settings.device), node)
            with self._lock:
                self._built.add(_source_key(job.source))
            if out["built"] is None:  # built before, on that node: the runner evaluates it in one child
                with taken(slots.run(), waits, "run_wait"):
                    return _with_waits(self.run_job(job, gpu_share), waits)
            built = BuildPhase.from_dict(out["built"])
            if built.ended:
                return _with_waits(built.result, waits)
            with taken(slots.run(), waits, "run_wait"):
                if self._kills != kills:  # an interrupt while this job waited: as a local pool, no run child
                    raise KeyboardInterrupt
                options = task_options(job.kind, job.settings.device, gpu_share)
                out = self._call(self._after_build, job, options, node, out["built"])
            return _with_waits(EvalResult.from_dict(out["eval_result"]), waits)
        finally:
            if node is not None:
                with self._lock:
                    self._node_load[node] -= 1

    def _splits(self, job: EvalJob) -> bool:
        """Whether `job` is an evaluation the runner may split in a build and a run child
        (`runner.build_plan`; the build task finds out whether it was built before), worth a task of
        its own: not a re-timing (of a winner, built when it was evaluated), nor a source this executor
        built before, nor one whose builds are not kept (`reuse_builds` off: `runner.evaluate_build`)."""
        from kb_agent.evaluator.build import detect_backend

        if job.kind != "evaluate" or not job.settings.reuse_builds:
            return False
        with self._lock:
            if _source_key(job.source) in self._built:
                return False
        if job.settings.split_build is not None:
            return job.settings.split_build
        return job.settings.device.startswith("cuda") and detect_backend(job.source) == "cuda"

    def _pick_node(self) -> str | None:
        """The node both phases of an evaluation run on: of the live nodes with a GPU, the one with the
        fewest of this executor's evaluations in flight, counted until `run_phases` ends; None on a
        cluster of one node (Ray places both tasks on it) or where Ray does not list its nodes."""
        try:
            alive = [n for n in self.ray.nodes() if n.get("Alive")]
        except Exception:  # noqa: BLE001 - a Ray without the call, or a broken connection: no pinning
            return None
        nodes = [n["NodeID"] for n in alive if n.get("Resources", {}).get("GPU", 0) >= 1]
        if len(alive) < 2 or not nodes:
            return None
        with self._lock:
            node = min(nodes, key=lambda n: self._node_load.get(n, 0))
            self._node_load[node] = self._node_load.get(node, 0) + 1
        return node

    def _call(
        self, remote: Any, job: EvalJob, options: dict[str, Any], node: str | None = None, *more: Any
    ) -> Any:
        """Run `remote(payload, *more)` as a task with `options` (on `node`, when given) and wait for it;
        `run_job` says what it raises."""
        settings = job.settings
        if settings.device.startswith("cuda"):
            settings = dataclasses.replace(settings, device="cuda:0")
        payload = {"problem": job.problem.to_dict(), "source": job.source, "settings": settings.to_dict(),
                   "kind": job.kind}  # fmt: skip
        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options = {
                **options,
                "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node, soft=False),
            }
        ref = remote.options(**options).remote(payload, *more)
        with self._lock:
            self._live[ref] = None
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as e:  # cancelled, the job raised, or the worker or its node died
            with self._lock:
                cancelled = self._live.get(ref) is not None
            if cancelled:
                raise KeyboardInterrupt from None
            if isinstance(e, self.ray.exceptions.RayTaskError) and not isinstance(
                e, self.ray.exceptions.TaskCancelledError
            ):
                raise  # the job itself raised in the worker: a bug, as with a local pool
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise RayExecutorError(f"Ray lost the evaluation of {job.problem.key} ({type(e).__name__}: {first}); "
                                   "`solve --resume` evaluates it again") from None  # fmt: skip
        except BaseException:  # Ctrl-C in this thread: stop the task too
            with contextlib.suppress(Exception):
                self.ray.cancel(ref)
            raise
        finally:
            with self._lock:
                self._live.pop(ref, None)

    def kill_running(self) -> int:
        """Cancel every task in flight (an interrupt; called again, kill the workers of those cancelled
        `FORCE_AFTER_S` ago); their waiting threads raise KeyboardInterrupt. Returns how many are in flight."""
        now = time.monotonic()
        with self._lock:
            self._kills += 1
            live = list(self._live.items())
            for ref, since in live:
                if since is None:
                    self._live[ref] = now
        for ref, since in live:
            if since is None or now - since > FORCE_AFTER_S:
                with contextlib.suppress(Exception):  # already finished, or Ray is going away
                    self.ray.cancel(ref, force=since is not None)
        return len(live)

    def close(self) -> None:
        """Kill the tasks still in flight and, when this executor connected or started Ray, disconnect
        (a local instance stops with it)."""
        with self._lock:
            live = list(self._live)
        for ref in live:
            with contextlib.suppress(Exception):
                self.ray.cancel(ref, force=True)
        if self._owns:
            self._owns = False
            self.ray.shutdown()

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RayPool(EvalPool):
    """An `EvalPool` whose jobs run as tasks of `executor`'s cluster: the same interface (`run`, `submit`,
    `evaluate`, `retime`, `slots`, `gpu_busy`, `waiting`, `kill_running`) and the same results.

    Slots: on a CUDA device (any "cuda" or "cuda:N": the cluster picks the GPU) one per GPU of the
    cluster times `per_gpu`; on the CPU one per CPU of the cluster. A slot's name and device are the
    pool's own bookkeeping ("gpu0", "cuda:0"), not a particular GPU of the cluster. `gpu_busy` counts the
    time slots were held, which includes a task's start (about a second for a fresh worker).

    Raises:
        RayExecutorError: a CUDA device and no GPU in the cluster; or the first task (`RayExecutor.probe`) fails.
    """

    def __init__(self, settings: EvalSettings | None = None, *, executor: RayExecutor, per_gpu: int = 1):
        settings = settings or EvalSettings()
        self.executor = executor
        on_gpu = settings.device.startswith("cuda")
        if on_gpu:
            executor._require_gpus()
        executor.probe(on_gpu=False)
        share = 1.0 / per_gpu
        cpus = int(executor.resources().get("CPU", 1))
        slots = (
            dict(gpus=executor.gpus(), build_slots=max(1, (cpus - executor.gpus()) // 2))
            if on_gpu
            else dict(cpu_slots=cpus, build_slots=max(1, cpus // 2))
        )
        pool_settings = dataclasses.replace(settings, device="cuda") if on_gpu else settings
        super().__init__(
            pool_settings,
            per_gpu=per_gpu,
            gpu_cores=0,  # the cluster's CPUs are Ray's to place: nothing pinned here
            run_phases=lambda job, slots: executor.run_phases(job, slots, share),
            **slots,
        )

    def kill_running(self) -> int:
        """Cancel the tasks in flight (`RayExecutor.kill_running`); return how many."""
        return self.executor.kill_running()


__all__ = [
    "CONNECT_TIMEOUT_S",
    "FORCE_AFTER_S",
    "GPU_KINDS",
    "INSTALL_HINT",
    "PROBE_TIMEOUT_S",
    "RayExecutorError",
    "RayExecutor",
    "RayPool",
    "evaluator_digest",
    "import_ray",
    "task_options",
]
