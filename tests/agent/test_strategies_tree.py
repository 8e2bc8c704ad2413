"""The store keeps every node as a turn with its parent (issue 16): migration m012 and its backfill of
old rows, a linear chain's parents, explicit parents of a tree, a fork's copies, and what the report
counts over the tree (model calls and evaluations per trajectory)."""

import pytest
from kb_agent.agent import metrics
from kb_agent.agent.llm import ScriptedModel
from kb_agent.agent.loop import SolveConfig, solve
from kb_agent.agent.report import build_report
from kb_agent.agent.report.text import render_report_text
from kb_agent.agent.store import Store, StoreError
from kb_agent.evaluator.fake import ScriptedEvaluator, canned
from kb_agent.problems import resolve

RELU = resolve("toy/relu")[0]
CODE = "```python\nclass ModelNew:\n    pass\n```"


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "kb.sqlite")
    yield s
    s.close()


def test_old_rows_become_linear_chains(old_database):
    path = old_database("m012", [{}, {}, {}])
    with Store(path) as s:
        assert "m012_turn_tree" in s.applied_migrations()
        turns = s.turns(1)
    assert [t["depth"] for t in turns] == [1, 2, 3]
    assert [t["parent_id"] for t in turns] == [None, turns[0]["id"], turns[1]["id"]]


def test_the_linear_loop_stores_a_chain_and_the_report_counts_calls_and_evaluations(store):
    model = ScriptedModel([CODE, "no code here", CODE])
    ev = ScriptedEvaluator([canned("incorrect"), canned("correct", 1.5)])
    run_id = solve([RELU], SolveConfig(turns=3, gpu_name="x", arch="9.0"), model, ev, store)
    (traj,) = store.trajectories(run_id)
    summaries = store.turn_summaries(run_id)
    assert [(t["idx"], t["parent_idx"], t["depth"]) for t in summaries] == [
        (1, None, 1),
        (2, 1, 2),
        (3, 2, 3),
    ]
    section = build_report(store, [run_id])["runs"][0]
    assert section["usage"]["per_trajectory"] == [
        {"problem": "toy/relu", "sample": 0, "turns": 3, "model_calls": 3, "evaluations": 2, "reused": 0, "copied": 0,
         "depth": 3}
    ]  # fmt: skip
    text = render_report_text(build_report(store, [run_id]), per_problem=True)
    assert "model calls: 3 (each trajectory 3-3); evaluations: 2 (each trajectory 2-2)" in text
    assert "model calls and evaluations, each trajectory" in text


def test_explicit_parents_make_a_tree_and_copies_keep_it(store):
    run_id = store.create_run("t", {}, "m", "cuda", "fp32", versions={})
    a = store.create_trajectory(run_id, RELU, 0)
    store.start_turn(a, 1, [{"role": "user", "content": "task"}], parent_idx=0)
    store.start_turn(a, 2, [], parent_idx=0)  # a second root
    store.start_turn(a, 3, [], parent_idx=1)
    store.start_turn(a, 4, [], parent_idx=3)
    got = [(t["idx"], t["depth"]) for t in store.turns(a)]
    assert got == [(1, 1), (2, 1), (3, 2), (4, 3)]
    with pytest.raises(ValueError, match="earlier turn"):
        store.start_turn(a, 5, [], parent_idx=5)
    with pytest.raises(StoreError, match="no turn 9"):
        store.start_turn(a, 10, [], parent_idx=9)
    b = store.create_trajectory(run_id, RELU, 1)
    assert store.copy_turns(a, b, 3) == 3
    src, copy = store.turns(a), store.turns(b)
    assert [t["copied_from"] for t in copy] == [t["id"] for t in src[:3]]
    assert copy[2]["parent_id"] == copy[0]["id"] and copy[0]["messages"] == src[0]["messages"]
    assert metrics.usage(s for s in store.turn_summaries(run_id) if s["trajectory_id"] == b) == {
        "turns": 3, "model_calls": 0, "evaluations": 0, "reused": 0, "copied": 3, "depth": 2}  # fmt: skip
    with pytest.raises(StoreError, match="already has turns"):
        store.copy_turns(a, b, 1)


def test_the_report_counts_a_reused_turn_as_reused_not_as_an_evaluation(store):
    # the second reply repeats the first one's code: the pool gives it that result again, nothing runs
    from kb_agent.evaluator.pool import EvalPool
    from kb_agent.evaluator.result import EvalResult, Status
    from kb_agent.evaluator.settings import EvalSettings

    fake = lambda job: EvalResult(Status.CORRECT, speedup=1.5, stages={"timing": 2.0, "total": 3.0})  # noqa: E731
    pool = EvalPool(EvalSettings(device="cpu"), cpu_slots=1, run_job=fake, reuse_results=True)
    cfg = SolveConfig(turns=2, gpu_name="x", arch="9.0", retime_best=False)
    run_id = solve([RELU], cfg, ScriptedModel([CODE, CODE]), pool, store)
    section = build_report(store, [run_id])["runs"][0]
    (row,) = section["usage"]["per_trajectory"]
    assert (row["model_calls"], row["evaluations"], row["reused"]) == (2, 1, 1)
    text = render_report_text(build_report(store, [run_id]))
    assert "evaluations: 1 (each trajectory 1-1), 1 turn reused an earlier result" in text
    assert "evaluation seconds per turn, 1 evaluation:" in text
