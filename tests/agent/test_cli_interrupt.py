"""The line an interrupted `solve` / `solve --resume` / `fork` prints names the run it leaves, or says that
none was created (a new user's Ctrl-C 8 s into `solve --run-name ctrlc3`, before the run existed, was told
`kb-agent solve --resume RUN` continues it; `solve --resume ctrlc3` then said there is no such run)."""

from __future__ import annotations

import pytest
import typer
from kb_agent.agent.cli import _run_and_report
from kb_agent.agent.store import Store


def _interrupt(db, *, create: str | None = None):
    """A stand-in for `job.start`: creates run `create` in `db` (when given), then meets a Ctrl-C."""

    def run(**_callbacks):
        if create is not None:
            with Store(db) as s:
                s.create_run(create, {}, "scripted/demo", "triton", "fp32")
        raise KeyboardInterrupt

    return run


def _stderr_of(run, db, capsys, **kwargs) -> str:
    with pytest.raises(typer.Exit) as e:
        _run_and_report(run, db, **kwargs)
    assert e.value.exit_code == 130
    return " ".join(capsys.readouterr().err.split())


def test_an_interrupt_before_the_run_exists_says_nothing_was_stored(tmp_path, capsys):
    db = tmp_path / "kb.sqlite"
    line = _stderr_of(_interrupt(db), db, capsys)
    assert "no run was created" in line and "run the command again" in line, line
    assert "--resume" not in line
    with Store(db) as s:  # another process's run in the same store is not this one
        s.create_run("elsewhere", {}, "scripted/demo", "triton", "fp32")
        s.db.execute("UPDATE runs SET pid = 1")
    line = _stderr_of(_interrupt(db), db, capsys)
    assert "no run was created" in line and "elsewhere" not in line, line


def test_an_interrupt_after_the_run_exists_names_it(tmp_path, capsys):
    db = tmp_path / "kb.sqlite"
    line = _stderr_of(_interrupt(db, create="ctrlc3"), db, capsys)
    assert "`kb-agent solve --resume ctrlc3` continues it" in line and "RUN" not in line, line


def test_an_interrupted_resume_names_the_run_it_was_given(tmp_path, capsys):
    db = tmp_path / "kb.sqlite"
    line = _stderr_of(_interrupt(db), db, capsys, resuming="old-run")
    assert "`kb-agent solve --resume old-run` continues it" in line, line


def test_the_store_as_the_command_line_gives_it_a_string_and_the_hint_names_it(tmp_path, capsys, monkeypatch):
    """Seen by a new user: Ctrl-C of a new `solve --db PATH` crashed in the hint (the option is a str,
    AttributeError: 'str' object has no attribute 'exists'), and the hints left out --db PATH."""
    monkeypatch.delenv("KB_DB", raising=False)
    db = str(tmp_path / "kb.sqlite")
    line = _stderr_of(_interrupt(db, create="ctrlc4"), db, capsys)
    assert f"`kb-agent solve --resume ctrlc4 --db {db}` continues it" in line, line
    empty = str(tmp_path / "empty.sqlite")
    assert "no run was created" in _stderr_of(_interrupt(empty), empty, capsys)
    monkeypatch.setenv("KB_DB", db)  # the store the command opens by itself: no --db in the hint
    line = _stderr_of(_interrupt(db, create="ctrlc5"), db, capsys)
    assert "`kb-agent solve --resume ctrlc5` continues it" in line, line
