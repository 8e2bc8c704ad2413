"""A sweep through the CLI (`solve --jobs 3`) against the fake HTTP server, SIGKILLed in the middle and
resumed: nothing lost, no stored reply asked for again (requests counted at the server)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kb_agent.agent.fakeserver import FakeLLMServer
from kb_agent.agent.store import Store

ROOT = Path(__file__).resolve().parents[2]
REPLIES = [p.read_text() for p in sorted((ROOT / "agent" / "scripted" / "demo").glob("*.md"))]
CLI = [sys.executable, "-m", "kb_agent.agent.cli"]


def conversation(body: dict) -> tuple[str, int]:
    """(the task prompt, the turn it asks for) of one request."""
    messages = body["messages"]
    return messages[1]["content"], sum(m["role"] == "assistant" for m in messages) + 1


@pytest.mark.slow  # two CLI runs, about a dozen evaluations under the Triton interpreter
def test_a_sweep_killed_mid_way_resumes_without_losing_or_asking_twice(tmp_path):
    db = tmp_path / "kb.sqlite"
    with FakeLLMServer(REPLIES, by_turn=True, latency_s=0.5) as srv:
        args = [*CLI, "solve", "--problem", "toy/1,2,3", "--turns", "3", "--model", "openai/scripted",
                "--api-base", srv.openai_base, "--device", "cpu", "--no-retime", "--db", str(db),
                "--run-name", "sweep", "--jobs", "3"]  # fmt: skip
        proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.time() + 180
        while len(srv.requests) < 5 and time.time() < deadline:  # some turns evaluated, some replies pending
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert len(srv.requests) >= 5
        store = Store(db)
        run = store.get_run("sweep")
        trajs = store.trajectories(run["id"])
        stored = set()  # (task prompt, turn) whose reply was stored before the kill
        for t in trajs:
            rows = store.turns(t["id"])
            stored |= {
                (rows[0]["messages"][1]["content"], r["idx"]) for r in rows if r["response"] is not None
            }
        assert stored and len(stored) < 9  # the kill came in the middle
        before = len(srv.requests)

        r = subprocess.run([*CLI, "solve", "--resume", "sweep", "--db", str(db), "--jobs", "3"],
                           capture_output=True, text=True, timeout=300)  # fmt: skip
        assert r.returncode == 0, r.stderr
        again = [conversation(req.body) for req in srv.requests[before:]]
    assert not set(again) & stored  # no stored reply was asked for again
    assert len(again) == len(set(again))  # and no turn twice in the resumed run
    assert len(again) == 9 - len(stored)  # every turn without a stored reply, once
    assert store.get_run("sweep")["status"] == "finished"
    for t in store.trajectories(run["id"]):
        rows = store.turns(t["id"])
        assert [x["idx"] for x in rows] == [1, 2, 3] and all(x["status"] for x in rows)
        assert t["outcome"] == "turn_budget"
    relu = next(t for t in store.trajectories(run["id"]) if t["problem_key"] == "toy/relu")
    assert [x["status"] for x in store.turns(relu["id"])] == ["compile_error", "incorrect", "correct"]
