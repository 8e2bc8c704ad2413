"""Forks at turn K (issue 16) through litellm and the fake model server: the copied turns make no
model call and no evaluation (the server's request count and the evaluator's calls prove it), the new
settings apply from turn K, a fork SIGKILLed while waiting for turn K resumes without asking for a copied
turn; and `report A B --paired` (fast_p difference with a bootstrap interval, sign test)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from kb_agent.agent import job, metrics
from kb_agent.agent.fakeserver import slow
from kb_agent.agent.feedback import feedback_for
from kb_agent.agent.report import build_report
from kb_agent.agent.report.build import ReportError
from kb_agent.agent.report.paired import paired_report, render_paired_text
from kb_agent.agent.store import Store
from kb_agent.evaluator.result import EvalResult
from kb_agent.problems import resolve
from kb_agent.problems.errors import UsageError

sys.path.insert(0, os.path.dirname(__file__))
from test_strategies import KeyedEvaluator, cfg, kernel, llm  # noqa: E402

TOY = resolve("toy/1,2")
CLI = [sys.executable, "-m", "kb_agent.agent.cli"]


def source_run(fake_llm, db, turns=3):
    """A linear run on two problems: per problem compile_error, incorrect, then 1.5x / 0.8x."""
    fake_llm.add(kernel("compile_error"), kernel("incorrect"), kernel("1.5"),
                 kernel("compile_error"), kernel("incorrect"), kernel("0.8"))  # fmt: skip
    return job.start(TOY, cfg(turns=turns, run_name="src"), llm(fake_llm.openai_base), store=db,
                     evaluator=KeyedEvaluator(), jobs=1)  # fmt: skip


def test_a_fork_copies_turns_before_k_without_a_call_and_continues_with_new_settings(fake_llm, tmp_path):
    db = tmp_path / "kb.sqlite"
    src = source_run(fake_llm, db)
    assert len(fake_llm.requests) == 6
    fake_llm.add(kernel("2.0"), kernel("1.2"))
    ev = KeyedEvaluator()
    fork_id = job.fork("src", 3, feedback="minimal", run_name="f3", store=db, evaluator=ev, jobs=1)
    assert len(fake_llm.requests) == 8 and ev.calls == ["2.0", "1.2"]  # turn 3 only, per trajectory
    with Store(db) as s:
        run = s.get_run(fork_id)
        assert run["config"]["forked_from"]["turn"] == 3 and run["config"]["feedback"] == "minimal"
        for a, b in zip(s.trajectories(src), s.trajectories(fork_id), strict=True):
            old, new = s.turns(a["id"]), s.turns(b["id"])
            assert [t["copied_from"] for t in new] == [old[0]["id"], old[1]["id"], None]
            for key in ("messages", "response", "eval_json", "status", "tokens_in", "cost_usd"):
                assert [t[key] for t in new[:2]] == [t[key] for t in old[:2]]
            assert new[0]["feedback"] == old[0]["feedback"]
            # the feedback turn 3 sees is the new recipe's, rendered from the same evaluation
            er = EvalResult.from_dict(old[1]["eval_json"])
            assert new[1]["feedback"] == feedback_for(er, recipe="minimal") != old[1]["feedback"]
            assert new[2]["messages"][-1]["content"] == new[1]["feedback"]
        section = build_report(s, ["f3"])["runs"][0]
    assert section["usage"]["total"] == {
        "turns": 6,
        "model_calls": 2,
        "evaluations": 2,
        "reused": 0,
        "copied": 4,
    }


def test_fork_refuses_a_source_stopped_before_the_prefix_it_would_copy(fake_llm, tmp_path):
    # a source killed with turn 2 pending, forked at turn 3: the fork asked the new settings for turn 2
    # and went on as if it had copied turns 1..2 (only `report --paired` found the prefixes differ)
    db = tmp_path / "kb.sqlite"
    src = source_run(fake_llm, db)
    with Store(db) as s:
        first = s.trajectories(src)[0]["id"]
        s.db.execute("UPDATE trajectories SET outcome = NULL WHERE id = ?", [first])
        s.db.execute("DELETE FROM turns WHERE trajectory_id = ? AND idx >= 2", [first])
        s.db.conn.commit()
    with pytest.raises(
        UsageError, match=r"stopped before turn 2 in 1 trajectories \(toy/relu#0\).*--resume src"
    ):
        job.fork("src", 3, store=db, evaluator=KeyedEvaluator())
    fake_llm.add(kernel("2.0"), kernel("1.2"))
    job.fork("src", 2, run_name="f2", store=db, evaluator=KeyedEvaluator(), jobs=1)  # turn 1 is there


def test_fork_refuses_a_tree_run_and_a_turn_out_of_range(fake_llm, tmp_path):
    db = tmp_path / "kb.sqlite"
    source_run(fake_llm, db)
    with pytest.raises(UsageError, match=r"--turn must be 1\.\.3"):
        job.fork("src", 4, store=db, evaluator=KeyedEvaluator())
    fake_llm.add(kernel("1.0"), kernel("1.0"))
    job.start(TOY[:1], cfg(turns=1, strategy="best-of-n", n=2, run_name="bon"), llm(fake_llm.openai_base),
              store=db, evaluator=KeyedEvaluator(), jobs=1)  # fmt: skip
    with pytest.raises(UsageError, match="only a linear run can be forked"):
        job.fork("bon", 1, store=db, evaluator=KeyedEvaluator())


KILLED = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from kb_agent.agent import job
    from test_strategies import KeyedEvaluator
    job.fork("src", 3, run_name="killed", store=sys.argv[1], evaluator=KeyedEvaluator(), jobs=1)
""")


@pytest.mark.slow  # a CLI process killed mid-run and a second one resuming, about 6.5 s on 2 cores
def test_a_fork_killed_at_turn_k_resumes_without_asking_for_a_copied_turn(fake_llm, tmp_path):
    db = tmp_path / "kb.sqlite"
    source_run(fake_llm, db)
    fake_llm.add(slow(kernel("9.0"), 60))  # the first trajectory's turn 3 never arrives before the kill
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(db), os.path.dirname(__file__)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    deadline = time.time() + 60
    while len(fake_llm.requests) < 7 and time.time() < deadline:
        time.sleep(0.1)
    assert len(fake_llm.requests) == 7
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    fake_llm.add(kernel("2.0"), kernel("1.2"))
    job.resume_run("killed", store=db, evaluator=KeyedEvaluator(), jobs=1)
    assert len(fake_llm.requests) == 9  # turn 3 of each trajectory, the first asked again; nothing copied
    with Store(db) as s:
        trajs = s.trajectories(s.get_run("killed")["id"])
        assert [[t["copied_from"] is not None for t in s.turns(tr["id"])] for tr in trajs] == [
            [True, True, False]
        ] * 2
        assert {tr["outcome"] for tr in trajs} == {"turn_budget"}


def test_report_paired_compares_a_run_and_its_fork(fake_llm, tmp_path):
    db = tmp_path / "kb.sqlite"
    source_run(fake_llm, db)
    fake_llm.add(kernel("2.0"), kernel("1.2"))
    job.fork("src", 3, run_name="f3", store=db, evaluator=KeyedEvaluator(), jobs=1)
    with Store(db) as s:
        r = paired_report(s, "src", "f3", resamples=200)
    assert r["problems"] == 2 and r["prefix_turns"] == 2 and r["left_out"] == []
    by_p = {f["p"]: f for f in r["fast_p"]}
    assert (by_p[1.0]["a"], by_p[1.0]["b"], by_p[1.0]["diff"]) == (0.5, 1.0, 0.5)
    lo, hi = by_p[1.0]["ci95"]
    assert lo <= 0.5 <= hi
    assert r["sign_test"] == {"wins": 2, "losses": 0, "ties": 0, "p_value": 0.5}
    out = subprocess.run([*CLI, "report", "src", "f3", "--paired", "--db", str(db)], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "paired: A = src, B = f3; 2 problems in both (turns 1..2 identical in every pair)" in out.stdout
    assert "B faster on 2, A faster on 0, ties 0; two-sided p = 0.5" in out.stdout
    bad = subprocess.run([*CLI, "report", "src", "--paired", "--db", str(db)], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert bad.returncode == 2 and "--paired compares two runs" in bad.stderr
    assert "sign test" in render_paired_text(r)


def test_paired_refuses_a_fork_whose_prefix_differs(fake_llm, tmp_path):
    db = tmp_path / "kb.sqlite"
    source_run(fake_llm, db)
    fake_llm.add(kernel("2.0"), kernel("1.2"))
    job.fork("src", 3, run_name="f3", store=db, evaluator=KeyedEvaluator(), jobs=1)
    with Store(db) as s:
        (t, *_) = s.trajectories(s.get_run("f3")["id"])
        s.db.execute("UPDATE turns SET response = 'edited' WHERE trajectory_id = ? AND idx = 1", [t["id"]])
        s.db.conn.commit()
        with pytest.raises(ReportError, match=r"turns 1\.\.2 differ"):
            paired_report(s, "src", "f3")


def test_sign_test_and_paired_fast_p_by_hand():
    assert metrics.sign_test([1.0, None, 2.0, 1.0], [1.5, 0.5, 2.0, 0.9]) == {
        "wins": 2, "losses": 1, "ties": 1, "p_value": 1.0}  # fmt: skip
    assert metrics.sign_test([None] * 6, [1.1] * 6)["p_value"] == pytest.approx(2 / 64)
    (f,) = metrics.paired_fast_p([None, 1.2], [1.5, 0.9], p_values=[1.0], resamples=0)
    assert (f["a"], f["b"], f["diff"], f["ci95"]) == (0.5, 0.5, 0.0, None)


@pytest.mark.slow  # three CLI processes, about 14 s on the shared 2 cores
def test_fork_cli_says_in_one_line_what_is_wrong(fake_llm, tmp_path):
    db = tmp_path / "kb.sqlite"
    source_run(fake_llm, db)
    for args, message in ((["--turn", "9"], r"--turn must be 1..3"),
                          (["--turn", "2", "--context", "nearby"], "unknown context 'nearby'"),
                          (["--turn", "2", "--run-name", "src"], "already exists")):  # fmt: skip
        r = subprocess.run(
            [*CLI, "fork", "src", *args, "--db", str(db)], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert len(fake_llm.requests) == 6  # nothing was asked


def test_a_fork_with_another_recipe_does_not_tell_a_sample_it_repeated_another_samples_code(tmp_path):
    # sample 1's turn 1 got sample 0's result (the pool reuses across samples): sample 1 never sent that
    # code before, so the copied turn's feedback, rendered again in the fork's recipe, must not say so
    from kb_agent.agent.feedback import REPEATED_CODE
    from kb_agent.agent.fork import copy_prefix
    from kb_agent.agent.llm import ScriptedModel
    from kb_agent.agent.loop import SolveConfig, solve
    from kb_agent.evaluator.pool import EvalPool
    from kb_agent.evaluator.result import Status
    from kb_agent.evaluator.settings import EvalSettings

    relu = TOY[0]
    fake = lambda job: EvalResult(Status.CORRECT, speedup=1.2, stages={"timing": 1.0})  # noqa: E731
    pool = EvalPool(EvalSettings(device="cpu"), cpu_slots=1, run_job=fake, reuse_results=True)
    reply = "```python\nclass ModelNew:  # a\n    pass\n```"
    with Store(tmp_path / "kb.sqlite") as store:
        src = solve([relu], SolveConfig(turns=2, samples=2, retime_best=False), ScriptedModel([reply] * 4), pool,
                    store)  # fmt: skip
        config = SolveConfig(turns=2, feedback="minimal", forked_from={"run": src, "name": "s", "turn": 2,
                                                                       "feedback": "standard"})  # fmt: skip
        fork = store.create_run("f", {"turns": 2}, "scripted", "cuda", "fp32")
        traj = store.create_trajectory(fork, relu, 1)
        assert copy_prefix(store, config, traj, relu, 1) == 1
        (copied,) = store.turns(traj)
        assert copied["eval_json"]["reused"] is not None and REPEATED_CODE not in copied["feedback"]
