"""Evaluation seconds per turn (issue 13): the stage times of each turn's `EvalResult` as plain columns
(`setup_s`, `build_s`, `run_s`, `eval_s`), migration m013 and its backfill of an old database, and the
figures `kb-agent report` prints from them (stored results, and a scripted run through the fake server
with the real evaluator on the CPU)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kb_agent.agent.cli import app
from kb_agent.agent.report import build_report, render_report_text
from kb_agent.agent.store import Store
from kb_agent.agent.store.rows import eval_seconds
from kb_agent.problems import Problem
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
STAGES = {"setup": 3.0, "build": 20.0, "correctness": 1.0, "timing": 4.0, "total": 28.5}


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "kb.sqlite")
    yield s
    s.close()


def test_the_columns_are_the_stage_seconds_and_none_for_a_stage_never_begun():
    assert eval_seconds({"stages": STAGES}) == {"setup_s": 3.0, "build_s": 20.0, "run_s": 5.0, "eval_s": 28.5}
    compile_error = {"stages": {"setup": 3.0, "build": 9.0, "total": 12.1}}
    assert eval_seconds(compile_error) == {"setup_s": 3.0, "build_s": 9.0, "run_s": None, "eval_s": 12.1}
    forked = {"stages": {**STAGES, "setup": 0.01}, "child_start": {"method": "fork", "seconds": 0.04}}
    assert eval_seconds(forked)["setup_s"] == pytest.approx(0.05)  # the fork itself is not a stage
    # a split evaluation: the run child's start and load hold the GPU slot too (evaluator.runner)
    split = {"stages": {**STAGES, "run_setup": 0.25, "run_load": 0.5}}
    assert eval_seconds(split)["run_s"] == pytest.approx(5.75)
    nothing = {"setup_s": None, "build_s": None, "run_s": None, "eval_s": None}
    assert eval_seconds(None) == nothing and eval_seconds({"stages": {}}) == nothing


def _run(store, name, stages_per_turn, config=None):
    rid = store.create_run(name, config or {"turns": 3}, "openai/m", "cuda", "fp32")
    tid = store.create_trajectory(rid, Problem(1, 19, "19_ReLU", "# ref\n", "test"), 0)
    for i, stages in enumerate(stages_per_turn, start=1):
        u = store.start_turn(tid, i, [{"role": "user", "content": "go"}])
        store.record_response(u, "reply", tokens_in=10, tokens_out=10, cost_usd=None, latency_s=1.0)
        if stages is None:
            store.record_evaluation(u, code=None, status="no_code", eval_result=None, feedback="")
        else:
            er = {"status": "correct", "speedup": 1.2, "stages": stages}
            store.record_evaluation(u, code="x", status="correct", eval_result=er, feedback="")
    store.finish_trajectory(tid, "turn_budget")
    return rid, tid


def test_a_turn_stores_its_seconds_and_the_report_gives_medians_and_totals(store):
    slower = {**STAGES, "build": 30.0, "timing": 6.0, "total": 40.5}
    compile_error = {"setup": 5.0, "build": 10.0, "total": 15.5}
    rid, tid = _run(store, "secs", [STAGES, None, slower, compile_error])
    turns = store.turns(tid)
    assert [(t["build_s"], t["run_s"], t["eval_s"]) for t in turns] == [
        (20.0, 5.0, 28.5), (None, None, None), (30.0, 7.0, 40.5), (10.0, None, 15.5)
    ]  # fmt: skip
    (s,) = build_report(store, ["secs"])["runs"]
    e = s["eval_seconds"]
    assert e["evaluations"] == 3  # the turn with no code was not evaluated
    assert e["build"] == {"n": 3, "median": 20.0, "total": 60.0}
    assert e["run"] == {"n": 2, "median": 6.0, "total": 12.0}  # the compile error never reached the GPU
    assert e["setup"]["median"] == 3.0 and e["total"] == {"n": 3, "median": 28.5, "total": 84.5}
    text = render_report_text(build_report(store, ["secs"]))
    assert (
        "evaluation seconds per turn, 3 evaluations: build median 20 s (total 60 s), "
        "GPU (correctness + timing) median 6 s (total 12 s), child start median 3 s, "
        "whole evaluation median 28.5 s (total 84.5 s)"
    ) in text
    assert "GPU-seconds (correctness and timing stages): 12 total" in text  # the older figure, unchanged


@pytest.mark.parametrize("device, where, not_there", [("cpu", "CPU", "GPU"), ("cuda", "GPU", "CPU")])
def test_the_run_stage_is_named_after_the_runs_device(store, device, where, not_there):
    # seen in a review: a run made with --device cpu was said to have spent its seconds on the GPU
    _run(store, "dev", [STAGES], config={"turns": 3, "device": device})
    text = render_report_text(build_report(store, ["dev"]))
    assert f"{where} (correctness + timing) median 5 s (total 5 s)" in text
    assert f"{not_there} (correctness + timing)" not in text


def test_a_forks_copied_turns_keep_their_seconds_but_are_not_counted_again(store):
    rid, tid = _run(store, "src", [STAGES, STAGES])
    fork = store.create_run("fork", {"turns": 3}, "openai/m", "cuda", "fp32")
    ftid = store.create_trajectory(fork, store.problem_of(tid), 0)
    assert store.copy_turns(tid, ftid, 2) == 2
    assert [t["eval_s"] for t in store.turns(ftid)] == [28.5, 28.5]
    (s,) = build_report(store, ["fork"])["runs"]
    assert s["eval_seconds"]["evaluations"] == 0
    assert "evaluation seconds per turn: no evaluations" in render_report_text(build_report(store, ["fork"]))


def test_evaluations_without_stage_times_say_so(store):
    _run(store, "fake", [{}])
    text = render_report_text(build_report(store, ["fake"]))
    assert "evaluation seconds per turn: not recorded (1 evaluation without stage times)" in text


def test_a_database_before_m013_gets_its_evaluated_turns_filled_in(old_database):
    rows = [
        {"status": "correct", "stages": STAGES},
        {"status": "compile_error", "stages": {"setup": 4.0, "build": 31.0, "total": 35.2}},
        {"status": "correct"},  # a result stored without stage times
        None,  # never evaluated
    ]
    turns = [{} if er is None else {"status": er["status"], "eval_json": json.dumps(er)} for er in rows]
    path = old_database("m013", turns)
    with Store(path) as s:
        assert "m013_turn_eval_seconds" in s.applied_migrations()
        got = [(t["setup_s"], t["build_s"], t["run_s"], t["eval_s"]) for t in s.turns(1)]
    assert got == [
        (3.0, 20.0, 5.0, 28.5),
        (4.0, 31.0, None, 35.2),
        (None, None, None, None),
        (None, None, None, None),
    ]


@pytest.mark.slow  # one real evaluation on the CPU (Triton interpreter) in a CLI process: ~10 s
def test_a_scripted_solve_on_the_cpu_reports_its_evaluation_seconds(fake_llm, tmp_path):
    reply = "```python\n" + (ROOT / "tests" / "candidates" / "triton_relu.py").read_text() + "\n```"
    fake_llm.add(reply)
    db = tmp_path / "kb.sqlite"
    r = subprocess.run(
        [sys.executable, "-m", "kb_agent.agent.cli", "solve", "--problem", "toy/relu", "--turns", "1",
         "--model", "openai/scripted", "--api-base", fake_llm.openai_base, "--device", "cpu",
         "--backend", "triton", "--db", str(db), "--run-name", "secs", "--no-retime"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    with Store(db) as s:
        (traj,) = s.trajectories(s.get_run("secs")["id"])
        (turn,) = s.turns(traj["id"])
    assert turn["status"] == "correct"
    assert 0 < turn["setup_s"] and 0 < turn["build_s"] and 0 < turn["run_s"] < turn["eval_s"]
    assert turn["run_s"] == pytest.approx(
        turn["eval_json"]["stages"]["correctness"] + turn["eval_json"]["stages"]["timing"]
    )
    out = CliRunner().invoke(app, ["report", "secs", "--db", str(db)])
    assert out.exit_code == 0, out.output
    line = next(li for li in out.output.splitlines() if li.startswith("evaluation seconds per turn"))
    assert "1 evaluation: build median" in line and "whole evaluation median" in line
    assert "CPU (correctness + timing) median" in line  # the run's device (--device cpu), not "GPU"
    assert "CPU-seconds (correctness and timing stages)" in out.output and "GPU-seconds (" not in out.output
