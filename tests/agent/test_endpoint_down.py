"""A model server that is not OpenAI-compatible, or that dies mid-sweep, through litellm and the fake
server (issue 14, found by a new user): the pre-start check names the URL and what it answered; during a
run a 404/405/501 is not retried, and the first call whose retries run out on a dead endpoint stops every
trajectory (the client's circuit breaker), leaving the run incomplete and resumable."""

import subprocess
import sys
import threading
import time

import pytest
from kb_agent.agent import job
from kb_agent.agent.fakeserver import rate_limited, server_error
from kb_agent.agent.llm import EndpointDown, LiteLLMModel, LLMConfig, LLMError, WrongEndpoint
from kb_agent.agent.loop import SolveConfig
from kb_agent.agent.store import Store
from kb_agent.evaluator.fake import ScriptedEvaluator, canned
from kb_agent.problems import resolve

CODE = "```python\nclass ModelNew:\n    pass\n```"
CLI = [sys.executable, "-m", "kb_agent.agent.cli"]
MSGS = [{"role": "user", "content": "hi"}]


def cfg(**kw) -> SolveConfig:
    return SolveConfig(
        **{"turns": 2, "backend": "triton", "device": "cpu", "gpu_name": "x", "arch": "9.0", **kw}
    )


def llm(base: str, **kw) -> LLMConfig:
    return LLMConfig(
        model="openai/scripted", api_base=base, **{"max_attempts": 2, "backoff_initial_s": 0.01, **kw}
    )


@pytest.mark.parametrize("status, answer", [(501, "501 Not Implemented"), (405, "405 Method Not Allowed")])
def test_a_server_without_chat_completions_fails_before_the_run_naming_url_and_answer(
    fake_llm, tmp_path, status, answer
):
    fake_llm.failing(status)
    db = tmp_path / "kb.sqlite"
    LiteLLMModel(
        llm(fake_llm.openai_base)
    )  # litellm imported (seconds), as the other tests of a session find it
    t0 = time.monotonic()
    with pytest.raises(WrongEndpoint) as e:
        job.start(resolve("toy/1"), cfg(), llm(fake_llm.openai_base, max_attempts=6, backoff_initial_s=1),
                  store=db, evaluator=ScriptedEvaluator([canned("correct")]))  # fmt: skip
    assert time.monotonic() - t0 < 5
    message = str(e.value)
    assert f"{fake_llm.openai_base}/chat/completions answered {answer}" in message and "\n" not in message
    assert fake_llm.requests == [] and len(fake_llm.invalid) == 1  # one probe, no chat request
    with Store(db) as store:
        assert store.list_runs() == []


def test_a_server_answering_404_fails_before_the_run_and_a_url_without_v1_is_named(fake_llm):
    fake_llm.failing(404)  # a server that is not OpenAI-compatible: 404 to anything
    with pytest.raises(WrongEndpoint, match=r"/v1/chat/completions answered 404 Not Found; [^(]*$"):
        LiteLLMModel(llm(fake_llm.openai_base)).preflight()
    with pytest.raises(
        WrongEndpoint, match=r"\d/chat/completions answered 404 Not Found; .* usually ends in /v1"
    ):
        LiteLLMModel(llm(fake_llm.base_url)).preflight()


def test_the_pre_start_probe_uses_no_reply_of_an_openai_compatible_server(fake_llm):
    fake_llm.add("first")
    m = LiteLLMModel(llm(fake_llm.openai_base))
    m.preflight()
    assert m.complete(MSGS).text == "first"
    assert len(fake_llm.invalid) == 1 and fake_llm.invalid[0].body == {}
    assert fake_llm.invalid[0].headers["authorization"].startswith("Bearer ")


def test_a_501_during_a_run_is_not_retried_and_leaves_the_run_incomplete(fake_llm, tmp_path):
    fake_llm.by_turn = True
    fake_llm.add(CODE, CODE)
    db = tmp_path / "kb.sqlite"
    evaluator = ScriptedEvaluator([canned("correct", 1.5)])
    t0 = time.monotonic()
    run_id = job.start(resolve("toy/1,2"), cfg(run_name="moved"), llm(fake_llm.openai_base, max_attempts=6,
                       backoff_initial_s=1), store=db, evaluator=evaluator, jobs=1,
                       on_turn=lambda e: fake_llm.failing(501))  # fmt: skip
    assert time.monotonic() - t0 < 5  # no 33 s of retries
    assert len(fake_llm.requests) == 2  # turn 1, then one 501
    with Store(db) as store:
        assert store.get_run(run_id)["status"] == "incomplete"
        assert [t["outcome"] for t in store.trajectories(run_id)] == ["model_unavailable", None]
    fake_llm.failing(None)
    job.resume_run("moved", store=db, evaluator=evaluator)
    with Store(db) as store:
        assert store.get_run(run_id)["status"] == "finished"


def test_a_dead_server_mid_sweep_stops_every_trajectory_at_once_and_resume_finishes_them(fake_llm, tmp_path):
    fake_llm.by_turn, fake_llm.latency_s = True, 0.1
    fake_llm.add(CODE, CODE)
    db = tmp_path / "kb.sqlite"
    evaluator = ScriptedEvaluator([canned("correct", 1.5)])
    outage: list[float] = []

    def outage_after_first_reply(e):
        if not outage:
            outage.append(time.monotonic())
            fake_llm.failing(503)
            outage.append(len(fake_llm.requests))

    # 10 trajectories, 4 in flight; one call's retries take about 0.25 + 0.5 + 1 s (and up to 0.75 of jitter)
    run_id = job.start(resolve("toy"), cfg(samples=2, run_name="sweep"), llm(fake_llm.openai_base, max_attempts=4,
                       backoff_initial_s=0.25), store=db, evaluator=evaluator, jobs=4,
                       on_turn=outage_after_first_reply)  # fmt: skip
    took = time.monotonic() - outage[0]
    asked = len(fake_llm.requests) - outage[1]
    assert asked <= 4 * 4  # the calls in flight retried; no trajectory started after the first gave up
    assert took < 1.75 + 0.75 + 1.5  # one call's retries (with jitter), not one per trajectory
    with Store(db) as store:
        assert store.get_run(run_id)["status"] == "incomplete"
        outcomes = [t["outcome"] for t in store.trajectories(run_id)]
        assert set(outcomes) <= {"model_unavailable", None} and outcomes.count(None) >= 5
    fake_llm.failing(None)
    job.resume_run("sweep", store=db, evaluator=evaluator, jobs=4)
    with Store(db) as store:
        assert store.get_run(run_id)["status"] == "finished"
        for t in store.trajectories(run_id):
            assert [x["status"] for x in store.turns(t["id"])][-2:] == ["correct", "correct"]


def test_the_breaker_cuts_short_a_call_waiting_to_retry(fake_llm):
    fake_llm.failing(503)
    m = LiteLLMModel(llm(fake_llm.openai_base, max_attempts=3, backoff_initial_s=5))
    ended: list = []

    def waiting_call():
        t0 = time.monotonic()
        with pytest.raises(EndpointDown) as e:
            m.complete(MSGS)
        ended.append((time.monotonic() - t0, e.value))

    t = threading.Thread(target=waiting_call)
    t.start()
    time.sleep(0.5)  # its first attempt failed: it waits 5 s or more before the next
    fake_llm.failing(501)
    with pytest.raises(EndpointDown, match="does not serve chat completions"):
        m.complete(MSGS)
    t.join(5)
    ((took, error),) = ended
    assert took < 2 and error.transient and "501" in str(error)
    requests = len(fake_llm.requests)
    with pytest.raises(EndpointDown):
        m.complete(MSGS)
    assert len(fake_llm.requests) == requests  # open: no request at all


def test_rate_limits_and_refusals_do_not_open_the_breaker(fake_llm):
    fake_llm.add(rate_limited(0.01), rate_limited(0.01), server_error(401), "after")
    m = LiteLLMModel(llm(fake_llm.openai_base))
    with pytest.raises(LLMError, match="RateLimitError") as e:
        m.complete(MSGS)
    assert e.value.transient and not isinstance(e.value, EndpointDown)
    with pytest.raises(LLMError, match="AuthenticationError") as e:
        m.complete(MSGS)
    assert not e.value.transient and m.down is None
    assert m.complete(MSGS).text == "after"


@pytest.mark.slow  # CLI runs (import torch and litellm)
def test_solve_against_a_server_without_chat_completions_is_one_line(fake_llm, tmp_path):
    db = tmp_path / "kb.sqlite"
    args = [*CLI, "solve", "--problem", "toy/relu", "--turns", "2", "--model", "openai/scripted",
            "--api-base", fake_llm.openai_base, "--device", "cpu", "--db", str(db), "--run-name", "moved"]  # fmt: skip
    fake_llm.failing(501)
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"POST {fake_llm.openai_base}/chat/completions answered 501 Not Implemented" in r.stderr
    fake_llm.failing(None)
    fake_llm.add("no code in this reply", server_error(501))  # turn 2: the server stops serving the route
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 3, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert " incomplete: " in last
    assert fake_llm.openai_base in last and "does not serve chat completions" in last
    assert "solve --resume" in last and len(fake_llm.requests) == 2


@pytest.fixture
def web_page_server():
    """A real HTTP server on 127.0.0.1 that answers every request 200 with an HTML page (a web app, or
    the login page a proxy redirects to), not an OpenAI-compatible API."""
    import http.server

    class Page(http.server.BaseHTTPRequestHandler):
        def _page(self):
            body = b"<!doctype html><html><body>Sign in</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _page

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_a_server_answering_a_web_page_fails_before_the_run(web_page_server, tmp_path):
    # found by a new user: a 200 with HTML passed the check, then each trajectory spent about 40 s in
    # retries before it ended model_unavailable
    t0 = time.monotonic()
    with pytest.raises(
        WrongEndpoint, match=r"/v1/chat/completions answered 200 with text/html, not JSON; point"
    ):
        LiteLLMModel(llm(web_page_server)).preflight()
    assert time.monotonic() - t0 < 5
