"""A full disk as one line: which file could not be written and how much space is left there.

SQLite says `database or disk is full` (SQLITE_FULL) when a write finds no space, whether the disk is
full or the database reached a limit (`PRAGMA max_page_count`, which the tests use to stand in for a
full disk); the OS says ENOSPC. Either way every write before it is committed (each is its own
transaction), so the line ends with how to go on.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
from pathlib import Path


def disk_full(exc: BaseException) -> bool:
    """True for SQLite's `database or disk is full` and for an OSError ENOSPC."""
    if isinstance(exc, sqlite3.OperationalError):
        return "database or disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC


def free_space(path: str | os.PathLike) -> str:
    """The space free on the filesystem holding `path` (or its nearest existing folder), e.g. `1.2 GB`;
    `unknown` when it cannot be read."""
    where = Path(path).absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return "unknown"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if free >= size:
            return f"{free / size:.1f} {unit}"
    return f"{free} bytes"


def full_line(exc: BaseException, store: str | os.PathLike) -> str:
    """`no space to write PATH (WHAT; FREE free there): free some space`, PATH being the file the OS named,
    else the store (`store`) SQLite was writing."""
    named = getattr(exc, "filename", None) if isinstance(exc, OSError) else None
    where = Path(named or store)
    what = "database or disk is full" if isinstance(exc, sqlite3.Error) else (exc.strerror or str(exc))
    return f"no space to write {where} ({what}; {free_space(where)} free there): free some space"


__all__ = ["disk_full", "free_space", "full_line"]
