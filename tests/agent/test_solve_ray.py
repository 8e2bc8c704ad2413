"""`--executor ray` through the CLI: solve and problems check on a local Ray instance give the statuses the
local executor gives (scripted replies from the fake OpenAI server, Triton candidates under the
interpreter); Ray missing, a dead address and `--ray-address` without `--executor ray` are one line and
exit 2 with nothing stored."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kb_agent.agent.fakeserver import FakeLLMServer
from kb_agent.agent.store import Store

ROOT = Path(__file__).resolve().parents[2]
REPLIES = [p.read_text() for p in sorted((ROOT / "agent" / "scripted" / "demo").glob("*.md"))]
CLI = [sys.executable, "-m", "kb_agent.agent.cli"]


def _solve(base: str, db: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    args = [*CLI, "solve", "--problem", "toy/relu,2", "--turns", "3", "--model", "openai/scripted", "--api-base",
            base, "--device", "cpu", "--no-retime", "--db", str(db), "--run-name", name, "--jobs", "2", *extra]  # fmt: skip
    return subprocess.run(args, capture_output=True, text=True, timeout=600)


def _statuses(db: Path, name: str) -> dict:
    store = Store(db)
    run = store.get_run(name)
    out = {"run": run["status"]}
    for t in store.trajectories(run["id"]):
        out[t["problem_key"]] = (t["outcome"], [x["status"] for x in store.turns(t["id"])])
    store.close()
    return out


@pytest.mark.slow  # two CLI runs of 2 trajectories x 3 turns, one of them starting a Ray instance
def test_solve_on_ray_ends_with_the_statuses_of_the_local_executor(tmp_path):
    pytest.importorskip("ray")
    db = tmp_path / "kb.sqlite"
    with FakeLLMServer(REPLIES, by_turn=True) as srv:
        ray_run = _solve(srv.openai_base, db, "on-ray", "--executor", "ray")
        assert ray_run.returncode == 0, ray_run.stderr
        local_run = _solve(srv.openai_base, db, "local", "--executor", "local")
        assert local_run.returncode == 0, local_run.stderr
    on_ray, local = _statuses(db, "on-ray"), _statuses(db, "local")
    assert on_ray == local
    assert on_ray["toy/relu"] == ("turn_budget", ["compile_error", "incorrect", "correct"])
    assert on_ray["run"] == "finished"


@pytest.mark.slow  # a Ray instance and two reference checks under the interpreter
def test_problems_check_on_ray_agrees_with_the_local_executor(tmp_path):
    pytest.importorskip("ray")
    got = []
    for executor in ("ray", "local"):
        r = subprocess.run([*CLI, "problems", "check", "toy/relu", "--device", "cpu", "--json", "--executor", executor,
                            "--db", str(tmp_path / f"{executor}.sqlite")], capture_output=True, text=True, timeout=600)  # fmt: skip
        assert r.returncode == 0, r.stderr
        (line,) = r.stdout.splitlines()
        got.append({k: json.loads(line)[k] for k in ("key", "status", "flags")})
    assert got[0] == got[1] and got[0]["status"] == "ok"


def test_a_dead_ray_address_is_one_line_exit_2_and_no_run_is_stored(tmp_path):
    pytest.importorskip("ray")
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = tmp_path / "kb.sqlite"
    r = subprocess.run([*CLI, "solve", "-p", "toy/relu", "--model", "scripted/demo", "--device", "cpu", "--db", str(db),
                        "--executor", "ray", "--ray-address", f"127.0.0.1:{port}"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in line
    assert not db.exists() or not Store(db).list_runs()


def test_ray_missing_says_how_to_install_it(tmp_path):
    code = "import sys; sys.modules['ray'] = None; from kb_agent.agent.cli import main; main()"
    r = subprocess.run([sys.executable, "-c", code, "solve", "-p", "toy/relu", "--model", "scripted/demo", "--device",
                        "cpu", "--db", str(tmp_path / "kb.sqlite"), "--executor", "ray"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert 'pip install "kb-agent[ray]"' in line


def test_a_ray_address_without_the_ray_executor_is_refused(tmp_path):
    r = subprocess.run([*CLI, "solve", "-p", "toy/relu", "--model", "scripted/demo", "--device", "cpu",
                        "--db", str(tmp_path / "kb.sqlite"), "--ray-address", "auto"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and "--ray-address needs --executor ray" in r.stderr


def test_an_empty_ray_address_is_refused_not_taken_for_a_local_instance(tmp_path):
    """Found by a new-user pass: `--ray-address ''` (an unset variable) quietly started a local Ray."""
    r = subprocess.run([*CLI, "solve", "-p", "toy/relu", "--model", "scripted/demo", "--device", "cpu",
                        "--db", str(tmp_path / "kb.sqlite"), "--executor", "ray", "--ray-address", ""],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and "--ray-address is empty" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
