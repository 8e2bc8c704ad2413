"""Whether the process that owns a run is still alive: the store records each run's pid and host
(migration m005), and a run left `running` by a process that is gone reads as `killed`.

Only a run recorded on this host can be judged; another machine's run, or one recorded before m005,
is taken as alive.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any


def this_process() -> dict[str, Any]:
    """The owner to record for a run this process runs: {"pid": int, "host": str}."""
    return {"pid": os.getpid(), "host": socket.gethostname()}


def owner_gone(pid: int | None, host: str | None) -> bool:
    """True when the run's process is known to be gone: recorded on this host and no such pid exists."""
    if not pid or host != socket.gethostname():
        return False  # another machine's run, or one from before m005: cannot tell
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by someone else
        return False
    return False


def running_elsewhere(run: Mapping[str, Any]) -> int | None:
    """The pid of another live process on this machine running `run` (a row as `Store.get_run` gives it,
    where a run whose process is gone already reads `killed`), else None."""
    if (
        run.get("status") == "running"
        and run.get("host") == socket.gethostname()
        and run.get("pid") != os.getpid()
    ):
        return run.get("pid")
    return None


__all__ = ["owner_gone", "running_elsewhere", "this_process"]
