"""The evaluation pool: slots per visible GPU (fake devices through CUDA_VISIBLE_DEVICES) or per core,
one job per slot at a time, first come first served; a fake executor records where and when each job ran."""

import threading
import time

import pytest
from kb_agent.evaluator.pool import EvalJob, EvalPool, visible_gpus
from kb_agent.evaluator.result import EvalResult, Status
from kb_agent.evaluator.settings import EvalSettings
from kb_agent.problems import resolve

RELU = resolve("toy")[0]


class Recorder:
    """A fake executor: sleeps `seconds`, records (device, start, end, tag) and returns a correct result."""

    def __init__(self, seconds: float = 0.15):
        self.seconds = seconds
        self.runs: list[tuple[str, float, float, str]] = []
        self.lock = threading.Lock()

    def __call__(self, job: EvalJob) -> EvalResult:
        t0 = time.monotonic()
        time.sleep(self.seconds)
        with self.lock:
            self.runs.append((job.settings.device, t0, time.monotonic(), job.source))
        return EvalResult(status=Status.CORRECT, device=job.settings.device)


def most_at_once(runs, device=None) -> int:
    """The largest number of runs (on `device`, or any) overlapping in time."""
    spans = [(a, b) for d, a, b, _ in runs if device is None or d == device]
    return max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)


def run_many(pool: EvalPool, n: int) -> list:
    futures = [pool.submit(EvalJob(RELU, f"job{i}", pool.settings)) for i in range(n)]
    return [f.result(timeout=30) for f in futures]


@pytest.mark.parametrize(
    ("env", "n"), [("0,1,2", 3), ("3", 1), ("", 0), ("-1", 0), ("0,-1,2", 1), ("GPU-ab,GPU-cd", 2)]
)
def test_visible_gpus_reads_cuda_visible_devices(monkeypatch, env, n):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    assert visible_gpus() == n


def test_one_gpu_slot_per_visible_gpu_and_one_job_per_gpu_at_a_time(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    rec = Recorder()
    pool = EvalPool(EvalSettings(device="cuda"), run_job=rec)
    assert pool.size == 3 and pool.on_gpu and [s.name for s in pool.slots()] == ["gpu0", "gpu1", "gpu2"]
    results = run_many(pool, 9)
    assert {r.device for r in results} == {"cuda:0", "cuda:1", "cuda:2"}  # each job ran on its slot's GPU
    for d in ("cuda:0", "cuda:1", "cuda:2"):
        assert most_at_once(rec.runs, d) == 1  # timing never shares a GPU
    assert most_at_once(rec.runs) == 3
    assert sum(s.done for s in pool.slots()) == 9


def test_a_named_gpu_is_one_slot_and_a_cpu_pool_has_cpu_slots():
    rec = Recorder()
    pool = EvalPool(EvalSettings(device="cuda:1"), gpus=4, run_job=rec)
    assert pool.size == 1 and {r.device for r in run_many(pool, 3)} == {"cuda:1"}
    cpu = EvalPool(EvalSettings(device="cpu"), cpu_slots=2, run_job=rec)
    assert cpu.size == 2 and not cpu.on_gpu and cpu.gpu_busy() is None
    rec.runs.clear()
    run_many(cpu, 6)
    assert most_at_once(rec.runs) == 2 and {d for d, *_ in rec.runs} == {"cpu"}


def test_per_gpu_lets_jobs_share_a_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    rec = Recorder()
    pool = EvalPool(EvalSettings(device="cuda"), per_gpu=3, run_job=rec)
    run_many(pool, 6)
    assert pool.size == 3 and most_at_once(rec.runs, "cuda:0") == 3


def test_jobs_wait_for_a_slot_first_come_first_served():
    rec = Recorder(0.05)
    pool = EvalPool(EvalSettings(device="cpu"), cpu_slots=1, run_job=rec)
    futures = []
    for i in range(5):
        futures.append(pool.submit(EvalJob(RELU, f"job{i}", pool.settings)))
        time.sleep(0.01)  # submitted in this order
    for f in futures:
        f.result(timeout=30)
    assert [tag for *_, tag in rec.runs] == [f"job{i}" for i in range(5)]


def test_gpu_busy_is_the_share_of_time_the_gpus_were_held(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    pool = EvalPool(EvalSettings(device="cuda"), run_job=Recorder(0.3))
    pool.run(EvalJob(RELU, "x", pool.settings))  # one GPU busy for 0.3 s, the other idle
    time.sleep(0.3)
    assert 0.15 < pool.gpu_busy() < 0.35  # about 0.3 s of 2 x 0.6 s


def test_gpu_busy_in_flight_leaves_out_the_time_no_candidate_was_in_the_pool(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")

    def phases(job, slots):  # 0.2 s building, then 0.2 s on the GPU
        with slots.build():
            time.sleep(0.2)
        with slots.run():
            time.sleep(0.2)

    pool = EvalPool(EvalSettings(device="cuda"), run_phases=phases)
    time.sleep(0.4)  # every trajectory waits for its model: not in flight
    first = pool.submit(EvalJob(RELU, "a", pool.settings))
    time.sleep(0.1)
    second = pool.submit(EvalJob(RELU, "b", pool.settings))  # builds while the first runs
    first.result(timeout=10), second.result(timeout=10)
    time.sleep(0.3)
    assert 0.45 < pool.in_flight_seconds() < 0.8  # 0 .. 0.5 s of the two jobs, not the waits around them
    assert 0.5 < pool.gpu_busy(in_flight=True) <= 1.0  # 0.4 s held of about 0.5 s
    assert pool.gpu_busy() < 0.45  # 0.4 s of about 1.2 s


def test_a_job_that_raises_frees_its_slot():
    def boom(job):
        raise RuntimeError("bug")

    pool = EvalPool(EvalSettings(device="cpu"), cpu_slots=1, run_job=boom)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            pool.submit(EvalJob(RELU, "", pool.settings)).result(timeout=10)
    assert pool.slots()[0].job is None and pool.waiting() == 0


def test_bad_pools_are_refused(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ValueError, match="no GPU is visible"):
        EvalPool(EvalSettings(device="cuda"))
    with pytest.raises(ValueError, match="cpu_slots"):
        EvalPool(EvalSettings(device="cpu"), cpu_slots=0)
    with pytest.raises(ValueError, match="job kind"):
        EvalJob(RELU, "", EvalSettings(), kind="build")


@pytest.mark.slow  # two real evaluations in child processes
def test_real_evaluations_through_the_pool_on_the_cpu(tmp_path):
    from pathlib import Path

    reply = (Path(__file__).resolve().parents[2] / "agent" / "scripted" / "demo" / "3.md").read_text()
    src = reply.split("```python\n")[1].split("```")[0]
    pool = EvalPool(EvalSettings(device="cpu", backend="triton"), cpu_slots=2)
    futures = [pool.submit(EvalJob(RELU, src, pool.settings)) for _ in range(2)]
    assert [f.result(timeout=300).status for f in futures] == [Status.CORRECT, Status.CORRECT]
    assert sum(s.done for s in pool.slots()) == 2


class PhasedRecorder:
    """A fake two-phase executor: holds a build slot `build_s`, then a run slot `run_s`; records
    (phase, device, start, end, tag, cores) of each."""

    def __init__(self, build_s: float = 0.2, run_s: float = 0.1):
        self.build_s, self.run_s = build_s, run_s
        self.runs: list[tuple[str, str, float, float, str, tuple | None]] = []
        self.lock = threading.Lock()

    def _hold(self, phase: str, slot, tag: str, seconds: float) -> None:
        t0 = time.monotonic()
        time.sleep(seconds)
        with self.lock:
            self.runs.append((phase, slot.device, t0, time.monotonic(), tag, slot.cores))

    def __call__(self, job: EvalJob, slots) -> EvalResult:
        with slots.build() as slot:
            self._hold("build", slot, job.source, self.build_s)
        with slots.run() as slot:
            self._hold("run", slot, job.source, self.run_s)
        return EvalResult(status=Status.CORRECT, device=slot.device)


def phase(runs, name: str):
    return [(d, a, b, tag) for p, d, a, b, tag, _ in runs if p == name]


def test_builds_of_several_jobs_run_at_once_while_each_gpu_runs_one_job(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    rec = PhasedRecorder()
    pool = EvalPool(EvalSettings(device="cuda"), build_slots=4, gpu_cores=0, run_phases=rec)
    assert (pool.size, pool.build_size) == (1, 4)
    assert [(s.name, s.kind) for s in pool.slots()] == [("gpu0", "gpu")] + [
        (f"build{i}", "build") for i in range(4)
    ]
    t0 = time.monotonic()
    results = run_many(pool, 8)
    wall = time.monotonic() - t0
    assert {r.device for r in results} == {"cuda:0"}
    builds, runs = phase(rec.runs, "build"), phase(rec.runs, "run")
    assert most_at_once(builds) == 4 and most_at_once(runs, "cuda:0") == 1  # timing alone on its GPU
    # the GPU ran one job while others built: the run phases overlap the builds of later jobs
    assert any(a < b2 and a2 < b for _, a, b, _ in runs for _, a2, b2, _ in builds)
    assert wall < 8 * (rec.build_s + rec.run_s) * 0.75  # one slot for all: 2.4 s
    slots = pool.slots()
    assert (
        sum(s.done for s in slots if s.kind == "gpu") == sum(s.done for s in slots if s.kind == "build") == 8
    )
    busy = pool.gpu_busy()
    assert 0.3 < busy <= 1.0  # build slots do not count: 0.8 s of GPU work in about 1.2 s


def test_a_job_waits_for_its_run_slot_without_holding_a_build_slot(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    rec = PhasedRecorder(build_s=0.05, run_s=0.3)
    pool = EvalPool(EvalSettings(device="cuda"), build_slots=1, gpu_cores=0, run_phases=rec)
    run_many(pool, 3)
    builds, runs = phase(rec.runs, "build"), phase(rec.runs, "run")
    # job 2 and 3 built (one at a time, on the one build slot) while job 1 held the GPU
    first_run = min(runs, key=lambda r: r[1])
    assert sum(1 for _, a, b, _ in builds if a < first_run[2] and b <= first_run[2] + 0.05) == 3
    assert most_at_once(runs) == 1 and pool.waiting() == 0


def test_cores_are_split_between_each_gpus_run_slot_and_the_builds(monkeypatch):
    from kb_agent.evaluator import pool as pool_module
    from kb_agent.evaluator import slots as slots_module

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(pool_module, "_cpu_list", lambda: list(range(16)))
    monkeypatch.setattr(slots_module, "_sibling_groups", lambda cpus: [(c,) for c in sorted(cpus)])
    rec = PhasedRecorder(0.01, 0.01)
    pool = EvalPool(EvalSettings(device="cuda"), run_phases=rec)
    by_name = {s.name: s for s in pool.slots()}
    assert by_name["gpu0"].cores == (14, 15) and by_name["gpu1"].cores == (12, 13)
    assert pool.build_size == 6 and by_name["build0"].cores == tuple(range(12))  # half the 12 left
    run_many(pool, 4)
    seen = {(p, cores) for p, _, _, _, _, cores in rec.runs}
    assert ("build", tuple(range(12))) in seen and {c for p, c in seen if p == "run"} <= {(14, 15), (12, 13)}
    # hyperthread siblings stay together: a GPU's run slot takes a whole core
    monkeypatch.setattr(slots_module, "_sibling_groups", lambda cpus: [(c, c + 8) for c in range(8)])
    pool = EvalPool(EvalSettings(device="cuda"), run_phases=rec)
    assert [s.cores for s in pool.slots()[:2]] == [(7, 15), (6, 14)]
    # too few CPUs to keep apart: nothing pinned
    monkeypatch.setattr(pool_module, "_cpu_list", lambda: [0, 1])
    monkeypatch.setattr(slots_module, "_sibling_groups", lambda cpus: [(c,) for c in sorted(cpus)])
    pool = EvalPool(EvalSettings(device="cuda"), run_phases=rec)
    assert {s.cores for s in pool.slots()} == {None} and pool.build_size == 1


def test_a_one_phase_executor_holds_its_run_slot_and_the_pool_has_no_build_slots(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    pool = EvalPool(EvalSettings(device="cuda"), run_job=Recorder(0.01))
    assert pool.build_size == 0 and [s.kind for s in pool.slots()] == ["gpu"]
    with pytest.raises(ValueError, match="one executor"):
        EvalPool(EvalSettings(device="cuda"), run_job=Recorder(), run_phases=PhasedRecorder())
    with pytest.raises(ValueError, match="build_slots"):
        EvalPool(EvalSettings(device="cuda"), build_slots=0)


def test_the_default_executor_passes_the_jobs_slots_to_the_evaluation(monkeypatch):
    from kb_agent.evaluator import runner

    seen = []

    def fake_evaluate(problem, source, settings, slots):
        with slots.build() as b:
            seen.append(("build", b.device))
        with slots.run() as r:
            seen.append(("run", r.device, settings.repro_timing))
        return EvalResult(status=Status.CORRECT, device=r.device)

    def fake_check(problem, settings):
        return {"device": settings.device}

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(runner, "evaluate", fake_evaluate)
    monkeypatch.setattr(runner, "check_problem", fake_check)
    pool = EvalPool(EvalSettings(device="cuda"), build_slots=2, gpu_cores=0)
    assert pool.evaluate(RELU, "src").device == "cuda:0"
    pool.retime(RELU, "src")
    assert pool.run(EvalJob(RELU, "", pool.settings, kind="check_problem")) == {"device": "cuda:0"}
    assert seen == [("build", "cpu"), ("run", "cuda:0", None), ("build", "cpu"), ("run", "cuda:0", True)]
    assert sum(s.done for s in pool.slots() if s.kind == "build") == 2


class Verdicts:
    """A fake executor returning `status` (after `seconds`) with one stage, counting its calls; raises
    for a source that says "boom"."""

    def __init__(self, status: Status = Status.CORRECT, seconds: float = 0.0):
        self.status, self.seconds, self.calls = status, seconds, 0
        self.lock = threading.Lock()

    def __call__(self, job: EvalJob) -> EvalResult:
        with self.lock:
            self.calls += 1
        time.sleep(self.seconds)
        if "boom" in job.source:
            raise RuntimeError("evaluator bug")
        return EvalResult(
            status=self.status, speedup=1.5, stages={"timing": 2.0}, child_start={"method": "fork"}
        )


def test_a_repeated_source_gets_the_earlier_verdict_without_a_second_evaluation():
    fake = Verdicts()
    pool = EvalPool(EvalSettings(device="cpu"), cpu_slots=2, run_job=fake, reuse_results=True)
    first = pool.run(EvalJob(RELU, "same", pool.settings))
    again = pool.run(EvalJob(RELU, "same", pool.settings))
    assert fake.calls == 1 and first.reused is None and first.stages == {"timing": 2.0}
    assert again.status == Status.CORRECT and again.speedup == 1.5
    assert again.stages == {} and again.child_start == {}  # nothing ran: no GPU-seconds in the store
    assert again.reused == {"stages": {"timing": 2.0}, "child_start": {"method": "fork"}}
    again.correctness.results.append("x")  # a copy: the earlier result is not shared
    assert pool.run(EvalJob(RELU, "same", pool.settings)).correctness.results == []
    # another source, other settings, or a re-timing is evaluated
    pool.run(EvalJob(RELU, "other", pool.settings))
    pool.run(EvalJob(RELU, "same", EvalSettings(device="cpu", strict=False)))
    pool.run(EvalJob(RELU, "same", pool.settings, kind="retime"))
    assert fake.calls == 4
    off = Verdicts()
    plain = EvalPool(EvalSettings(device="cpu"), cpu_slots=1, run_job=off)  # the library's default: off
    plain.run(EvalJob(RELU, "same", plain.settings))
    assert plain.run(EvalJob(RELU, "same", plain.settings)).reused is None and off.calls == 2


@pytest.mark.parametrize("status", [Status.TIMEOUT, Status.RUNTIME_ERROR])
def test_a_timeout_or_runtime_error_is_evaluated_again(status):
    fake = Verdicts(status)
    pool = EvalPool(EvalSettings(device="cpu"), cpu_slots=1, run_job=fake, reuse_results=True)
    results = [pool.run(EvalJob(RELU, "same", pool.settings)) for _ in range(2)]
    assert fake.calls == 2 and all(r.reused is None for r in results)


def test_a_twin_in_flight_waits_for_the_first_and_a_failed_first_leaves_it_to_evaluate():
    fake = Verdicts(seconds=0.3)
    pool = EvalPool(EvalSettings(device="cpu"), cpu_slots=2, run_job=fake, reuse_results=True)
    results = [
        f.result(timeout=10) for f in [pool.submit(EvalJob(RELU, "same", pool.settings)) for _ in range(2)]
    ]
    assert fake.calls == 1 and sorted(r.reused is not None for r in results) == [False, True]
    boom = [pool.submit(EvalJob(RELU, "boom", pool.settings)) for _ in range(2)]
    for f in boom:
        with pytest.raises(RuntimeError, match="evaluator bug"):
            f.result(timeout=10)
    assert fake.calls == 3  # each evaluated itself: an exception is not a verdict to reuse
