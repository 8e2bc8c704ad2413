"""A model that cannot be reached stops the run at once instead of failing every trajectory in turn."""

import pytest
from kb_agent.agent.llm import LLMError, ScriptedModel
from kb_agent.agent.loop import ModelUnavailable, SolveConfig, resume, solve
from kb_agent.agent.store import Store
from kb_agent.evaluator.fake import ScriptedEvaluator, canned
from kb_agent.problems import resolve

CODE = "```python\nclass ModelNew:\n    pass\n```"


def test_unreachable_model_fails_the_run_at_once(tmp_path):
    store = Store(tmp_path / "kb.sqlite")
    model = ScriptedModel([LLMError("connection refused", attempts=6)] * 5)
    cfg = SolveConfig(turns=2, backend="triton", device="cpu", gpu_name="x", arch="9.0", run_name="down")
    with pytest.raises(ModelUnavailable, match="connection refused"):
        solve(resolve("toy/1,2"), cfg, model, ScriptedEvaluator([canned("correct", 1.5)]), store)
    assert len(model.calls) == 1  # the second problem was not tried
    run = store.get_run("down")
    assert run["status"] == "failed"
    outcomes = [t["outcome"] for t in store.trajectories(run["id"])]
    assert outcomes[0] == "model_error"


def test_a_model_error_after_replies_ends_only_its_trajectory_and_resume_continues(tmp_path):
    store = Store(tmp_path / "kb.sqlite")
    model = ScriptedModel([CODE, LLMError("overloaded", attempts=6), CODE, CODE])
    cfg = SolveConfig(turns=2, backend="triton", device="cpu", gpu_name="x", arch="9.0", run_name="flaky")
    run_id = solve(resolve("toy/1,2"), cfg, model, ScriptedEvaluator([canned("correct", 1.5)]), store)
    trajs = store.trajectories(run_id)
    assert [t["outcome"] for t in trajs] == ["model_error", "turn_budget"]
    resume("flaky", ScriptedModel([CODE]), ScriptedEvaluator([canned("correct", 2.0)]), store,
           retry_model_errors=True)  # fmt: skip
    first = store.turns(trajs[0]["id"])
    assert [t["status"] for t in first] == ["correct", "correct"]
    assert store.trajectories(run_id)[0]["outcome"] == "turn_budget"
