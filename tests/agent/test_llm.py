"""The LLM layer through litellm against the local fake server (the one test module that imports
litellm for the client; importing it costs a few seconds)."""

import subprocess
import sys
from pathlib import Path

import pytest
from kb_agent.agent.fakeserver import (
    empty_message,
    malformed,
    no_choices,
    rate_limited,
    reply,
    server_error,
    slow,
)
from kb_agent.agent.llm import (
    DUMMY_API_KEY,
    LLM,
    LiteLLMModel,
    LLMConfig,
    LLMError,
    LLMReply,
    MissingKeyError,
    ScriptedModel,
    context_window,
    fit_messages,
)

ROOT = Path(__file__).resolve().parents[2]
MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "write a kernel"}]


class Sleeps(list):
    """Records the waits instead of sleeping them."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def model_for(srv, model="openai/scripted", **kw) -> tuple[LiteLLMModel, Sleeps]:
    sleeps = Sleeps()
    base = srv.anthropic_base if model.startswith("anthropic/") else srv.openai_base
    cfg = LLMConfig(model=model, api_base=base, api_key=kw.pop("api_key", "test-key"), **kw)
    cfg.backoff_initial_s = kw.get("backoff_initial_s", 0.01)
    return LiteLLMModel(cfg, sleep=sleeps), sleeps


def test_importing_the_module_does_not_import_litellm():
    code = "import sys, kb_agent.agent.llm, kb_agent.agent; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_openai_path_reply_fields(fake_llm):
    fake_llm.add(reply("```python\nclass ModelNew: pass\n```", tokens_in=120, tokens_out=30))
    m, _ = model_for(fake_llm, temperature=0.3, max_tokens=777)
    assert isinstance(m, LLM)
    r = m.complete(MSGS)
    assert r.text.startswith("```python") and r.finish_reason == "stop"
    assert (r.tokens_in, r.tokens_out) == (120, 30)
    assert r.cost_usd is None  # litellm's price map does not know "scripted"
    assert r.model == "scripted" and r.latency_s >= 0
    assert r.raw["choices"][0]["message"]["content"] == r.text
    assert r.extra["attempts"] == 1 and r.extra["retries"] == []
    (req,) = fake_llm.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer test-key"
    assert req.body["messages"] == MSGS
    assert req.body["temperature"] == 0.3 and req.body["max_tokens"] == 777


def test_cost_from_the_offline_price_map(fake_llm):
    fake_llm.add(reply("hi", tokens_in=1000, tokens_out=1000))
    m, _ = model_for(fake_llm, model="openai/gpt-4o")
    assert m.complete(MSGS).cost_usd > 0


def test_anthropic_path(fake_llm):
    fake_llm.add(reply("bonjour", tokens_in=11, tokens_out=2, finish_reason="length"))
    m, _ = model_for(fake_llm, model="anthropic/claude-sonnet-4-5", max_tokens=50)
    r = m.complete(MSGS)
    assert (r.text, r.tokens_in, r.tokens_out, r.finish_reason) == ("bonjour", 11, 2, "length")
    (req,) = fake_llm.requests
    assert req.path == "/v1/messages"
    assert req.body["system"] in ("be brief", [{"type": "text", "text": "be brief"}])
    assert req.body["max_tokens"] == 50


def test_retries_rate_limit_and_5xx_then_succeeds_honouring_retry_after(fake_llm):
    fake_llm.add(rate_limited(0.25), server_error(500), server_error(503), "done")
    m, sleeps = model_for(fake_llm, max_attempts=5)
    r = m.complete(MSGS)
    assert r.text == "done"
    assert len(fake_llm.requests) == 4  # one layer of retries: no SDK retries underneath
    assert r.extra["attempts"] == 4
    assert [e["attempt"] for e in r.extra["retries"]] == [1, 2, 3]
    assert r.extra["retries"][0]["error"].startswith("RateLimitError")
    assert "InternalServerError" in r.extra["retries"][1]["error"]
    assert "ServiceUnavailableError" in r.extra["retries"][2]["error"]
    assert sleeps[0] == pytest.approx(0.25)  # the server's retry-after-ms
    assert sleeps[2] > sleeps[1] > 0  # exponential backoff otherwise


def test_retries_are_bounded_by_attempts(fake_llm):
    fake_llm.add(*[server_error(502)] * 5)
    m, sleeps = model_for(fake_llm, max_attempts=3)
    with pytest.raises(LLMError) as e:
        m.complete(MSGS)
    assert len(fake_llm.requests) == 3 and len(sleeps) == 2
    assert e.value.attempts == 3 and len(e.value.retries) == 3
    msg = str(e.value)
    assert "\n" not in msg and "BadGatewayError" in msg and "after 3 attempts" in msg


def test_retries_are_bounded_by_total_time(fake_llm):
    fake_llm.add(rate_limited(30), "never reached")
    m, sleeps = model_for(fake_llm, max_attempts=5, max_retry_s=2)
    with pytest.raises(LLMError, match="RateLimitError"):
        m.complete(MSGS)
    assert len(fake_llm.requests) == 1 and sleeps == []  # waiting 30 s would pass the 2 s budget


@pytest.mark.parametrize(
    "status, name", [(400, "BadRequestError"), (401, "AuthenticationError"), (404, "NotFoundError")]
)
def test_request_errors_are_never_retried(fake_llm, status, name):
    fake_llm.add(server_error(status), "never reached")
    m, sleeps = model_for(fake_llm)
    with pytest.raises(LLMError, match=name) as e:
        m.complete(MSGS)
    assert len(fake_llm.requests) == 1 and sleeps == [] and e.value.attempts == 1


def test_timeout_is_retried(fake_llm):
    fake_llm.add(slow("too late", 3), "in time")
    m, _ = model_for(fake_llm, timeout_s=0.3)
    r = m.complete(MSGS)
    assert r.text == "in time" and "Timeout" in r.extra["retries"][0]["error"]


def test_malformed_json_and_missing_choices_are_retried_then_fail_cleanly(fake_llm):
    fake_llm.add(malformed(), no_choices(), "fine")
    m, _ = model_for(fake_llm)
    assert m.complete(MSGS).text == "fine"
    fake_llm.add(no_choices(), no_choices())
    m, _ = model_for(fake_llm, max_attempts=2)
    with pytest.raises(LLMError, match="no choices"):
        m.complete(MSGS)


def test_empty_message_is_an_empty_reply(fake_llm):
    fake_llm.add(empty_message())
    m, _ = model_for(fake_llm)
    r = m.complete(MSGS)
    assert r.text == "" and r.finish_reason == "stop"


def test_missing_key_fails_before_any_request(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    with pytest.raises(MissingKeyError) as e:
        LiteLLMModel(LLMConfig(model="anthropic/claude-sonnet-4-5"))
    assert str(e.value).startswith(
        "ANTHROPIC_API_KEY is not set; export it, or use --api-base for a local server"
    )
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingKeyError, match="OPENAI_API_KEY"):
        LiteLLMModel(LLMConfig(model="gpt-4o"))
    LiteLLMModel(LLMConfig(model="gpt-4o", api_key="given"))  # an explicit key is enough


def test_local_server_needs_no_key(fake_llm, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake_llm.add("ok")
    m = LiteLLMModel(LLMConfig(model="openai/local", api_base=fake_llm.openai_base))
    assert m.complete(MSGS).text == "ok"
    assert fake_llm.requests[0].headers["authorization"] == f"Bearer {DUMMY_API_KEY}"
    LiteLLMModel(LLMConfig(model="ollama/qwen2.5-coder"))  # no key and a default base: fine
    LiteLLMModel(LLMConfig(model="hosted_vllm/x", api_base=fake_llm.openai_base))


def test_reasoning_effort_is_passed_through_when_set(fake_llm):
    fake_llm.add("a", "b")
    m, _ = model_for(fake_llm, model="openai/o3", reasoning_effort="high")
    m.complete(MSGS)
    assert fake_llm.requests[0].body.get("reasoning_effort") == "high"
    m, _ = model_for(fake_llm, model="openai/o3")
    m.complete(MSGS)
    assert "reasoning_effort" not in fake_llm.requests[1].body


def test_context_window_known_and_unknown():
    assert context_window("gpt-4o") == 128000
    assert context_window("openai/no-such-model") is None


def test_fit_messages_drops_oldest_turn_pairs_keeping_system_task_and_last():
    big = "word " * 20_000  # about 20k tokens
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    for i in range(6):
        msgs += [
            {"role": "assistant", "content": f"answer {i} " + big},
            {"role": "user", "content": f"feedback {i}"},
        ]
    fitted = fit_messages(msgs, "gpt-4o", max_tokens=8000)
    assert fitted[:2] == msgs[:2] and fitted[-1] == msgs[-1]
    assert 2 < len(fitted) < len(msgs)
    roles = [m["role"] for m in fitted[1:]]
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False))  # still alternating
    assert fitted[2]["content"].startswith("answer ")  # dropped in assistant+user pairs
    # an unknown (local) model: the default window, or the one given
    assert len(fit_messages(msgs, "openai/unknown-model", max_tokens=8000)) < len(msgs)
    assert fit_messages(msgs, "openai/unknown-model", max_tokens=8000, window=1_000_000) == msgs
    small = msgs[:4]
    assert fit_messages(small, "gpt-4o", 8000) == small


def test_scripted_model_replays_and_raises():
    err = LLMError("boom")
    canned = LLMReply(text="as is", tokens_in=1, tokens_out=2)
    m = ScriptedModel(["one", canned, err])
    assert isinstance(m, LLM)
    r = m.complete(MSGS)
    assert r.text == "one" and r.tokens_in > 0 and r.cost_usd == 0.0
    assert m.complete(MSGS) is canned
    with pytest.raises(LLMError, match="boom"):
        m.complete(MSGS)
    with pytest.raises(LLMError, match="script exhausted"):
        m.complete(MSGS)
    assert len(m.calls) == 4 and m.calls[0] == MSGS


def test_the_loop_through_litellm_and_the_fake_server(fake_llm, tmp_path, monkeypatch):
    from kb_agent.agent.loop import SolveConfig, solve
    from kb_agent.agent.store import Store
    from kb_agent.evaluator.fake import ScriptedEvaluator, canned
    from kb_agent.problems import resolve

    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-should-not-be-stored")
    block = "```python\nimport torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n```"
    fake_llm.add(
        rate_limited(0.01),
        reply(block, tokens_in=900, tokens_out=80),
        "no code, sorry",
        empty_message(),
        block,
    )
    cfg = LLMConfig(model="openai/whatever", api_base=fake_llm.openai_base, backoff_initial_s=0.01)
    model = LiteLLMModel(cfg)
    evaluator = ScriptedEvaluator(
        [canned("compile_error", message="nvcc: error: boom"), canned("correct", 1.4)]
    )
    with Store(tmp_path / "kb.sqlite") as store:
        run_id = solve(
            resolve("toy/relu"), SolveConfig(turns=4, gpu_name="H200", arch="9.0"), model, evaluator, store
        )
        (traj,) = store.trajectories(run_id)
        turns = store.turns(traj["id"])
        run = store.get_run(run_id)
    assert traj["outcome"] == "turn_budget" and traj["best_speedup"] == 1.4
    assert [t["status"] for t in turns] == ["compile_error", "no_code", "no_code", "correct"]
    assert turns[0]["tokens_in"] == 900 and turns[0]["model_answered"] == "whatever"
    assert (
        turns[0]["llm_json"]["attempts"] == 2
        and "RateLimitError" in turns[0]["llm_json"]["retries"][0]["error"]
    )
    assert turns[2]["response"] == ""
    # the feedback turns as the server received them
    bodies = [r.body for r in fake_llm.requests]
    assert len(bodies) == 5 and bodies[0] == bodies[1]
    assert [m["role"] for m in bodies[2]["messages"]] == ["system", "user", "assistant", "user"]
    assert "nvcc: error: boom" in bodies[2]["messages"][3]["content"]
    assert (
        "no code" in bodies[3]["messages"][4]["content"]
        and "class ModelNew" in bodies[3]["messages"][5]["content"]
    )
    assert "sk-secret" not in str(run["config"]) and run["config"]["llm"]["model"] == "openai/whatever"


def test_the_builtin_scripted_model_answers_each_turn_of_every_conversation():
    from kb_agent.agent.llm import builtin_scripts, model_for, scripted_model

    demo = sorted((ROOT / "agent" / "scripted" / "demo").glob("*.md"))
    assert "demo" in builtin_scripts() and len(demo) == 3
    m = model_for(LLMConfig(model="scripted/demo"))
    assert isinstance(m, ScriptedModel) and isinstance(m, LLM) and m.name == "scripted/demo"
    assert m.replies == [p.read_text() for p in demo]
    assert m.config.model == "scripted/demo"  # what a run records, so that a resume rebuilds it
    # reply N+1 to a conversation holding N replies: two trajectories (or a resumed one) each start at 1
    turn2 = [*MSGS, {"role": "assistant", "content": "r1"}, {"role": "user", "content": "feedback"}]
    assert [m.complete(c).text for c in (MSGS, turn2, MSGS)] == [demo[0].read_text(), demo[1].read_text(), demo[0].read_text()]  # fmt: skip
    three = turn2 + [{"role": "assistant", "content": "r2"}, {"role": "user", "content": "f"}] * 2
    with pytest.raises(LLMError, match="script exhausted after 3 replies"):
        m.complete(three)
    with pytest.raises(LLMError, match=r"unknown scripted model scripted/nope; built in: scripted/demo"):
        scripted_model("nope")


def test_the_demo_script_ships_as_package_data():
    tomllib = pytest.importorskip("tomllib")
    from fnmatch import fnmatch

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    globs = data["kb_agent.agent"]
    for path in (ROOT / "agent" / "scripted").rglob("*.md"):
        rel = path.relative_to(ROOT / "agent").as_posix()
        assert any(fnmatch(rel, g) for g in globs), f"{rel} is not package data"


def test_model_for_a_litellm_string_is_the_litellm_client(fake_llm):
    from kb_agent.agent.llm import model_for

    m = model_for(LLMConfig(model="openai/local", api_base=fake_llm.openai_base))
    assert isinstance(m, LiteLLMModel)
    fake_llm.add("hi")
    assert m.complete(MSGS).extra["api_base"] == fake_llm.openai_base  # the server that answered


def test_config_refuses_sampling_settings_no_provider_accepts():
    for bad, words in (
        ({"temperature": 2.5}, "outside 0..2"),
        ({"max_tokens": 0}, "max_tokens must be 1 or more"),
        ({"reasoning_effort": "extreme"}, "choose minimal, low, medium or high"),
        ({"model": ""}, "model string is empty"),
    ):
        with pytest.raises(ValueError, match=words):
            LLMConfig(**{"model": "openai/x", **bad})


def test_llm_errors_are_expected_errors():
    from kb_agent.problems.errors import KBAgentError

    assert issubclass(MissingKeyError, KBAgentError) and LLMError("x").exit_code == 2
