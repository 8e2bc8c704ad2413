"""Strict mode's Landlock sandbox (evaluator/sandbox.py), with real system calls in real child processes."""

import json
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from evaluator import EvalSettings, Status, evaluate
from evaluator.sandbox import landlock_abi
from problems import resolve_one

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(landlock_abi() < 1, reason="this kernel has no Landlock")

PROBE = textwrap.dedent(
    """
    import json, os, socket, subprocess, sys, threading
    sys.path.insert(0, sys.argv[1])
    from evaluator.sandbox import restrict
    ok_dir, out_dir, port = sys.argv[2], sys.argv[3], int(sys.argv[4])
    info = restrict([ok_dir])
    import torch
    got = {"info": info}
    def attempt(name, fn):
        try:
            fn()
            got[name] = "done"
        except Exception as e:
            got[name] = f"{type(e).__name__}: {e}"[:200]
    attempt("python_inside", lambda: open(os.path.join(ok_dir, "a.txt"), "w").close())
    attempt("python_outside", lambda: open(os.path.join(out_dir, "a.txt"), "w").close())
    attempt("native_inside", lambda: torch.save(torch.ones(2), os.path.join(ok_dir, "t.pt")))
    attempt("native_outside", lambda: torch.save(torch.ones(2), os.path.join(out_dir, "t.pt")))
    attempt("remove_outside", lambda: os.unlink(os.path.join(out_dir, "keep.txt")))
    def in_thread():
        t = threading.Thread(target=attempt, args=("thread_outside", lambda: open(os.path.join(out_dir, "b.txt"), "w").close()))
        t.start(); t.join()
    in_thread()
    r = subprocess.run(["sh", "-c", f"echo x > {out_dir}/c.txt"], capture_output=True)
    got["shell_outside_rc"] = r.returncode
    attempt("tcp_connect", lambda: socket.create_connection(("127.0.0.1", port), timeout=5).close())
    attempt("signal_parent", lambda: os.kill(os.getppid(), 0))
    print(json.dumps(got))
    """
)


def test_restrict_holds_python_native_code_threads_subprocesses_tcp_and_signals(tmp_path):
    ok_dir, out_dir = tmp_path / "ok", tmp_path / "out"
    ok_dir.mkdir()
    out_dir.mkdir()
    (out_dir / "keep.txt").write_text("keep")
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []
    listener.settimeout(20)
    t = threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True)
    t.start()
    try:
        port = listener.getsockname()[1]
        r = subprocess.run([sys.executable, "-c", PROBE, str(ROOT), str(ok_dir), str(out_dir), str(port)],
                           capture_output=True, text=True, timeout=120, env={"TMPDIR": str(ok_dir), "PATH": "/usr/bin:/bin"})  # fmt: skip
    finally:
        listener.close()
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["python_inside"] == got["native_inside"] == "done"
    for key in ("python_outside", "native_outside", "remove_outside", "thread_outside"):
        assert got[key] != "done", key
    assert got["shell_outside_rc"] != 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["keep.txt"]  # nothing written, nothing removed
    if got["info"]["landlock_abi"] >= 4:
        assert got["tcp_connect"] != "done" and not accepted
    if got["info"]["landlock_abi"] >= 6:
        assert got["signal_parent"] != "done"


def native_write(target: Path) -> str:
    """The honest Triton ReLU candidate, plus a torch.save (C++ file writer: no Python audit event) to `target`."""
    src = (ROOT / "tests" / "candidates" / "triton_relu.py").read_text()
    assert src.rstrip().endswith("return y")
    return src.rstrip()[: -len("return y")] + f"torch.save(y, {str(target)!r})\n        return y\n"


def test_strict_evaluation_runs_sandboxed_and_a_native_write_outside_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    target = tmp_path / "answers.pt"
    src = native_write(target)
    r = evaluate(resolve_one("toy/relu"), src, EvalSettings(device="cpu", correctness_trials=1, timed_trials=2))
    assert r.status == Status.RUNTIME_ERROR, r.message
    assert "sandbox denies writing files" in r.message
    assert not target.exists()
    assert r.strict["sandbox"]["landlock_abi"] >= 1
    # parity mode follows KernelBench, which has no sandbox; sandbox=False turns it off in strict mode
    for settings in (EvalSettings(device="cpu", strict=False, correctness_trials=1, timed_trials=2),
                     EvalSettings(device="cpu", sandbox=False, correctness_trials=1, timed_trials=2)):  # fmt: skip
        r = evaluate(resolve_one("toy/relu"), src, settings)
        assert target.exists(), r.message
        target.unlink()


def test_eval_no_sandbox_flag_reaches_the_child(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from agent.cli import app

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    target = tmp_path / "answers.pt"
    cand = tmp_path / "cand.py"
    cand.write_text(native_write(target))
    args = ["eval", str(cand), "-p", "toy/relu", "--device", "cpu", "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0 and json.loads(r.output)["status"] == "runtime_error" and not target.exists()
    r = CliRunner().invoke(app, [*args, "--no-sandbox"])
    assert r.exit_code == 0 and target.exists(), r.output
