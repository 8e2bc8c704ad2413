"""Rescoring: stored turns evaluated again, results beside the old ones, changed verdicts and fast_p."""

import dataclasses
import json
import re
from pathlib import Path

import pytest
from kb_agent.agent import __version__
from kb_agent.agent.cli import app
from kb_agent.agent.loop import SolveConfig
from kb_agent.agent.rescore import _sources_digest, evaluator_version, render_rescore_text, rescore
from kb_agent.agent.store import Store, StoreError
from kb_agent.evaluator.fake import ScriptedEvaluator, canned
from kb_agent.problems import resolve_one
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = ROOT / "tests" / "candidates"
REDTEAM = ROOT / "tests" / "redteam" / "candidates"


def strict_result(status, speedup=None, failed=(), parity=None):
    """An EvalResult dict with a strict record whose `failed` checks failed (the rest passed)."""
    r = canned(status, speedup).to_dict()
    checks = {name: {"passed": name not in failed} for name in ("static", "custom_kernel_source", *failed)}
    r["strict"] = {"enabled": True, "checks": checks, "parity_status": parity or status}
    return r


def add_run(store, name, turns, *, device="cpu"):
    """A run on toy/relu, one trajectory, one turn per (code, stored EvalResult dict or status)."""
    config = dataclasses.asdict(SolveConfig(turns=len(turns), device=device, backend="triton"))
    rid = store.create_run(name, config, "openai/fake", "triton", "fp32")
    tid = store.create_trajectory(rid, resolve_one("toy/relu"), 0)
    for i, (code, er) in enumerate(turns, start=1):
        u = store.start_turn(tid, i, [{"role": "user", "content": "go"}])
        store.record_response(u, f"reply {i}", tokens_in=10, tokens_out=5)
        status = er if isinstance(er, str) else er["status"]
        store.record_evaluation(u, code=code, status=status, eval_result=None if isinstance(er, str) else er,
                                feedback="fb")  # fmt: skip
    store.finish_trajectory(tid, "turn_budget")
    store.set_run_status(rid, "finished")
    return rid


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "kb.sqlite") as s:
        yield s


def fast(rep, rules, p):
    (row,) = [r for r in rep["fast_p"][rules] if r["p"] == p]
    return (row["before"]["numerator"], row["before"]["denominator"]), (
        row["after"]["numerator"],
        row["after"]["denominator"],
    )


def test_evaluator_version_is_the_package_version_and_a_hash_of_the_evaluator_sources(tmp_path):
    v = evaluator_version()
    assert re.fullmatch(re.escape(__version__) + r"\+[0-9a-f]{12}", v)
    assert evaluator_version() is v  # computed once
    src = tmp_path / "ev"
    (src / "stages").mkdir(parents=True)
    (src / "judge.py").write_text("THRESHOLD = 1\n")
    (src / "stages" / "build.py").write_text("x = 1\n")
    first = _sources_digest(src)
    (src / "notes.txt").write_text("not a source\n")
    assert _sources_digest(src) == first
    (src / "stages" / "build.py").write_text("x = 2\n")  # any edit of a source is another version
    assert _sources_digest(src) != first


def test_changed_verdicts_named_with_the_strict_check_and_fast_p_before_and_after(store):
    rid = add_run(
        store,
        "r",
        [
            ("# t1", "compile_error"),
            ("# t2", strict_result("correct", 1.5)),  # now rejected: the custom kernel does not do the work
            (None, "no_code"),  # nothing to evaluate
            ("# t4", strict_result("correct", 1.2)),  # stays correct, a little slower
        ],
    )
    fake = ScriptedEvaluator(
        [
            canned("compile_error"),
            dataclasses.replace(
                canned("rejected", message="strict check failed: custom_kernels_do_the_work"),
                strict={
                    "enabled": True,
                    "parity_status": "correct",
                    "checks": {"static": {"passed": True}, "custom_kernels_do_the_work": {"passed": False}},
                },
            ),  # fmt: skip
            canned("correct", 1.1),
        ]
    )
    rep = rescore(store, "r", evaluator=fake, version="v2")
    json.dumps(rep)
    assert [c for c, _ in fake.calls] == ["toy/relu"] * 3  # the no_code turn is not evaluated
    assert (rep["turns"], rep["rescored"], rep["reused"]) == (3, 3, 0)
    (change,) = rep["changes"]
    assert change["turn"] == 2 and change["status"] == ["correct", "rejected"]
    assert change["parity_status"] == ["correct", "correct"]
    assert change["checks_failing"] == ["custom_kernels_do_the_work"] and change["checks_passing"] == []
    assert rep["changes_by_check"] == {"custom_kernels_do_the_work": 1}
    # strict: best 1.5 before, 1.1 after (turn 4); KernelBench's rules keep turn 2's rescored speedup
    assert fast(rep, "strict", 1.2) == ((1, 1), (0, 1))
    assert fast(rep, "strict", 1.0) == ((1, 1), (1, 1))
    assert fast(rep, "kernelbench", 0.0) == ((1, 1), (1, 1))
    # stored beside the old verdict, under the version, never over the turn's own columns
    rows = {r["idx"]: r for r in store.rescores(rid, "v2")}
    assert sorted(rows) == [1, 2, 4]
    assert rows[2]["status"] == "rejected" and rows[2]["parity_status"] == "correct"
    assert rows[2]["failed_checks"] == ["custom_kernels_do_the_work"]
    assert rows[2]["eval_json"]["status"] == "rejected"
    (traj,) = store.trajectories(rid)
    assert [t["status"] for t in store.turns(traj["id"])] == [
        "compile_error",
        "correct",
        "no_code",
        "correct",
    ]
    text = render_rescore_text(rep)
    assert "1 verdict changed" in text
    assert (
        "toy/relu sample 0 turn 2: correct -> rejected (KernelBench's rules: still correct); "
        "strict checks now failing: custom_kernels_do_the_work" in text
    )
    assert "strict mode fast_1.2: 1.000 (1/1) -> 0.000 (0/1)" in text
    assert "changes by strict check: custom_kernels_do_the_work 1" in text


def test_a_rescoring_resumes_and_force_evaluates_again(store):
    add_run(store, "r", [("# t1", strict_result("correct", 1.5)), ("# t2", "incorrect")])
    fake = ScriptedEvaluator([canned("correct", 1.5), canned("incorrect")])
    rescore(store, "r", evaluator=fake, version="v2")
    again = rescore(store, "r", evaluator=fake, version="v2")
    assert len(fake.calls) == 2 and (again["rescored"], again["reused"]) == (0, 2)
    assert again["changes"] == [] and "no verdict changed" in render_rescore_text(again)
    assert "no fast_p figure changed" in render_rescore_text(again)
    flipped = ScriptedEvaluator([canned("incorrect", message="output mismatch in trial 1")])
    forced = rescore(store, "r", evaluator=flipped, version="v2", force=True)
    assert forced["rescored"] == 2 and len(store.rescores(store.get_run("r")["id"], "v2")) == 2  # replaced
    (change,) = forced["changes"]
    assert change["status"] == ["correct", "incorrect"] and change["why"] == "output mismatch in trial 1"
    other = rescore(store, "r", evaluator=fake, version="v3")  # another version: a row of its own
    assert other["rescored"] == 2 and len(store.rescores(store.get_run("r")["id"])) == 4


def test_a_rejected_turn_that_now_passes_names_the_checks(store):
    add_run(store, "r", [("# t1", strict_result("rejected", None, failed=("threads",), parity="correct"))])
    fake = ScriptedEvaluator([dataclasses.replace(canned("correct", 2.0), strict={
        "enabled": True, "parity_status": "correct", "checks": {"threads": {"passed": True}}})])  # fmt: skip
    (change,) = rescore(store, "r", evaluator=fake, version="v2")["changes"]
    assert change["checks_passing"] == ["threads"] and change["why"] == "strict checks now passing: threads"


def test_a_cuda_run_on_a_machine_without_cuda_is_one_line(store, monkeypatch):
    import torch
    from kb_agent.problems.errors import UsageError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    add_run(store, "gpu", [("# t1", "incorrect")], device="cuda")
    with pytest.raises(UsageError, match="no CUDA device here"):
        rescore(store, "gpu")


def test_rescore_cli_a_wrong_kernel_a_fake_called_correct_is_incorrect_under_the_real_evaluator(store):
    """The real child under the Triton interpreter (one evaluation, about 3 s)."""
    code = (CANDIDATES / "triton_relu_off_by_one.py").read_text()
    rid = add_run(store, "fake-judged", [(code, strict_result("correct", 1.3)), (None, "no_code")])
    r = CliRunner().invoke(app, ["rescore", "fake-judged", "--db", str(store.path)])
    assert r.exit_code == 0, r.output
    assert f"rescored under evaluator {evaluator_version()}: 1 turn with code, 1 evaluated now" in r.output
    assert "toy/relu sample 0 turn 1: correct -> incorrect" in r.output
    assert "output mismatch" in r.output
    assert "strict mode fast_0.0: 1.000 (1/1) -> 0.000 (0/1)" in r.output
    assert "KernelBench's rules fast_0.0: 1.000 (1/1) -> 0.000 (0/1)" in r.output
    (row,) = store.rescores(rid)
    assert row["evaluator_version"] == evaluator_version() and row["status"] == "incorrect"
    assert row["eval_json"]["correctness"]["passed"] < row["eval_json"]["correctness"]["trials"]
    j = CliRunner().invoke(app, ["rescore", "fake-judged", "--db", str(store.path), "--json"])
    assert j.exit_code == 0 and json.loads(j.output)["reused"] == 1  # nothing evaluated the second time


@pytest.mark.slow  # the real child, one evaluation under strict mode
def test_a_torch_call_once_recorded_correct_is_rejected_under_strict_mode(store):
    code = (REDTEAM / "notakernel_torch_op.py").read_text()
    add_run(store, "old", [(code, strict_result("correct", 1.0))])
    rep = rescore(store, "old")
    (change,) = rep["changes"]
    assert change["status"] == ["correct", "rejected"] and change["parity_status"] == ["correct", "correct"]
    assert change["checks_failing"] and change["why"].startswith("strict checks now failing: ")
    assert set(rep["changes_by_check"]) == set(change["checks_failing"])
    assert fast(rep, "strict", 0.0) == ((1, 1), (0, 1))
    assert fast(rep, "kernelbench", 0.0) == ((1, 1), (1, 1))


def test_unknown_run(store):
    with pytest.raises(StoreError, match="no run 'nope'"):
        rescore(store, "nope", evaluator=ScriptedEvaluator([canned("correct")]))


def test_a_database_at_m008_gets_the_rescores_table_and_keeps_its_turns(tmp_path):
    from kb_agent.agent.store import MIGRATIONS, migrate
    from sqlite_utils import Database

    path = tmp_path / "old.sqlite"
    db = Database(path)
    migrate(db, MIGRATIONS[:8])
    assert "rescores" not in db.table_names()
    db.close()
    with Store(path) as s:
        assert "m009_rescores" in s.applied_migrations() and "rescores" in s.db.table_names()
        rid = add_run(s, "r", [("# t1", "incorrect")])
        (turn,) = s.run_turns(rid)
        s.record_rescore(turn["id"], "v1", canned("correct", 1.5))
        (row,) = s.rescores(rid)
        assert (row["status"], row["correct"], row["speedup"], row["idx"]) == ("correct", 1, 1.5, 1)
        with pytest.raises(StoreError, match="no turn 999"):
            s.record_rescore(999, "v1", canned("correct"))
