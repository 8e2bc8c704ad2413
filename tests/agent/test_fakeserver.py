"""The fake LLM server through plain urllib (no litellm here, to keep this module fast)."""

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from kb_agent.agent.fakeserver import (
    FakeLLMServer,
    empty_message,
    load_replies,
    malformed,
    no_choices,
    rate_limited,
    reply,
    server_error,
    slow,
)


def post(url: str, body: dict, headers: dict | None = None, timeout: float = 5):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


def test_openai_and_anthropic_formats(fake_llm):
    fake_llm.add("first", reply("second", finish_reason="length", tokens_in=7, tokens_out=3))
    status, _, text = post(fake_llm.openai_base + "/chat/completions", CHAT, {"Authorization": "Bearer k"})
    body = json.loads(text)
    assert status == 200 and body["choices"][0]["message"] == {"role": "assistant", "content": "first"}
    assert body["usage"]["prompt_tokens"] > 0 and body["model"] == "m"
    status, _, text = post(fake_llm.anthropic_base + "/v1/messages", {**CHAT, "max_tokens": 5})
    body = json.loads(text)
    assert status == 200 and body["content"] == [{"type": "text", "text": "second"}]
    assert body["stop_reason"] == "max_tokens" and body["usage"] == {"input_tokens": 7, "output_tokens": 3}
    assert [r.path for r in fake_llm.requests] == ["/v1/chat/completions", "/v1/messages"]
    assert fake_llm.requests[0].headers["authorization"] == "Bearer k"
    assert fake_llm.requests[0].body["messages"][0]["content"] == "hello"


def test_faults_in_order(fake_llm):
    fake_llm.add(rate_limited(0.25), server_error(503), malformed(), empty_message(), no_choices())
    url = fake_llm.openai_base + "/chat/completions"
    status, headers, _ = post(url, CHAT)
    assert status == 429 and headers["retry-after"] == "1" and headers["retry-after-ms"] == "250"
    assert post(url, CHAT)[0] == 503
    status, _, text = post(url, CHAT)
    assert status == 200
    with pytest.raises(ValueError):
        json.loads(text)
    assert json.loads(post(url, CHAT)[2])["choices"][0]["message"]["content"] is None
    assert json.loads(post(url, CHAT)[2])["choices"] == []


def test_exhausted_script_is_a_400_and_unknown_path_a_404(fake_llm):
    status, _, text = post(fake_llm.openai_base + "/chat/completions", CHAT)
    assert status == 400 and "script exhausted" in text
    assert post(fake_llm.base_url + "/v1/embeddings", CHAT)[0] == 404


def test_slow_reply_and_cycle():
    with FakeLLMServer([slow("late", 0.1), "b"], cycle=True) as srv:
        url = srv.openai_base + "/chat/completions"
        t0 = time.monotonic()
        assert json.loads(post(url, CHAT)[2])["choices"][0]["message"]["content"] == "late"
        assert time.monotonic() - t0 >= 0.1
        assert [json.loads(post(url, CHAT)[2])["choices"][0]["message"]["content"] for _ in range(2)] == [
            "b",
            "late",
        ]


def test_stop_cuts_a_slow_reply_short():
    srv = FakeLLMServer([slow("never", 30)]).start()
    url = srv.openai_base + "/chat/completions"
    import threading

    def client():
        try:
            post(url, CHAT, timeout=60)
        except OSError:  # the server closes the connection without an answer
            pass

    threading.Thread(target=client, daemon=True).start()
    time.sleep(0.2)
    t0 = time.monotonic()
    srv.stop()
    assert time.monotonic() - t0 < 5


def test_load_replies_from_dir_and_json(tmp_path):
    d = tmp_path / "replies"
    d.mkdir()
    (d / "02.md").write_text("two")
    (d / "01.txt").write_text("one")
    (d / "notes.json").write_text("[]")
    assert [r.text for r in load_replies(d)] == ["one", "two"]
    f = tmp_path / "script.json"
    f.write_text(
        json.dumps(
            ["a", {"retry_after_s": 0.1}, {"status": 500, "text": None}, {"text": "b", "delay_s": 0.1}]
        )
    )
    items = load_replies(f)
    assert [(r.text, r.status) for r in items] == [("a", 200), (None, 429), (None, 500), ("b", 200)]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no \\*.md"):
        load_replies(tmp_path / "empty")


def test_cli_serves_replies_from_a_directory(tmp_path):
    (tmp_path / "1.md").write_text("from a file")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kb_agent.agent.fakeserver", "--replies", str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        base = proc.stdout.readline().strip()
        assert base.startswith("http://127.0.0.1:")
        body = json.loads(post(base + "/v1/chat/completions", CHAT)[2])
        assert body["choices"][0]["message"]["content"] == "from a file"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _chat(assistant_messages: int) -> dict:
    history = [{"role": "user", "content": "task"}]
    for i in range(assistant_messages):
        history += [{"role": "assistant", "content": f"r{i}"}, {"role": "user", "content": "feedback"}]
    return {"model": "x", "messages": history}


def test_by_turn_answers_each_conversation_by_its_own_turn():
    with FakeLLMServer(["first", "second"], by_turn=True) as srv:
        url = srv.openai_base + "/chat/completions"
        got = [json.loads(post(url, _chat(n))[2])["choices"][0]["message"]["content"] for n in (0, 1, 0, 1)]
        assert got == ["first", "second", "first", "second"]
        assert post(url, _chat(2))[0] == 400  # past the script
        assert len(srv.requests) == 5


def test_routes_give_each_conversation_the_script_of_the_text_its_task_holds():
    routes = {
        "class Model: relu": ["relu 1", "relu 2"],
        "class Model: relu6": ["relu6 1"],
        "gelu": ["gelu 1"],
    }
    with FakeLLMServer(["default 1"], routes=routes) as srv:
        url = srv.openai_base + "/chat/completions"

        def ask(task: str, turn: int) -> str:
            body = _chat(turn)
            body["messages"][0]["content"] = f"make it faster:\n{task}\n"
            return json.loads(post(url, body)[2])["choices"][0]["message"]["content"]

        assert ask("class Model: relu", 1) == "relu 2"  # walked by turn without by_turn
        assert ask("class Model: relu6", 0) == "relu6 1"  # the longest key found wins
        assert ask("gelu", 0) == "gelu 1"
        assert ask("softmax", 0) == "default 1"  # no key: the main script
        body = _chat(0)
        body["messages"][0]["content"] = [{"type": "text", "text": "gelu"}]  # content as parts
        assert json.loads(post(url, body)[2])["choices"][0]["message"]["content"] == "gelu 1"
        assert post(url, _chat(1))[0] == 400  # "task" has no key: past the main script's one reply


def test_latency_delays_every_answer_and_failing_answers_every_request_with_a_status():
    with FakeLLMServer(["a"], cycle=True, latency_s=0.3) as srv:
        url = srv.openai_base + "/chat/completions"
        t0 = time.monotonic()
        post(url, CHAT)
        assert time.monotonic() - t0 >= 0.3
        srv.latency_s = 0
        srv.failing(503)
        assert [post(url, CHAT)[0] for _ in range(2)] == [503, 503]
        srv.failing(None)
        assert post(url, CHAT)[0] == 200
    with pytest.raises(ValueError, match="latency_s"):
        FakeLLMServer(latency_s=-1)


def test_cli_latency_and_by_turn_options(tmp_path):
    (tmp_path / "1.md").write_text("one")
    (tmp_path / "2.md").write_text("two")
    args = [sys.executable, "-m", "kb_agent.agent.fakeserver", "--replies", str(tmp_path)]
    proc = subprocess.Popen([*args, "--by-turn", "--latency-s", "0.2"], stdout=subprocess.PIPE, text=True)
    try:
        base = proc.stdout.readline().strip()
        t0 = time.monotonic()
        body = json.loads(post(base + "/v1/chat/completions", _chat(1))[2])
        assert body["choices"][0]["message"]["content"] == "two" and time.monotonic() - t0 >= 0.2
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    bad = subprocess.run([*args, "--latency-s", "-1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--latency-s" in bad.stderr


def test_a_request_without_messages_is_refused_at_once_without_using_the_script():
    with FakeLLMServer(["first"], latency_s=2) as srv:
        url = srv.openai_base + "/chat/completions"
        t0 = time.monotonic()
        assert post(url, {})[0] == 400 and time.monotonic() - t0 < 1  # a probe: no latency, no reply used
        assert srv.requests == [] and len(srv.invalid) == 1
        srv.latency_s = 0
        assert json.loads(post(url, CHAT)[2])["choices"][0]["message"]["content"] == "first"
        srv.failing(501)
        assert post(url, {})[0] == 501 and post(srv.base_url + "/nowhere", CHAT)[0] == 501


def test_a_stopped_server_closes_a_kept_alive_connection_instead_of_leaving_it_unanswered():
    import http.client

    srv = FakeLLMServer(["a", "b"]).start()
    conn = http.client.HTTPConnection("127.0.0.1", srv._httpd.server_address[1], timeout=10)
    conn.request("POST", "/v1/chat/completions", json.dumps(CHAT), {"Content-Type": "application/json"})
    assert conn.getresponse().read()  # the connection stays open (HTTP/1.1 keep-alive)
    srv.stop()
    t0 = time.monotonic()
    conn.request("POST", "/v1/chat/completions", json.dumps(CHAT), {"Content-Type": "application/json"})
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        conn.getresponse()
    assert time.monotonic() - t0 < 2  # was: no answer until the client's timeout


def test_a_burst_of_simultaneous_requests_is_answered_every_one():
    """`solve --jobs 20` opens 20 connections at once and each waits for its reply: the stdlib's listen
    backlog of 5 made some of them fail to connect (on the H200 every trajectory of a sweep then ended at
    turn 1 as the endpoint down). Each of 40 simultaneous requests gets its reply."""
    import threading

    n = 40
    with FakeLLMServer(latency_s=0.5) as srv:
        srv.add(*(reply(f"r{i}") for i in range(n)))
        got, start = [], threading.Barrier(n)

        def one():
            start.wait()
            got.append(post(srv.openai_base + "/chat/completions", CHAT, timeout=20)[0])

        threads = [threading.Thread(target=one) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert got == [200] * n
