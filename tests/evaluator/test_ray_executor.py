"""The Ray executor (`evaluator.ray_executor`): jobs as Ray tasks behind the EvalPool interface.

Default run: a fake `ray` module stands in for Ray (what each task asks for, the job and result as dicts,
the device a CUDA job gets, an interrupt, a lost worker, Ray missing, a dead address). Slow set, when Ray
is installed: a local Ray instance evaluates Triton candidates under the interpreter and gives the local
pool's verdicts; the workers see no secret of the driver's; an interrupt kills the evaluation's child.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from kb_agent.evaluator import ray_executor
from kb_agent.evaluator.pool import EvalJob, EvalPool
from kb_agent.evaluator.ray_executor import RayExecutor, RayExecutorError, RayPool, task_options
from kb_agent.evaluator.result import EvalResult, Status
from kb_agent.evaluator.settings import EvalSettings
from kb_agent.problems import resolve_one

RELU = resolve_one("toy/relu")
CANDIDATES = Path(__file__).resolve().parents[1] / "candidates"


# -- a fake ray module ---------------------------------------------------------------------------------
class _Exceptions:
    class RayError(Exception):
        pass

    class RayTaskError(RayError):
        pass

    class TaskCancelledError(RayError):
        pass

    class GetTimeoutError(RayError):
        pass

    class WorkerCrashedError(RayError):
        pass


class FakeRef:
    """A task running `fn(*args)` on a thread; `cancel` makes `get` raise TaskCancelledError."""

    def __init__(self, fn, args, options):
        self.options, self.args, self.done, self.cancelled = options, args, threading.Event(), False
        self.value: object = None
        self.error: BaseException | None = None

        def run():
            try:
                self.value = fn(*args)
            except BaseException as e:
                self.error = e
            self.done.set()

        threading.Thread(target=run, daemon=True).start()


class FakeRemote:
    def __init__(self, ray, fn, options):
        self.ray, self.fn, self.opts = ray, fn, options

    def options(self, **more):
        return FakeRemote(self.ray, self.fn, {**self.opts, **more})

    def remote(self, *args):
        ref = FakeRef(self.ray.behaviour.get(self.fn.__name__, self.fn), args, self.opts)
        ref.name = self.fn.__name__
        self.ray.tasks.append(ref)
        return ref


class FakeRay:
    exceptions = _Exceptions

    def __init__(self, resources: dict[str, float]):
        self._resources, self.inits, self.tasks, self.shutdowns = resources, [], [], 0
        self.behaviour: dict = {}  # function name -> replacement, to make a task hang or crash

    def is_initialized(self):
        return bool(self.inits) and not self.shutdowns

    def init(self, **kw):
        self.inits.append({**kw, "env": dict(os.environ)})

    def shutdown(self):
        self.shutdowns += 1

    def cluster_resources(self):
        return self._resources

    def remote(self, **options):
        return lambda fn: FakeRemote(self, fn, options)

    def get(self, ref, timeout=None):
        while not ref.done.wait(0.01):
            if ref.cancelled:
                raise _Exceptions.TaskCancelledError("cancelled")
        if ref.cancelled:
            raise _Exceptions.TaskCancelledError("cancelled")
        if ref.error is not None:
            raise ref.error
        return ref.value

    def cancel(self, ref, force=False):
        ref.cancelled = True
        ref.force = force


@pytest.fixture
def fake_ray(monkeypatch):
    def make(resources):
        ray = FakeRay(resources)
        monkeypatch.setattr(ray_executor, "import_ray", lambda: ray)
        return ray

    return make


def raising(error: BaseException):
    def task(*args):
        raise error

    return task


def _canned_job(monkeypatch, seen: list):
    """`pool.run_job` (what the task body calls in the worker) replaced: records the job, returns a result."""

    def run_job(job: EvalJob):
        seen.append(job)
        return EvalResult(status=Status.CORRECT, device=job.settings.device, speedup=1.5)

    monkeypatch.setattr("kb_agent.evaluator.pool.run_job", run_job)


# -- default run: the fake --------------------------------------------------------------------------------
def test_resources_per_job_gpu_jobs_on_cuda_get_a_gpu_anything_else_a_cpu():
    assert task_options("evaluate", "cuda") == {"num_cpus": 1, "num_gpus": 1.0}
    assert task_options("retime", "cuda:3") == {"num_cpus": 1, "num_gpus": 1.0}
    assert task_options("check_problem", "cuda", 0.25) == {"num_cpus": 1, "num_gpus": 0.25}
    assert task_options("build", "cuda") == {"num_cpus": 1, "num_gpus": 0}  # a build job: a CPU task
    assert task_options("evaluate", "cpu") == {"num_cpus": 1, "num_gpus": 0}


def test_a_cuda_pool_has_one_slot_per_cluster_gpu_and_each_job_runs_on_the_gpu_ray_gives(
    fake_ray, monkeypatch
):
    ray = fake_ray({"CPU": 64.0, "GPU": 4.0})
    seen: list[EvalJob] = []
    _canned_job(monkeypatch, seen)
    with RayExecutor(num_cpus=8, num_gpus=4) as ex:
        pool = ex.pool(EvalSettings(device="cuda"))
        assert isinstance(pool, EvalPool) and pool.size == 4 and pool.on_gpu
        futures = [pool.submit(EvalJob(RELU, f"src{i}", pool.settings)) for i in range(6)]
        results = [f.result(timeout=10) for f in futures]
        retimed = pool.retime(RELU, "src")
    assert ray.inits[0]["address"] == "local" and ray.inits[0]["num_gpus"] == 4
    assert ray.shutdowns == 1  # the local instance it started is stopped
    assert all(isinstance(r, EvalResult) and r.status == Status.CORRECT and r.speedup == 1.5 for r in results)
    assert {j.settings.device for j in seen} == {"cuda:0"}  # Ray's CUDA_VISIBLE_DEVICES: its GPU is cuda:0
    assert sorted(j.source for j in seen) == sorted([f"src{i}" for i in range(6)] + ["src"])
    assert retimed.status == Status.CORRECT
    jobs = [t for t in ray.tasks if t.options.get("num_gpus")]
    assert len(jobs) == 7 and all(t.options == {"max_calls": 1, "max_retries": 1, "num_cpus": 1, "num_gpus": 1.0}
                                  for t in jobs)  # fmt: skip
    assert sum(s.done for s in pool.slots()) == 7 and 0 <= pool.gpu_busy() <= 1


def test_a_cuda_build_is_a_cpu_task_on_a_build_slot_and_its_run_a_gpu_task(fake_ray, monkeypatch):
    # on one H100 node, every build holding the GPU's slot made a sweep 3x the local pool's wall time
    from kb_agent.evaluator.runner import BuildPhase

    ray = fake_ray({"CPU": 16.0, "GPU": 1.0})
    calls: list = []

    def evaluate_build(problem, source, settings):
        calls.append(("build", source, settings.device, settings.repro_timing))
        if "built before" in source:
            return None
        status = Status.COMPILE_ERROR if "typo" in source else Status.RUNTIME_ERROR
        return BuildPhase(EvalResult(status=status, stages={"build": 9.0}), "typo" in source, "/w", 9.0)

    def evaluate_run(problem, source, settings, built):
        calls.append(("run", source, settings.device, settings.repro_timing))
        return EvalResult(status=Status.CORRECT, stages={**built.result.stages, "run_load": 0.5})

    monkeypatch.setattr("kb_agent.evaluator.runner.evaluate_build", evaluate_build)
    monkeypatch.setattr("kb_agent.evaluator.runner.evaluate_run", evaluate_run)
    _canned_job(monkeypatch, seen := [])
    cuda = "from torch.utils.cpp_extension import load_inline  # "
    with RayExecutor() as ex:
        pool = ex.pool(EvalSettings(device="cuda"))
        assert pool.size == 1 and pool.build_size == 7  # (16 CPUs - 1 GPU) // 2: every GPU task finds a CPU
        ok = pool.evaluate(RELU, cuda + "new")
        typo = pool.evaluate(RELU, cuda + "typo")
        cached = pool.evaluate(RELU, cuda + "built before")
        retimed = pool.retime(RELU, cuda + "new")  # a winner's re-timing: built when it was evaluated
        again = pool.evaluate(RELU, cuda + "new")  # built by this executor before: one task
        kept_nothing = pool.run(
            EvalJob(RELU, cuda + "other", EvalSettings(device="cuda", reuse_builds=False))
        )
        triton = pool.evaluate(RELU, "import triton")
    assert ok.status == Status.CORRECT and ok.stages["build"] == 9.0 and ok.stages["run_load"] == 0.5
    assert {"build_wait", "run_wait"} <= set(ok.stages) and "run_wait" in triton.stages  # as a local pool's
    assert typo.status == Status.COMPILE_ERROR and "build_wait" in typo.stages
    assert all(r.status == Status.CORRECT for r in (cached, retimed, again, kept_nothing, triton))
    assert calls == [("build", cuda + "new", "cuda:0", None), ("run", cuda + "new", "cuda:0", None),
                     ("build", cuda + "typo", "cuda:0", None), ("build", cuda + "built before", "cuda:0", None)]  # fmt: skip
    assert [(j.source, j.kind) for j in seen] == [(cuda + "built before", "evaluate"), (cuda + "new", "retime"),
                                                  (cuda + "new", "evaluate"), (cuda + "other", "evaluate"),
                                                  ("import triton", "evaluate")]  # one task each  # fmt: skip
    tasks = [(t.name, t.options["num_gpus"]) for t in ray.tasks if t.name != "_probe"]
    assert tasks == [("_build_task", 0), ("_run_after_build_task", 1.0), ("_build_task", 0), ("_build_task", 0),
                     *[("_run_task", 1.0)] * 5]  # fmt: skip
    assert sum(s.done for s in pool.slots() if s.kind == "build") == 3


def test_an_interrupt_between_the_build_task_and_the_run_task_starts_no_run_task(fake_ray, monkeypatch):
    # as the local pool: "an evaluation between its build and run children then starts no run child"
    from kb_agent.evaluator.runner import BuildPhase

    ray = fake_ray({"CPU": 4.0, "GPU": 1.0})
    release, built = threading.Event(), threading.Event()
    monkeypatch.setattr("kb_agent.evaluator.runner.evaluate_build",
                        lambda *a: built.set() or BuildPhase(EvalResult(status=Status.RUNTIME_ERROR), False, "", 1.0))  # fmt: skip
    monkeypatch.setattr("kb_agent.evaluator.pool.run_job", lambda job: release.wait(10))
    cuda = "load_inline  # "
    with RayExecutor() as ex:
        pool = ex.pool(EvalSettings(device="cuda"))
        holding = pool.submit(EvalJob(RELU, "import triton", pool.settings))  # holds the one GPU's run slot
        waiting = pool.submit(EvalJob(RELU, cuda + "built, waits for the GPU", pool.settings))
        assert built.wait(5)
        time.sleep(0.2)
        assert pool.kill_running() == 1  # the run task of the first
        release.set()
        for f in (holding, waiting):
            with pytest.raises(KeyboardInterrupt):
                f.result(timeout=5)
    # the first job's run task and the second's build task, submitted from two threads in either order;
    # no second run task
    assert sorted(t.name for t in ray.tasks if t.name != "_probe") == ["_build_task", "_run_task"]


def test_a_cpu_pool_has_a_slot_per_cluster_cpu(fake_ray, monkeypatch):
    fake_ray({"CPU": 3.0})
    _canned_job(monkeypatch, [])
    with RayExecutor() as ex:
        pool = ex.pool(EvalSettings(device="cpu", backend="triton"))
        assert pool.size == 3 and not pool.on_gpu and pool.gpu_busy() is None
        assert pool.evaluate(RELU, "src").status == Status.CORRECT


def test_a_cuda_device_on_a_cluster_without_gpus_is_refused_in_one_line(fake_ray):
    fake_ray({"CPU": 2.0})
    with RayExecutor() as ex, pytest.raises(RayExecutorError, match="no GPU.*--device cpu"):
        ex.pool(EvalSettings(device="cuda"))


def test_workers_with_another_evaluator_are_refused(fake_ray):
    ray = fake_ray({"CPU": 2.0})
    ray.behaviour["_probe"] = lambda on_gpu: {"digest": "0" * 16, "host": "node-7"}
    with RayExecutor() as ex, pytest.raises(RayExecutorError, match="node-7 run another evaluator"):
        ex.pool(EvalSettings(device="cpu"))


def test_an_interrupt_cancels_the_tasks_and_their_threads_raise_keyboard_interrupt(fake_ray, monkeypatch):
    ray = fake_ray({"CPU": 2.0})
    release = threading.Event()
    monkeypatch.setattr("kb_agent.evaluator.pool.run_job", lambda job: release.wait(10))
    with RayExecutor() as ex:
        pool = ex.pool(EvalSettings(device="cpu"))
        futures = [pool.submit(EvalJob(RELU, "x", pool.settings)) for _ in range(2)]
        deadline = time.monotonic() + 5
        while len(ex._live) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.kill_running() == 2
        for f in futures:
            with pytest.raises(KeyboardInterrupt):
                f.result(timeout=5)
        release.set()
    assert [getattr(t, "force", None) for t in ray.tasks[-2:]] == [False, False]  # Ray raises in the worker


def test_a_task_ray_lost_is_one_line_and_a_bug_in_the_job_keeps_its_type(fake_ray, monkeypatch):
    ray = fake_ray({"CPU": 2.0})
    with RayExecutor() as ex:
        pool = ex.pool(EvalSettings(device="cpu"))
        ray.behaviour["_run_task"] = raising(_Exceptions.WorkerCrashedError("the worker died"))
        with pytest.raises(RayExecutorError, match=r"Ray lost the evaluation of toy/relu .*--resume"):
            pool.evaluate(RELU, "x")

        class Bug(_Exceptions.RayTaskError, ZeroDivisionError):  # how Ray raises a task's own exception
            pass

        ray.behaviour["_run_task"] = raising(Bug("1/0"))
        with pytest.raises(ZeroDivisionError):
            pool.evaluate(RELU, "x")
        assert sum(s.done for s in pool.slots()) == 2 and pool.waiting() == 0  # the slots were freed


def test_the_task_body_rebuilds_the_job_and_returns_the_result_as_a_dict(monkeypatch):
    seen: list[EvalJob] = []
    _canned_job(monkeypatch, seen)
    settings = EvalSettings(device="cuda:0", precision="bf16")
    out = ray_executor._run_task({"problem": RELU.to_dict(), "source": "src", "settings": settings.to_dict(),
                                  "kind": "retime"})  # fmt: skip
    assert EvalResult.from_dict(out["eval_result"]).speedup == 1.5
    (job,) = seen
    assert job.problem == RELU and job.settings == settings and job.kind == "retime"


def test_the_local_instance_starts_without_the_drivers_secrets_and_without_usage_statistics(
    fake_ray, monkeypatch
):
    ray = fake_ray({"CPU": 2.0})
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-workers")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "ray-keeps-its-own")
    monkeypatch.delenv("RAY_USAGE_STATS_ENABLED", raising=False)
    with RayExecutor():
        pass
    env = ray.inits[0]["env"]
    assert "OPENAI_API_KEY" not in env and env["RAY_AUTH_TOKEN"] == "ray-keeps-its-own"
    assert env["RAY_USAGE_STATS_ENABLED"] == "0"
    assert (
        os.environ["OPENAI_API_KEY"] == "sk-not-for-workers" and "RAY_USAGE_STATS_ENABLED" not in os.environ
    )


def test_a_dead_address_is_one_line_within_seconds_and_ray_is_never_asked(fake_ray):
    ray = fake_ray({"CPU": 2.0})
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(RayExecutorError, match=rf"no Ray cluster answers at 127.0.0.1:{port}"):
        RayExecutor(f"127.0.0.1:{port}")
    assert time.monotonic() - t0 < ray_executor.CONNECT_TIMEOUT_S + 1 and not ray.inits


def test_ray_missing_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(RayExecutorError, match=r'pip install "kb-agent\[ray\]"'):
        ray_executor.import_ray()


def test_a_checker_shares_a_gpu_between_checks(fake_ray, monkeypatch):
    ray = fake_ray({"CPU": 8.0, "GPU": 2.0})
    monkeypatch.setattr("kb_agent.evaluator.pool.run_job", lambda job: {"status": "ok", "kind": job.kind})
    with RayExecutor() as ex:
        check = ex.checker(jobs=8, device="cuda")
        assert check(RELU, EvalSettings(device="cuda:0")) == {"status": "ok", "kind": "check_problem"}
    assert ray.tasks[-1].options["num_gpus"] == 0.25  # 8 checks on 2 GPUs: 4 to a GPU


# -- slow set: a real local Ray instance ---------------------------------------------------------------------
SECRET = "KB_TEST_RAY_API_KEY"


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance (2 CPUs) for the tests below, started while the driver holds a secret."""
    pytest.importorskip("ray")
    os.environ[SECRET] = "not-for-workers"
    try:
        ex = RayExecutor(num_cpus=2, num_gpus=0)
    finally:
        del os.environ[SECRET]
    yield ex
    ex.close()


VERDICTS = ["triton_relu.py", "triton_relu_off_by_one.py", "triton_compile_error.py", "raises.py"]


@pytest.mark.slow  # a Ray instance and eight evaluations under the Triton interpreter
def test_a_local_ray_instance_gives_the_local_pools_verdicts(local_ray):
    settings = EvalSettings(device="cpu", backend="triton")
    sources = [(CANDIDATES / name).read_text() for name in VERDICTS]
    pool = local_ray.pool(settings)
    assert isinstance(pool, RayPool) and pool.size == 2
    on_ray = [f.result(timeout=300) for f in [pool.submit(EvalJob(RELU, s, settings)) for s in sources]]
    local = EvalPool(settings, cpu_slots=2)
    here = [f.result(timeout=300) for f in [local.submit(EvalJob(RELU, s, settings)) for s in sources]]
    assert [r.status for r in on_ray] == [r.status for r in here]
    assert [r.status for r in on_ray] == [Status.CORRECT, Status.INCORRECT, Status.COMPILE_ERROR,
                                          Status.RUNTIME_ERROR]  # fmt: skip
    for a, b in zip(on_ray, here, strict=True):
        assert a.device == b.device == "cpu" and a.backend == b.backend
        assert a.correctness.passed == b.correctness.passed and a.compile.ok == b.compile.ok
    assert sum(s.done for s in pool.slots()) == 4


@pytest.mark.slow  # a Ray instance and six split evaluations under the Triton interpreter
def test_split_evaluations_on_a_local_ray_instance_build_in_one_task_and_run_in_another(local_ray):
    settings = EvalSettings(device="cpu", backend="triton", split_build=True, timed_trials=10)
    sources = [(CANDIDATES / name).read_text() for name in ("triton_relu.py", "syntax_error.py", "raises.py")]
    pool = local_ray.pool(settings)
    assert pool.build_size == 1
    on_ray = [f.result(timeout=300) for f in [pool.submit(EvalJob(RELU, s, settings)) for s in sources]]
    here = [EvalPool(settings, cpu_slots=2).evaluate(RELU, s) for s in sources]
    assert [r.status for r in on_ray] == [r.status for r in here] == [Status.CORRECT, Status.COMPILE_ERROR,
                                                                       Status.RUNTIME_ERROR]  # fmt: skip
    assert [r.message for r in on_ray[1:]] == [r.message for r in here[1:]]
    assert {"build", "run_load", "correctness", "timing"} <= set(on_ray[0].stages)  # one child each phase
    assert "run_load" not in on_ray[1].stages  # the compile error ended it in the build task
    assert sum(s.done for s in pool.slots() if s.kind == "build") == 3


@pytest.mark.slow  # a Ray worker
def test_ray_workers_of_the_local_instance_see_no_secret_of_the_drivers(local_ray):
    ray = local_ray.ray
    names = ray.get(ray.remote(lambda: sorted(os.environ)).remote())
    assert SECRET not in names and "RAY_RAYLET_PID" in names


@pytest.mark.slow  # a hanging candidate on a Ray worker, interrupted
def test_an_interrupt_kills_the_evaluation_child_on_the_worker(local_ray):
    from kb_agent.evaluator.procs import process_table

    def below_task_workers() -> set[int]:
        """Every process below a Ray worker running `_run_task` (the evaluation's children)."""
        table = process_table()
        frontier = {p for p in table if _cmdline(p).startswith(b"ray::_run_task")}
        found: set[int] = set()
        while frontier:
            frontier = {p for p, (ppid, _, _) in table.items() if ppid in frontier} - found
            found |= frontier
        return found

    pool = local_ray.pool(EvalSettings(device="cpu", backend="triton"))
    future = pool.submit(EvalJob(RELU, (CANDIDATES / "hangs.py").read_text(), pool.settings))
    deadline = time.monotonic() + 120
    while not below_task_workers() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # the child is into the candidate's endless loop
    children = below_task_workers()
    assert children and not future.done(), "the evaluation never started"
    assert pool.kill_running() == 1
    with pytest.raises(KeyboardInterrupt):
        future.result(timeout=30)
    deadline = time.monotonic() + 15
    while _alive(children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(children)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pids: set[int]) -> set[int]:
    """The pids of `pids` still running (zombies count as gone)."""
    out = set()
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] != "Z":
            out.add(pid)
    return out


# -- GPU: a local Ray instance with this machine's GPUs (the H200 check) --------------------------------------
@pytest.mark.gpu
@pytest.mark.slow  # a Ray instance, a GPU probe and four CUDA/Triton evaluations (nvcc builds)
def test_on_a_gpu_ray_tasks_take_one_gpu_each_and_give_the_local_pools_verdicts():
    pytest.importorskip("ray")
    settings = EvalSettings(device="cuda")
    sources = [
        (CANDIDATES / name).read_text()
        for name in ("cuda_relu.py", "triton_relu.py", "triton_relu_off_by_one.py")
    ]
    with RayExecutor() as ex:
        target = ex.gpu_target()
        pool = ex.pool(settings)
        assert pool.size == ex.gpus() >= 1 and pool.on_gpu
        on_ray = [f.result(timeout=600) for f in [pool.submit(EvalJob(RELU, s, settings)) for s in sources]]
        busy = pool.gpu_busy()
    here = [EvalPool(settings).evaluate(RELU, s) for s in sources]
    assert (
        [r.status for r in on_ray]
        == [r.status for r in here]
        == [Status.CORRECT, Status.CORRECT, Status.INCORRECT]
    )
    for a, b in zip(on_ray, here, strict=True):
        assert a.device == "cuda:0" and a.hardware.gpu_name == b.hardware.gpu_name == target["gpu_name"]
        assert a.hardware.compute_capability == b.hardware.compute_capability
    assert on_ray[0].speedup > 0 and 0 < busy <= 1
    print(f"\nRay on {target}: speedups {[r.speedup for r in on_ray[:2]]} (local {[r.speedup for r in here[:2]]}), "
          f"gpu_busy {busy:.2f}")  # fmt: skip
