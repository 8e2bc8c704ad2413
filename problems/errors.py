"""The base of kb-agent's expected errors: what a user's input or setup causes and the user can fix.

Every package may import this module (it imports only the standard library), so each part derives its specific errors
from `KBAgentError`: `ProblemError` (a spec or dataset), `StoreError` (the trajectory store), `LLMError`
(a model call), `ReportError`, `UsageError` (bad options). The CLI catches `KBAgentError` alone and
turns it into one line on stderr and the exit code `exit_code`; anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import os
from pathlib import Path


class KBAgentError(Exception):
    """An expected failure whose message is one line saying what is wrong and what to do.

    `exit_code` is the process exit status the CLI uses for it (2: the command could not do its job as
    asked).
    """

    exit_code: int = 2


class UsageError(KBAgentError, ValueError):
    """Bad input from the user (an option value, a combination of options, a missing file)."""


def os_reason(e: OSError, path: str | os.PathLike | None = None) -> str:
    """Why writing `path` failed, as the end of a one-line message: `e`'s own words, except that a file
    standing where a folder of `path` must go is named ("run.csv is a file, not a folder") where the
    system says only "File exists" or "Not a directory"."""
    if path is not None and isinstance(e, (FileExistsError, NotADirectoryError)):
        for parent in Path(path).parents:
            if parent.exists():
                if not parent.is_dir():
                    return f"{parent} is a file, not a folder"
                break
    return e.strerror or str(e)


__all__ = ["KBAgentError", "UsageError", "os_reason"]
