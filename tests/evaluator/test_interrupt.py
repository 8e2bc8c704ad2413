"""A `kill` (SIGTERM) or Ctrl-C of `kb-agent eval` / `problems check` leaves no evaluation child running
and no work directory behind (a real subprocess and a real signal)."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HANG_CANDIDATE = """
import pathlib

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        pathlib.Path("forward-started").touch()  # in the work directory: the test waits for it
        while True:
            pass
"""
HANG_REFERENCE = """
import pathlib

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        pathlib.Path("forward-started").touch()  # in the work directory: the test waits for it
        while True:
            pass


def get_inputs():
    return [torch.rand(4)]


def get_init_inputs():
    return []
"""


def _children_in(root: Path) -> list[int]:
    """Pids of processes whose working directory is under `root` (the evaluation children)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/cwd").startswith(str(root)):
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


CLI = "from kb_agent.agent.cli import main; main()"


def _interrupt_once_children_run(
    args: list[str], tmp_path: Path, sig: int, n_children: int = 1, code: str = CLI
) -> int | None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    cmd = [sys.executable, "-c", code, *args]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(_children_in(tmp_path)) < n_children and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(_children_in(tmp_path)) >= n_children, (
        proc.stderr.read() if proc.poll() is not None else "no child"
    )
    # into the candidate's (or reference's) code: its forward marks its work directory as it starts
    while len(list(tmp_path.glob("kb-*/forward-started"))) < n_children:
        assert time.monotonic() < deadline, "no evaluation reached the hanging forward"
        time.sleep(0.1)
    t0 = time.monotonic()
    proc.send_signal(sig)
    rc = proc.wait(timeout=30)
    assert time.monotonic() - t0 < 15, "the interrupt waited for a stage limit"
    for _ in range(50):
        if not _children_in(tmp_path):
            break
        time.sleep(0.1)
    assert not _children_in(tmp_path), "an evaluation child outlived the command"
    if sig != signal.SIGKILL:  # a SIGKILLed command cannot clean up; its children still die with it
        assert not list(tmp_path.glob("kb-eval-*")) and not list(tmp_path.glob("kb-check-*"))
    return rc


def test_sigterm_to_eval_kills_the_hanging_child(tmp_path):
    (tmp_path / "hangs.py").write_text(HANG_CANDIDATE)
    args = ["eval", str(tmp_path / "hangs.py"), "-p", "toy/relu", "--device", "cpu"]
    assert _interrupt_once_children_run(args, tmp_path, signal.SIGTERM) == 143


def test_a_sigkilled_eval_takes_its_hanging_child_with_it_and_the_next_sweeps_its_folder(
    tmp_path, monkeypatch
):
    (tmp_path / "hangs.py").write_text(HANG_CANDIDATE)
    args = ["eval", str(tmp_path / "hangs.py"), "-p", "toy/relu", "--device", "cpu"]
    assert _interrupt_once_children_run(args, tmp_path, signal.SIGKILL) == -signal.SIGKILL
    # the killed command could not remove its work directory; the next evaluation's (here, in this
    # process, its first step) does, since the process named in it is gone
    (left,) = tmp_path.glob("kb-eval-*")
    from kb_agent.evaluator.workdir import new_workdir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    fresh = new_workdir("kb-eval-")
    assert not left.exists() and list(tmp_path.glob("kb-eval-*")) == [fresh]


@pytest.mark.slow
def test_sigterm_to_problems_check_with_jobs_kills_every_check(tmp_path):
    refs = tmp_path / "refs"
    refs.mkdir()
    for i in (1, 2, 3):
        (refs / f"{i}_hang.py").write_text(HANG_REFERENCE)
    args = [
        "problems",
        "check",
        str(refs),
        "--device",
        "cpu",
        "--jobs",
        "2",
        "--db",
        str(tmp_path / "kb.sqlite"),
    ]
    assert _interrupt_once_children_run(args, tmp_path, signal.SIGINT, n_children=2) == 130


HANG_AT_IMPORT = """
import pathlib

pathlib.Path("forward-started").touch()  # in the build child's work directory
while True:
    pass
"""
# `evaluate` split in two children (EvalSettings.split_build), as a pool runs a CUDA candidate
SPLIT_EVAL = """
import sys
from pathlib import Path

from kb_agent.evaluator import EvalSettings, evaluate
from kb_agent.problems import resolve_one

try:
    evaluate(resolve_one("toy/relu"), Path(sys.argv[1]).read_text(), EvalSettings(device="cpu", split_build=True))
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.slow  # two more real interrupts
@pytest.mark.parametrize("where", ["build_child", "run_child"])
def test_sigint_to_a_split_evaluation_kills_the_child_of_either_phase(tmp_path, where):
    # build_child: its import hangs (the run child never starts); run_child: its forward hangs
    (tmp_path / "hangs.py").write_text(HANG_AT_IMPORT if where == "build_child" else HANG_CANDIDATE)
    assert (
        _interrupt_once_children_run([str(tmp_path / "hangs.py")], tmp_path, signal.SIGINT, code=SPLIT_EVAL)
        == 130
    )
