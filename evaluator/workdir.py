"""Evaluation work directories in the temp dir, and the sweep that removes those a killed harness left.

Each evaluation runs in a fresh directory `<tmp>/kb-eval-<pid>-XXXXXXXX` (`kb-check-...` for reference
checks, `kb-base-...` for baseline timings), named for the harness process that made it. The harness
removes it when the evaluation ends, interrupted or not; a harness killed with SIGKILL cannot, so every
new work directory first sweeps the temp dir of those whose harness process is gone.

A directory whose name carries no pid (made by an older kb-agent) is removed once it is a day old.
Limits: the owner is looked up in this machine's process table, so harnesses in other PID namespaces
that share one temp dir must not share it with this sweep (give each its own TMPDIR).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

PREFIXES = ("kb-eval-", "kb-check-", "kb-base-")  # evaluations, reference checks, baseline timings
_OWNED = re.compile("(?:" + "|".join(map(re.escape, PREFIXES)) + r")(\d+)-[^/]+")
_UNOWNED_MAX_AGE_S = 24 * 3600


def new_workdir(prefix: str) -> Path:
    """Sweep stale work directories (`sweep_stale`), then make and return a fresh, empty
    `<tmp>/<prefix><this pid>-XXXXXXXX` (mode 0700). Raises ValueError for a `prefix` not in `PREFIXES`
    (the sweep would never remove it)."""
    if prefix not in PREFIXES:
        raise ValueError(f"work directory prefix {prefix!r} is not one of {PREFIXES} (evaluator/workdir.py)")
    sweep_stale()
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))


def _alive(pid: int) -> bool:
    """Whether process `pid` runs on this machine (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2 :].split()[0] != "Z"
    except (OSError, ValueError, IndexError):
        return True


def sweep_stale(root: str | Path | None = None) -> list[Path]:
    """Remove the work directories in `root` (default: the temp dir) whose harness process is gone, and
    pid-less ones older than a day. Returns the paths removed; never raises for a directory it cannot
    read or remove (another user's is skipped)."""
    root = Path(root if root is not None else tempfile.gettempdir())
    removed = []
    try:
        entries = [e for e in os.scandir(root) if e.name.startswith(PREFIXES)]
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        try:
            if (
                not entry.is_dir(follow_symlinks=False)
                or entry.stat(follow_symlinks=False).st_uid != os.getuid()
            ):
                continue
            m = _OWNED.fullmatch(entry.name)
            if m:
                if _alive(int(m.group(1))):
                    continue
            elif now - entry.stat(follow_symlinks=False).st_mtime < _UNOWNED_MAX_AGE_S:
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.lexists(entry.path):
            removed.append(Path(entry.path))
    return removed
