"""The whole loop on the CPU, through litellm and a local OpenAI-compatible server (no HTTP mocking),
with Triton candidates evaluated under the interpreter; a run killed with a real signal, resumed; and
the README's main job with the built-in scripted model, as a new user on a fresh machine runs it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kb_agent.agent.fakeserver import slow
from kb_agent.agent.metrics import P_VALUES
from kb_agent.agent.report import build_report
from kb_agent.agent.store import Store

ROOT = Path(__file__).resolve().parents[2]
REPLIES = sorted((ROOT / "agent" / "scripted" / "demo").glob("*.md"))  # the built-in scripted/demo
CLI = [sys.executable, "-m", "kb_agent.agent.cli"]


def _solve_args(base: str, db: Path, name: str, turns: int = 3) -> list[str]:
    return [*CLI, "solve", "--problem", "toy/relu", "--turns", str(turns), "--model", "openai/scripted",
            "--api-base", base, "--device", "cpu", "--backend", "triton", "--db", str(db), "--run-name", name]  # fmt: skip


@pytest.mark.slow  # three CPU evaluations, 15-17 s; the default run keeps a one-turn CLI solve (test_feedback)
def test_three_turns_compile_error_incorrect_correct(fake_llm, tmp_path):
    fake_llm.add(*[p.read_text() for p in REPLIES])
    db = tmp_path / "kb.sqlite"
    r = subprocess.run(
        # the winner's re-timing child is left out here (the README's main job below runs it)
        [*_solve_args(fake_llm.openai_base, db, "e2e"), "--no-retime"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    store = Store(db)
    run = store.get_run("e2e")
    (traj,) = store.trajectories(run["id"])
    turns = store.turns(traj["id"])
    assert [t["status"] for t in turns] == ["compile_error", "incorrect", "correct"]
    assert turns[2]["speedup"] > 0 and turns[2]["eval_json"]["status"] == "correct"
    assert traj["outcome"] == "turn_budget" and traj["best_turn"] == 3
    # what the second and third requests actually carried: the feedback on the turn before
    sent = [req.body["messages"] for req in fake_llm.requests]
    assert len(sent) == 3
    assert "undefined_name" in sent[1][-1]["content"]
    assert "compile" in sent[1][-1]["content"].lower()
    assert "mismatch" in sent[2][-1]["content"].lower() or "incorrect" in sent[2][-1]["content"].lower()
    # fast_p by hand: one trajectory, correct at turn 3 with speedup s
    s = turns[2]["speedup"]
    section = build_report(store, ["e2e"])["runs"][0]
    got = {f["p"]: (f["numerator"], f["denominator"]) for f in section["fast_p"]}
    assert got == {p: (int(s > p), 1) for p in P_VALUES}


@pytest.mark.slow  # a CLI run SIGKILLed and resumed: three evaluations in two processes
def test_killed_run_resumes_without_losing_or_repeating_a_turn(fake_llm, tmp_path):
    first, second, third = (p.read_text() for p in REPLIES)
    fake_llm.add(first, slow(second, 60))  # turn 2's reply never arrives before the kill
    db = tmp_path / "kb.sqlite"
    proc = subprocess.Popen([*_solve_args(fake_llm.openai_base, db, "killed"), "--no-retime"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    deadline = time.time() + 120
    while len(fake_llm.requests) < 2 and time.time() < deadline:  # turn 1 evaluated, turn 2 asked
        time.sleep(0.2)
    assert len(fake_llm.requests) == 2
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    store = Store(db)
    (traj,) = store.trajectories(store.get_run("killed")["id"])
    assert [t["status"] for t in store.turns(traj["id"])] == ["compile_error", None]

    fake_llm.add(second, third)
    r = subprocess.run([*CLI, "solve", "--resume", "killed", "--db", str(db)], capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    turns = store.turns(traj["id"])
    assert [t["idx"] for t in turns] == [1, 2, 3]
    assert [t["status"] for t in turns] == ["compile_error", "incorrect", "correct"]
    assert len(fake_llm.requests) == 4  # turn 1 was not asked again; turn 2 was, since its reply never came


@pytest.mark.slow
def test_the_readme_main_job_needs_no_key_no_server_and_no_dataset(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.endswith(("_API_KEY", "_API_BASE")) and k not in ("KB_DB", "KB_DATASET")}  # fmt: skip
    solve = [*CLI, *"solve --problem toy/relu --turns 3 --model scripted/demo --device cpu".split()]  # README
    r = subprocess.run(solve, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("toy/relu sample 0 turn")]
    assert [line.split()[5] for line in lines] == ["compile_error", "incorrect", "correct"], r.stdout
    # the re-timed figure, which report's differs from the turn's by, is named where the turns were shown
    assert "toy/relu sample 0: best turn re-timed in a fresh process" in r.stdout, r.stdout
    assert (tmp_path / "runs" / "kb.sqlite").is_file()  # the default store, relative to the working directory
    r = subprocess.run([*CLI, "report"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "model: scripted/demo  backend: triton" in r.stdout
    assert "fast_0.0 1.000 (1/1) 1.000 (1/1)" in " ".join(r.stdout.split())  # strict, KernelBench rules
