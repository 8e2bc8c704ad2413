"""Opening the store for a command that only reads (found by a new user): a store the user cannot write
is read read-only instead of failing on WAL, and a missing, empty or foreign file is reported, never
created, filled with the schema or migrated."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys

import pytest
from kb_agent.agent.cli import app
from kb_agent.agent.store import Store, StoreError
from kb_agent.agent.store import opening as opening_module
from kb_agent.problems import Problem
from typer.testing import CliRunner

runner = CliRunner()
RELU = Problem(0, 1, "relu", "class Model: ...\n", "toy")
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def make_store(path) -> str:
    """A store at `path` with one finished run `demo` of one evaluated turn; returns the run id."""
    with Store(path) as s:
        rid = s.create_run("demo", {"turns": 1}, "scripted/demo", "triton", "fp32")
        tid = s.create_trajectory(rid, RELU)
        u = s.start_turn(tid, 1, [{"role": "user", "content": "go"}])
        s.record_response(u, "reply")
        s.record_evaluation(u, code="class ModelNew: ...\n", status="correct",
                            eval_result={"status": "correct", "speedup": 1.5}, feedback="")  # fmt: skip
        s.finish_trajectory(tid, "turn_budget")
        s.set_run_status(rid, "finished")
    return rid


def read_commands(db, out) -> list[list[str]]:
    return [["runs", "list"], ["runs", "show", "demo"], ["report", "--json"],
            ["export", "demo", "-o", str(out / "demo.jsonl")], ["view", "demo", "-o", str(out / "demo.html")]]  # fmt: skip


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def kb_agent(*args) -> subprocess.CompletedProcess:
    code = "from kb_agent.agent.cli import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)


# ---------------------------------------------------------------- a store the user cannot write


@pytest.mark.skipif(ROOT, reason="chmod does not stop root")
@pytest.mark.parametrize("read_only", ["file", "folder", "both"])
def test_every_read_command_reads_a_store_it_cannot_write(tmp_path, read_only):
    folder, out = tmp_path / "store", tmp_path / "out"
    folder.mkdir()
    out.mkdir()
    db = folder / "kb.sqlite"
    make_store(db)
    before = digest(db)
    if read_only in ("file", "both"):
        db.chmod(0o444)
    if read_only in ("folder", "both"):
        folder.chmod(0o555)
    try:
        for args in read_commands(db, out):
            r = runner.invoke(app, [*args, "--db", str(db)])
            assert r.exit_code == 0, (args, r.output, r.exception)
        assert (out / "demo.jsonl").read_text().count("\n") == 1
        assert sorted(p.name for p in folder.iterdir()) == ["kb.sqlite"]  # no -wal / -shm left behind
        assert digest(db) == before
        r = kb_agent("rescore", "demo", "--db", str(db))  # a command that writes: one line
        assert r.returncode == 2
        (line,) = r.stderr.strip().splitlines()
        assert f"{db} is read-only" in line and "copy it or fix its permissions" in line, line
    finally:
        folder.chmod(0o755)
        db.chmod(0o644)
    with Store(db) as s:  # the owner writes again once the permission is back
        s.create_run("after", {}, "m", "cuda", "fp32")


@pytest.fixture
def cannot_write(monkeypatch):
    """Make `os.access` answer, for the store module, that nothing under the given paths is writable
    (as root, where chmod does not bite): `cannot_write(path)`."""

    def deny(path):
        real = os.access

        def access(p, mode, *a, **k):
            if mode & os.W_OK and str(p).startswith(str(path)):
                return False
            return real(p, mode, *a, **k)

        monkeypatch.setattr(opening_module.os, "access", access)

    return deny


def test_a_store_not_writable_here_opens_read_only_and_creates_nothing(tmp_path, cannot_write):
    db = tmp_path / "kb.sqlite"
    make_store(db)
    before = digest(db)
    cannot_write(db)
    with Store(db, for_reading=True) as s:
        assert s.read_only and [r["name"] for r in s.list_runs()] == ["demo"]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            s.db.execute("DELETE FROM runs")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kb.sqlite"] and digest(db) == before
    for args in read_commands(db, tmp_path):
        r = runner.invoke(app, [*args, "--db", str(db)])
        assert r.exit_code == 0, (args, r.output, r.exception)
    with pytest.raises(
        StoreError, match=r"is read-only \(the file is read-only\): copy it or fix its permissions"
    ):
        Store(db)
    with pytest.raises(StoreError, match="is read-only"):
        Store(db, create=False)  # rescore writes


def test_a_read_only_reader_sees_what_a_live_writer_has_not_checkpointed(tmp_path, cannot_write):
    db = tmp_path / "kb.sqlite"
    make_store(db)
    writer = sqlite3.connect(db)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("UPDATE runs SET name = 'renamed'")
    writer.commit()
    assert (tmp_path / "kb.sqlite-wal").stat().st_size > 0
    cannot_write(db)
    with Store(db, for_reading=True) as s:
        assert s.read_only and s.get_run("renamed")["status"] == "finished"
    writer.close()


def test_a_read_only_store_with_a_log_it_cannot_read_or_an_older_schema_is_one_line(
    tmp_path, cannot_write, old_database
):
    db = tmp_path / "kb.sqlite"
    make_store(db)
    (tmp_path / "kb.sqlite-wal").write_bytes(b"\0" * 64)  # a log without its -shm: reading would create one
    cannot_write(tmp_path)
    with pytest.raises(StoreError, match="write-ahead log .* copy the folder or fix its permissions"):
        Store(db, for_reading=True)
    old = old_database("m003", [])
    with pytest.raises(StoreError, match="needs .* schema migrations .* is read-only: copy it or fix"):
        Store(old, for_reading=True)


# ---------------------------------------------------------------- no store, or not a kb-agent store


def test_read_commands_on_a_missing_or_empty_file_create_nothing(tmp_path):
    empty, missing = tmp_path / "empty.sqlite", tmp_path / "none" / "kb.sqlite"
    empty.touch()
    for db in (empty, missing):
        for args in read_commands(db, tmp_path):
            r = runner.invoke(app, [*args, "--db", str(db)])
            assert isinstance(r.exception, StoreError), (args, r.output)
            assert str(r.exception).startswith(f"no kb-agent store at {db} (run `kb-agent solve ...` first")
    assert empty.stat().st_size == 0 and not missing.parent.exists()
    r = kb_agent("report", "--db", str(empty))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    with Store(empty) as s:  # a command that writes makes the store in it, as before
        assert "runs" in s.db.table_names()


def test_read_commands_on_a_file_that_is_not_a_store_say_what_it_is_and_leave_it(tmp_path):
    text, other, blank = tmp_path / "notes.sqlite", tmp_path / "other.sqlite", tmp_path / "blank.sqlite"
    text.write_text("hello\n")
    with sqlite3.connect(other) as c:
        c.execute("CREATE TABLE x (a)")
    with sqlite3.connect(blank) as c:
        c.execute("PRAGMA user_version = 1")  # an SQLite file without tables
    before = {p: digest(p) for p in (text, other, blank)}
    cases = {text: "is not an SQLite file, so not a kb-agent store", other: "is an SQLite database but not a "
             "kb-agent store", blank: "no kb-agent store at"}  # fmt: skip
    for db, said in cases.items():
        r = runner.invoke(app, ["runs", "list", "--db", str(db)])
        assert isinstance(r.exception, StoreError) and said in str(r.exception), (db, r.exception)
    assert {p: digest(p) for p in before} == before
