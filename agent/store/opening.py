"""Opening the store's file: whether this process may write it, and reading one it may not.

A command that only reads (`runs list`, `report`, `export`, `view`) opens the store `for_reading`: the
file must already be a kb-agent store (nothing is created in a missing, empty or foreign file), and a
store this process cannot write (the file, or its folder, is read-only) is opened read-only. WAL mode
makes that delicate (SQLite's WAL page, "read-only databases", 3.22+): a `mode=ro` connection needs the
`-wal` and `-shm` files beside the database to exist or be creatable, and where it creates them they are
left behind with the database's read-only mode, which later breaks writing once the user restores the
permission (seen here: "attempt to write a readonly database"). So:

- both `-wal` and `-shm` exist (a writer is live, or was killed): `mode=ro`, which reads the log;
- neither exists (the last writer closed cleanly, so the database file holds everything): `mode=ro`
  with `immutable=1`, which creates nothing and takes no locks. SQLite's URI page warns that a file
  marked immutable that does change can give wrong results: a writer with the permission this
  process lacks, starting while a report reads, is that case;
- a `-wal` with content but no `-shm`: refused, since reading it would create the `-shm`, and ignoring it
  would lose its rows.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from kb_agent.agent.store.errors import StoreError

SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def side_file(path: Path, suffix: str) -> Path:
    """`path` with `suffix` (`-wal`, `-shm`) appended to its name, where SQLite keeps them."""
    return path.with_name(path.name + suffix)


def unwritable(path: Path) -> str | None:
    """Why this process cannot write the existing store file `path`, or None when it can: the file is
    read-only, or its folder is and the `-wal` and `-shm` files are not both there to be written."""
    if not os.access(path, os.W_OK):
        return "the file is read-only"
    if os.access(path.parent, os.W_OK | os.X_OK):
        return None
    if all(os.access(side_file(path, s), os.W_OK) for s in ("-wal", "-shm")):
        return None
    return f"its folder {path.parent} is read-only"


def check_store_file(path: Path, missing: str) -> None:
    """StoreError unless `path` is a non-empty file that starts as SQLite files do; `missing` is the
    message for a missing or empty file (an empty file is what `touch` or a failed copy leaves)."""
    if not path.exists() or (path.is_file() and path.stat().st_size == 0):
        raise StoreError(missing)
    if path.is_dir():
        return  # the caller says it is a folder
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as e:
        raise StoreError(f"cannot read {path} ({e.strerror or e}); fix its permissions") from None
    if head != SQLITE_HEADER:
        raise StoreError(
            f"{path} is not an SQLite file, so not a kb-agent store; point --db / KB_DB at the store "
            "(runs/kb.sqlite unless you chose another)"
        )


def connect_read_only(path: Path, timeout_s: float) -> sqlite3.Connection:
    """A read-only connection to `path` that creates no file beside it (see the module docstring).

    Raises:
        StoreError: a `-wal` with content and no `-shm`. sqlite3.DatabaseError: as `sqlite3.connect`.
    """
    wal, shm = side_file(path, "-wal"), side_file(path, "-shm")
    if wal.exists() and shm.exists():
        query = "mode=ro"
    elif wal.exists() and wal.stat().st_size > 0:
        raise StoreError(
            f"{path} has a write-ahead log ({wal.name}) that cannot be read without writing beside it: "
            "copy the folder or fix its permissions"
        )
    else:
        query = "mode=ro&immutable=1"
    conn = sqlite3.connect(
        f"{path.resolve().as_uri()}?{query}", uri=True, timeout=timeout_s, check_same_thread=False
    )
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file and its log now
    except BaseException:
        conn.close()
        raise
    return conn


__all__ = ["SQLITE_HEADER", "check_store_file", "connect_read_only", "side_file", "unwritable"]
