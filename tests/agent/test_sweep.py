"""Sweeps: many trajectories in flight (`jobs`), their evaluations through one pool, the store consistent,
an interrupt or a failure stopping them all and resume finishing the run without asking for a reply twice.
The model and the evaluator are fakes here (slow on purpose, to overlap); test_sweep_e2e.py runs the CLI
against the fake HTTP server."""

import _thread
import signal
import threading
import time

import pytest
from kb_agent.agent.llm import LLMError, ScriptedModel
from kb_agent.agent.loop import ModelUnavailable, SolveConfig, resume, solve
from kb_agent.agent.store import SharedStore, Store
from kb_agent.evaluator.fake import ScriptedEvaluator, canned
from kb_agent.evaluator.pool import EvalJob, EvalPool
from kb_agent.evaluator.settings import EvalSettings
from kb_agent.problems import resolve

TOY = resolve("toy")  # five problems
CODE = "```python\nclass ModelNew:\n    pass\n```"


def cfg(**kw) -> SolveConfig:
    return SolveConfig(**{"gpu_name": "x", "arch": "9.0", "backend": "triton", "device": "cpu", **kw})


class SlowModel:
    """ScriptedModel(by_turn) that takes `delay_s` per call and counts the calls in flight."""

    def __init__(self, replies, delay_s: float = 0.2, hook=None):
        self.inner = ScriptedModel(replies, by_turn=True)
        self.name, self.config = self.inner.name, self.inner.config
        self.delay_s, self.hook = delay_s, hook
        self.lock = threading.Lock()
        self.in_flight = self.most = 0

    @property
    def calls(self):
        return self.inner.calls

    def complete(self, messages):
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            if self.hook is not None:
                self.hook(messages)
            time.sleep(self.delay_s)
            return self.inner.complete(messages)
        finally:
            with self.lock:
                self.in_flight -= 1


class SlowEvaluations:
    """A pool executor that sleeps and counts evaluations at once."""

    def __init__(self, seconds: float = 0.1):
        self.seconds = seconds
        self.lock = threading.Lock()
        self.now = self.most = self.count = 0

    def __call__(self, job: EvalJob):
        with self.lock:
            self.now += 1
            self.count += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(self.seconds)
            return canned("correct", 1.5)
        finally:
            with self.lock:
                self.now -= 1


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "kb.sqlite")
    yield s
    s.close()


def assert_complete(store, run_id, turns):
    """Every trajectory ran `turns` turns, indexed 1..K, each with a reply and a status."""
    for t in store.trajectories(run_id):
        rows = store.turns(t["id"])
        assert [r["idx"] for r in rows] == list(range(1, turns + 1)), t["problem_key"]
        assert all(r["response"] and r["status"] for r in rows)
        assert t["outcome"] == "turn_budget"


def test_jobs_keep_that_many_trajectories_in_flight_and_the_pool_bounds_evaluations(store):
    model = SlowModel([CODE] * 3, delay_s=0.3)
    ex = SlowEvaluations(0.1)
    pool = EvalPool(EvalSettings(device="cpu"), cpu_slots=1, run_job=ex)
    t0 = time.monotonic()
    run_id = solve(TOY[:4], cfg(turns=3, retime_best=False), model, pool, store, jobs=4)
    wall = time.monotonic() - t0
    assert model.most == 4  # four model calls at once
    assert ex.most == 1 and ex.count == 12  # the one slot: one evaluation at a time, all 12 done
    assert wall < 12 * 0.3  # one after another the model alone takes 3.6 s
    assert store.get_run(run_id)["status"] == "finished"
    assert_complete(store, run_id, 3)


def test_turn_events_come_one_at_a_time_and_all_arrive(store):
    seen, inside = [], []

    def on_turn(e):
        inside.append(1)
        assert len(inside) == 1  # no two callbacks at once
        time.sleep(0.01)
        seen.append((e.problem, e.idx))
        inside.pop()

    solve(TOY, cfg(turns=2), SlowModel([CODE] * 2, 0.05), ScriptedEvaluator([canned("correct", 1.2)]), store,
          on_turn=on_turn, jobs=5)  # fmt: skip
    assert sorted(seen) == sorted((p.key, i) for p in TOY for i in (1, 2))


def test_the_shared_store_serialises_calls_from_many_threads(store):
    shared = SharedStore(store)
    assert SharedStore(shared).lock is shared.lock
    run_id = shared.create_run(None, {}, "m", "triton", "fp32")
    ids = [shared.create_trajectory(run_id, p) for p in TOY]

    def write(traj_id):
        for idx in range(1, 21):
            turn = shared.start_turn(traj_id, idx, [{"role": "user", "content": "x"}])
            shared.record_response(turn, "reply")
            shared.record_evaluation(turn, code=None, status="no_code", eval_result=None, feedback="f")

    threads = [threading.Thread(target=write, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [len(store.turns(i)) for i in ids] == [20] * 5


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler, which `_thread.interrupt_main` calls: a shell that starts pytest in
    the background leaves SIGINT ignored, and then nothing is raised (found by a new user)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_interrupt_mid_sweep_then_resume_finishes_without_asking_twice(store, python_sigint):
    calls = []

    def hook(messages):  # the fourth model call: Ctrl-C in the main thread, as a signal would
        calls.append(1)
        if len(calls) == 4:
            _thread.interrupt_main()

    model = SlowModel([CODE] * 3, delay_s=0.2, hook=hook)
    with pytest.raises(KeyboardInterrupt):
        solve(TOY[:3], cfg(turns=3, run_name="sweep"), model, ScriptedEvaluator([canned("correct", 1.5)]),
              store, jobs=3)  # fmt: skip
    run = store.get_run("sweep")
    assert run["status"] == "interrupted"
    time.sleep(0.5)  # calls in flight at the interrupt may still land (and are stored)
    answered = {(t["problem_key"], r["idx"]) for t in store.trajectories(run["id"])
                for r in store.turns(t["id"]) if r["response"] is not None}  # fmt: skip
    again = SlowModel([CODE] * 3, delay_s=0.05)
    resume("sweep", again, ScriptedEvaluator([canned("correct", 1.5)]), store, jobs=3)
    task = {store.turns(t["id"])[0]["messages"][1]["content"]: t["problem_key"]
            for t in store.trajectories(run["id"])}  # fmt: skip
    asked = {(task[m[1]["content"]], sum(x["role"] == "assistant" for x in m) + 1) for m in again.calls}
    assert not asked & answered  # no reply stored before the interrupt was asked for again
    assert len(asked) + len(answered) == 9 and len(again.calls) == len(asked)
    assert store.get_run("sweep")["status"] == "finished"
    assert_complete(store, run["id"], 3)


def test_a_bug_in_one_trajectory_stops_the_others_and_fails_the_run(store):
    class Buggy(ScriptedEvaluator):
        def evaluate(self, problem, source):
            if problem.key == TOY[1].key:
                raise RuntimeError("evaluator bug")
            time.sleep(0.05)
            return super().evaluate(problem, source)

    with pytest.raises(RuntimeError, match="evaluator bug"):
        solve(TOY, cfg(turns=3, run_name="bug"), SlowModel([CODE] * 3, 0.1), Buggy([canned("correct", 1.5)]),
              store, jobs=2)  # fmt: skip
    run = store.get_run("bug")
    outcomes = {t["problem_key"]: t["outcome"] for t in store.trajectories(run["id"])}
    assert run["status"] == "failed" and outcomes[TOY[1].key] == "error"
    assert outcomes[TOY[4].key] is None  # never started: resumable
    assert all(o in (None, "interrupted", "error", "turn_budget") for o in outcomes.values())


def test_an_unreachable_model_stops_every_thread(store):
    model = SlowModel([LLMError("connection refused", attempts=6)] * 3, 0.05)
    with pytest.raises(ModelUnavailable):
        solve(
            TOY, cfg(turns=2, run_name="down"), model, ScriptedEvaluator([canned("correct")]), store, jobs=2
        )
    assert len(model.calls) <= 2  # the two first calls; no trajectory after them was tried
    assert store.get_run("down")["status"] == "failed"


def test_jobs_below_one_are_refused(store):
    with pytest.raises(ValueError, match="jobs"):
        solve(TOY[:1], cfg(), ScriptedModel([CODE]), ScriptedEvaluator([canned("correct")]), store, jobs=0)
