"""Context policies as named choices (issue 16): `summary` drops the reasoning of earlier replies and
keeps their code and every feedback; the policy is recorded with the run; and the conversation of an
unknown (local) model is trimmed to a default window or to `--context-window`, through litellm and the
fake server."""

import pytest
from kb_agent.agent.llm import LiteLLMModel, LLMConfig, ScriptedModel
from kb_agent.agent.loop import CONTEXTS, SolveConfig, solve
from kb_agent.agent.store import Store
from kb_agent.evaluator.fake import ScriptedEvaluator, canned
from kb_agent.problems import resolve


def reply(i: int) -> str:
    return (
        f"REASONING-{i}: I think the bottleneck is memory.\n```python\nclass ModelNew:  # v{i}\n    pass\n```"
    )


def test_summary_keeps_code_and_feedback_and_drops_earlier_reasoning(tmp_path):
    model = ScriptedModel([reply(1), "no code, just musing REASONING-2", reply(3), reply(4)])
    ev = ScriptedEvaluator([canned("incorrect")])
    with Store(tmp_path / "kb.sqlite") as store:
        run_id = solve(resolve("toy/1"), SolveConfig(turns=4, context="summary", gpu_name="x", arch="9.0"),
                       model, ev, store)  # fmt: skip
        assert store.get_run(run_id)["config"]["context"] == "summary"
        turns = store.turns(store.trajectories(run_id)[0]["id"])
    sent = model.calls[3]  # turn 4: the task, three earlier replies with their feedback
    assert len(sent) == 8
    replies = [m["content"] for m in sent if m["role"] == "assistant"]
    assert "REASONING-1" not in replies[0] and "# v1" in replies[0]
    assert "REASONING-2" not in replies[1] and "without a code block" in replies[1]
    assert replies[2] == reply(3)  # the previous reply stays whole
    assert [m["content"] for m in sent if m["role"] == "user"][1:] == [t["feedback"] for t in turns[:3]]
    assert "summary" in CONTEXTS


def test_an_unknown_model_is_trimmed_to_its_window(fake_llm):
    fake_llm.add("a", "b")
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    for i in range(6):
        msgs += [{"role": "assistant", "content": f"answer {i} " + "word " * 3000},
                 {"role": "user", "content": f"feedback {i}"}]  # fmt: skip
    base = dict(model="openai/local-coder", api_base=fake_llm.openai_base, max_tokens=1000, max_attempts=1)
    LiteLLMModel(LLMConfig(**base)).complete(msgs)  # ~18k tokens fit the default 32k window
    LiteLLMModel(LLMConfig(**base, context_window=8000)).complete(msgs)
    default, small = (len(r.body["messages"]) for r in fake_llm.requests)
    assert default == len(msgs) and small < default
    assert fake_llm.requests[1].body["messages"][-1] == msgs[-1]
    with pytest.raises(ValueError, match="larger --context-window"):
        LLMConfig(model="openai/x", context_window=500, max_tokens=1000)


def test_a_default_window_trims_an_unknown_model_that_would_overflow(fake_llm):
    fake_llm.add("a")
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    for i in range(6):
        msgs += [{"role": "assistant", "content": f"answer {i} " + "word " * 8000},
                 {"role": "user", "content": f"feedback {i}"}]  # fmt: skip
    LiteLLMModel(
        LLMConfig(model="openai/local-coder", api_base=fake_llm.openai_base, max_attempts=1)
    ).complete(msgs)
    assert len(fake_llm.requests[0].body["messages"]) < len(msgs)  # ~48k tokens: over the 32k default
