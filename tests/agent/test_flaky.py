"""Flaky providers, through litellm and the fake server: a transient failure leaves a trajectory
resumable and the run `incomplete` (solve exits 3), resume retries it; a refused request ends it as
`model_error` and the run `finished_with_errors`; a dead --api-base and an unknown model string fail
before the run starts; --rpm / --tpm hold requests back."""

import socket
import subprocess
import sys
import time

import pytest
from kb_agent.agent import job
from kb_agent.agent.fakeserver import server_error
from kb_agent.agent.llm import (
    LiteLLMModel,
    LLMConfig,
    LLMError,
    ModelUnreachable,
    RateLimiter,
    UnknownModelError,
)
from kb_agent.agent.loop import SolveConfig
from kb_agent.agent.store import Store
from kb_agent.evaluator.fake import ScriptedEvaluator, canned
from kb_agent.problems import resolve

CODE = "```python\nclass ModelNew:\n    pass\n```"
CLI = [sys.executable, "-m", "kb_agent.agent.cli"]
MSGS = [{"role": "user", "content": "hi"}]


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cfg(**kw) -> SolveConfig:
    return SolveConfig(
        **{"turns": 2, "backend": "triton", "device": "cpu", "gpu_name": "x", "arch": "9.0", **kw}
    )


def llm(base: str, **kw) -> LLMConfig:
    return LLMConfig(model="openai/scripted", api_base=base, max_attempts=2, backoff_initial_s=0.01, **kw)


def test_a_transient_failure_leaves_the_trajectory_resumable_and_resume_retries_it(fake_llm, tmp_path):
    fake_llm.by_turn = True
    fake_llm.add(CODE, CODE)
    db = tmp_path / "kb.sqlite"
    toy = resolve("toy/1,2")
    evaluator = ScriptedEvaluator([canned("correct", 1.5)])

    def outage_after_first_reply(e):  # the provider goes down once one turn is in
        fake_llm.failing(503)

    run_id = job.start(toy, cfg(run_name="flaky"), llm(fake_llm.openai_base), store=db, evaluator=evaluator,
                       jobs=1, on_turn=outage_after_first_reply)  # fmt: skip
    with Store(db) as store:
        assert store.get_run(run_id)["status"] == "incomplete"
        outcomes = [t["outcome"] for t in store.trajectories(run_id)]
        assert outcomes == [
            "model_unavailable",
            None,
        ]  # 503s after retries: the model is down, not asked again
        assert [t["status"] for t in store.turns(store.trajectories(run_id)[0]["id"])] == [
            "correct",
            "model_error",
        ]
    fake_llm.failing(None)
    job.resume_run("flaky", store=db, evaluator=evaluator, jobs=2)
    with Store(db) as store:
        assert store.get_run(run_id)["status"] == "finished"
        for t in store.trajectories(run_id):
            assert t["outcome"] == "turn_budget"
            assert [x["status"] for x in store.turns(t["id"])] == ["correct", "correct"]


def test_a_refused_request_is_a_model_error_for_good_and_the_run_says_so(fake_llm, tmp_path):
    fake_llm.add(CODE, server_error(400))
    db = tmp_path / "kb.sqlite"
    run_id = job.start(resolve("toy/1"), cfg(), llm(fake_llm.openai_base), store=db,
                       evaluator=ScriptedEvaluator([canned("correct", 1.5)]))  # fmt: skip
    with Store(db) as store:
        assert store.get_run(run_id)["status"] == "finished_with_errors"
        assert store.trajectories(run_id)[0]["outcome"] == "model_error"
    assert len(fake_llm.requests) == 2  # a 400 is not retried


@pytest.mark.slow  # a CLI run (imports torch and litellm)
def test_solve_exits_3_saying_the_run_finished_with_errors(fake_llm, tmp_path):
    fake_llm.add("no code in this reply", server_error(400))  # turn 2's request is refused
    db = tmp_path / "kb.sqlite"
    args = [*CLI, "solve", "--problem", "toy/relu", "--turns", "2", "--model", "openai/scripted",
            "--api-base", fake_llm.openai_base, "--device", "cpu", "--db", str(db), "--run-name", "refused"]  # fmt: skip
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 3, r.stderr
    assert "run " in r.stderr and "finished_with_errors" in r.stderr and "runs show" in r.stderr
    with Store(db) as store:
        run = store.get_run("refused")
        assert run["status"] == "finished_with_errors"
        assert store.trajectories(run["id"])[0]["outcome"] == "model_error"


def test_a_run_whose_first_call_fails_transiently_stops_and_stays_resumable(fake_llm, tmp_path):
    fake_llm.failing(503)
    db = tmp_path / "kb.sqlite"
    job.start(resolve("toy/1,2"), cfg(run_name="down"), llm(fake_llm.openai_base), store=db,
              evaluator=ScriptedEvaluator([canned("correct")]), jobs=1)  # fmt: skip
    with Store(db) as store:
        run = store.get_run("down")
        assert run["status"] == "incomplete"  # as the README says: resumable, solve exits 3
        assert [t["outcome"] for t in store.trajectories(run["id"])] == ["model_unavailable", None]
    assert len(fake_llm.requests) == 2  # two attempts, one trajectory: the second was not tried


def test_a_dead_api_base_fails_in_seconds_naming_the_url_before_the_run_exists(tmp_path):
    base = f"http://127.0.0.1:{closed_port()}/v1"
    db = tmp_path / "kb.sqlite"
    t0 = time.monotonic()
    with pytest.raises(ModelUnreachable, match=base.replace(".", r"\.")):
        job.start(
            resolve("toy/1"), cfg(), llm(base), store=db, evaluator=ScriptedEvaluator([canned("correct")])
        )
    assert time.monotonic() - t0 < 5
    with Store(db) as store:
        assert store.list_runs() == []


@pytest.mark.slow  # a CLI run (imports torch and litellm)
def test_solve_with_a_dead_api_base_is_one_line_naming_the_url(tmp_path):
    base = f"http://127.0.0.1:{closed_port()}/v1"
    db = tmp_path / "kb.sqlite"
    r = subprocess.run([*CLI, "solve", "--problem", "toy/relu", "--model", "openai/x", "--api-base", base,
                        "--device", "cpu", "--db", str(db)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and f"cannot reach the model server at {base}" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_an_unknown_model_string_fails_before_the_run_starts(tmp_path):
    with pytest.raises(UnknownModelError, match="PROVIDER/MODEL"):
        LiteLLMModel(LLMConfig(model="no-such-model-xyz"))
    db = tmp_path / "kb.sqlite"
    with pytest.raises(UnknownModelError):
        job.start(resolve("toy/1"), cfg(), LLMConfig(model="nowhere/llm"), store=db,
                  evaluator=ScriptedEvaluator([canned("correct")]))  # fmt: skip
    with Store(db) as store:
        assert store.list_runs() == []


def test_the_rate_limiter_holds_requests_and_tokens_to_their_window():
    now = [0.0]
    waits = []

    def sleep(s):
        waits.append(s)
        now[0] += s

    rl = RateLimiter(rpm=2, window_s=60, clock=lambda: now[0], sleep=sleep)
    assert [rl.wait(), rl.wait()] == [0.0, 0.0]
    now[0] = 10.0
    assert rl.wait() == pytest.approx(50.0)  # the first request leaves the window at t=60
    tl = RateLimiter(tpm=1000, window_s=60, clock=lambda: now[0], sleep=sleep)
    tl.wait()
    tl.add_tokens(1200)  # over the quota: the next request waits for that call to leave the window
    now[0] += 5
    assert tl.wait() == pytest.approx(55.0)


def test_rpm_limits_a_model_shared_by_threads(fake_llm):
    fake_llm.add("a", "b", "c")
    slept = []
    m = LiteLLMModel(llm(fake_llm.openai_base, rpm=2), sleep=slept.append)
    m.limiter._clock = lambda: 0.0  # frozen clock: the third request must wait a whole window
    m.limiter._sleep = lambda s: (slept.append(s), setattr(m.limiter, "_clock", lambda: 61.0))
    assert [m.complete(MSGS).text for _ in range(3)] == ["a", "b", "c"]
    assert slept == [60.0]


def test_bad_rate_limits_and_options_are_refused():
    with pytest.raises(ValueError, match="rpm"):
        LLMConfig(model="openai/x", rpm=0)
    r = subprocess.run([*CLI, "solve", "--problem", "toy/relu", "--model", "scripted/demo", "--tpm", "0"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and "--tpm" in r.stderr


def test_an_llm_error_says_whether_it_was_transient(fake_llm):
    fake_llm.add(server_error(500), server_error(500), server_error(401))
    m = LiteLLMModel(llm(fake_llm.openai_base))
    with pytest.raises(LLMError) as e:
        m.complete(MSGS)
    assert e.value.transient
    with pytest.raises(LLMError) as e:
        LiteLLMModel(llm(fake_llm.openai_base)).complete(MSGS)  # `m`'s breaker is open after the 500s
    assert not e.value.transient


def test_report_leaves_trajectories_the_model_never_answered_out_of_the_denominator(fake_llm, tmp_path):
    from kb_agent.agent.report import build_report, render_report_text

    fake_llm.by_turn = True
    fake_llm.add(CODE)
    db = tmp_path / "kb.sqlite"
    evaluator = ScriptedEvaluator([canned("correct", 1.5)])
    calls = []

    def outage_after_first_trajectory(e):
        calls.append(e)
        fake_llm.failing(503)

    job.start(resolve("toy/1,2"), cfg(turns=1, run_name="half"), llm(fake_llm.openai_base), store=db,
              evaluator=evaluator, jobs=1, on_turn=outage_after_first_trajectory)  # fmt: skip
    with Store(db) as store:
        rep = build_report(store, ["half"])
    s = rep["runs"][0]
    assert (s["trajectories"], s["unanswered"], s["not_started"]) == (1, 1, 0)
    assert {f["denominator"] for f in s["fast_p"]} == {1}  # toy/2, never answered, is not a failure
    assert "never answered by the model (not counted): 1" in render_report_text(rep)
