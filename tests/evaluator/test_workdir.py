"""Work directories: named for their harness process, swept once it is gone (no evaluation child here;
the SIGKILL case with a real evaluation is in test_interrupt.py)."""

import os
import subprocess
import sys
import tempfile
import time

import pytest
from kb_agent.evaluator.workdir import new_workdir, sweep_stale


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_the_sweep_removes_only_what_a_gone_process_left(tmp_path):
    dead = tmp_path / f"kb-eval-{_dead_pid()}-abc123"
    (dead / "home").mkdir(parents=True)
    (dead / "home" / "candidate.py").write_text("x")
    dead_check = tmp_path / f"kb-check-{_dead_pid()}-def456"
    dead_check.mkdir()
    dead_base = tmp_path / f"kb-base-{_dead_pid()}-ghi789"
    dead_base.mkdir()
    mine = tmp_path / f"kb-eval-{os.getpid()}-live99"
    mine.mkdir()
    other = tmp_path / f"unrelated-{_dead_pid()}-x"
    other.mkdir()
    assert sorted(sweep_stale(tmp_path)) == sorted([dead, dead_check, dead_base])
    assert not dead.exists() and not dead_check.exists() and not dead_base.exists()
    assert mine.is_dir() and other.is_dir()


def test_a_folder_without_a_pid_is_removed_once_a_day_old(tmp_path):
    old, new = tmp_path / "kb-eval-olda1b2c3", tmp_path / "kb-eval-newa1b2c3"
    old.mkdir()
    new.mkdir()
    day_ago = time.time() - 25 * 3600
    os.utime(old, (day_ago, day_ago))
    assert sweep_stale(tmp_path) == [old]
    assert new.is_dir()


def test_a_new_workdir_carries_the_pid_and_sweeps_first(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stale = tmp_path / f"kb-eval-{_dead_pid()}-zz"
    stale.mkdir()
    d = new_workdir("kb-eval-")
    assert d.parent == tmp_path and d.name.startswith(f"kb-eval-{os.getpid()}-") and d.is_dir()
    assert not stale.exists()
    assert sweep_stale(tmp_path) == []  # its own harness runs: kept


def test_a_prefix_the_sweep_does_not_know_is_refused():
    with pytest.raises(ValueError, match="kb-other-"):
        new_workdir("kb-other-")
