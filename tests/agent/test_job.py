"""`agent.job`: the main job from configs, started and resumed from Python as `kb-agent solve` does it,
with the built-in scripted model and a scripted evaluator (the real evaluator: test_solve_e2e)."""

from pathlib import Path

import pytest
from kb_agent.agent import job
from kb_agent.agent.llm import LLMConfig
from kb_agent.agent.loop import SolveConfig
from kb_agent.agent.store import Store
from kb_agent.evaluator.fake import ScriptedEvaluator, canned
from kb_agent.problems.errors import UsageError

DEMO = sorted((Path(__file__).resolve().parents[2] / "agent" / "scripted" / "demo").glob("*.md"))
CPU = {"device": "cpu", "backend": "triton", "gpu_name": "none", "arch": "none"}


class StopOnCall(ScriptedEvaluator):
    """Raises KeyboardInterrupt on evaluation number `n` (1-based), like a Ctrl-C during a build."""

    def __init__(self, results, n):
        super().__init__(results)
        self.n = n

    def evaluate(self, problem, candidate_source):
        if len(self.calls) + 1 == self.n:
            self.calls.append((problem.key, candidate_source))
            raise KeyboardInterrupt
        return super().evaluate(problem, candidate_source)


def test_start_runs_a_spec_with_the_scripted_demo_model(tmp_path):
    starts = []
    evaluator = ScriptedEvaluator([canned("compile_error"), canned("incorrect"), canned("correct", 1.1)])
    run_id = job.start("toy/relu", SolveConfig(turns=3, **CPU), LLMConfig(model="scripted/demo"),
                       store=tmp_path / "kb.sqlite", evaluator=evaluator, on_start=lambda *a: starts.append(a))  # fmt: skip
    assert starts == [(1, 3)]
    with Store(tmp_path / "kb.sqlite") as store:
        run = store.get_run(run_id)
        (traj,) = store.trajectories(run_id)
        turns = store.turns(traj["id"])
    assert run["model"] == "scripted/demo" and run["config"]["llm"]["model"] == "scripted/demo"
    assert [t["response"] for t in turns] == [p.read_text() for p in DEMO]
    assert [t["status"] for t in turns] == ["compile_error", "incorrect", "correct"]


def test_resume_run_rebuilds_the_model_and_settings_it_stored(tmp_path):
    db = tmp_path / "kb.sqlite"
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C while turn 2's reply is evaluated
        job.start("toy/relu", SolveConfig(turns=3, run_name="stopped", **CPU), LLMConfig(model="scripted/demo"),
                  store=db, evaluator=StopOnCall([canned("compile_error")], n=2))  # fmt: skip
    evaluator, starts = ScriptedEvaluator([canned("incorrect"), canned("correct", 1.2)]), []
    run_id = job.resume_run("stopped", store=db, evaluator=evaluator, on_start=lambda *a: starts.append(a))
    assert starts == [(1, 3)]  # one trajectory to continue, K from the stored config
    assert [src for _, src in evaluator.calls] == [DEMO[1].read_text().split("```python\n")[1].split("```")[0],
                                                   DEMO[2].read_text().split("```python\n")[1].split("```")[0]]  # fmt: skip
    with Store(db) as store:
        (traj,) = store.trajectories(run_id)
        assert store.get_run(run_id)["status"] == "finished" and traj["outcome"] == "turn_budget"
        assert [t["response"] for t in store.turns(traj["id"])] == [p.read_text() for p in DEMO]


def test_stored_llm_config_of_a_run_without_a_model_key_uses_its_name():
    run = {"model": "scripted/demo", "config": {"llm": {"name": "scripted/demo", "class": "ScriptedModel"}}}
    assert job.stored_llm_config(run) == LLMConfig(model="scripted/demo")
    run = {"config": {"llm": {"model": "openai/x", "api_base": "http://h/v1", "future_key": 1}}}
    assert job.stored_llm_config(run) == LLMConfig(model="openai/x", api_base="http://h/v1")


def test_a_cuda_run_on_a_machine_without_cuda_is_refused_before_the_run_exists(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(UsageError, match="no CUDA device here"):
        job.start("toy/relu", SolveConfig(), LLMConfig(model="scripted/demo"), store=tmp_path / "kb.sqlite")
    assert not (tmp_path / "kb.sqlite").exists()


@pytest.mark.parametrize("reuse", [True, False])
def test_a_pool_factory_gets_the_runs_reuse_setting(tmp_path, reuse):
    # `solve --executor ray` makes its pool through `pool=`; `--reuse/--no-reuse` must hold there too
    from kb_agent.evaluator.pool import EvalPool

    made = []

    def factory(settings):
        made.append(EvalPool(settings, cpu_slots=1, run_job=lambda j: canned("correct", 1.1)))
        return made[-1]

    job.start("toy/relu", SolveConfig(turns=1, reuse_results=reuse, retime_best=False, **CPU),
              LLMConfig(model="scripted/demo"), store=tmp_path / "kb.sqlite", pool=factory)  # fmt: skip
    assert made[0].reuse_results is reuse
