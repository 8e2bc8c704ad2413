"""`SharedStore`: one `Store` written from many threads (`solve --jobs`), one call at a time.

Each method call runs whole under one lock, on the Store's one connection, and each write commits
before the lock is let go (sqlite-utils commits every statement that opened its own transaction), so
the store has a single writer inside the process and every transaction is short; WAL mode lets other
processes (`kb-agent report`) read meanwhile.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from kb_agent.agent.store.queries import Store


class SharedStore:
    """A thread-safe view of `store`: the same methods and attributes, each method call under one lock.

    `SharedStore(SharedStore(s))` is `SharedStore(s)`'s lock again (wrapping twice adds no second lock).
    """

    def __init__(self, store: Store | SharedStore):
        if isinstance(store, SharedStore):
            store, lock = store.store, store.lock
        else:
            lock = threading.RLock()
        self.store = store
        self.lock = lock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.store, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def locked(*args: Any, **kwargs: Any) -> Any:
            with self.lock:
                return attr(*args, **kwargs)

        return locked

    def __enter__(self) -> SharedStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["SharedStore"]
