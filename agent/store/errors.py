"""`StoreError`, in a module of its own so that every module of the store can raise it."""

from __future__ import annotations

from kb_agent.problems.errors import KBAgentError


class StoreError(KBAgentError):
    """A store request that cannot be met (unknown run, duplicate name, no database); the message is
    one line that says what to do."""


__all__ = ["StoreError"]
