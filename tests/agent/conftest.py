"""Fixtures shared by the agent tests."""

import pytest
from kb_agent.agent.store import MIGRATIONS, migrate
from sqlite_utils import Database


@pytest.fixture
def old_database(tmp_path):
    """A factory for a database as an older kb-agent left it, to test a migration's backfill:
    `old_database("m013", turns)` applies every migration named before `"m013"` to a new file, inserts
    one finished run (`r-1`), its trajectory 1 and one turn per dict of `turns` (idx 1, 2, ...; each
    dict's columns over the ones every turn needs), closes it and returns its path. Opening a `Store`
    on that path applies the rest."""

    def make(before: str, turns: list[dict]):
        path = tmp_path / "old.sqlite"
        db = Database(path)
        migrate(db, [m for m in MIGRATIONS if m.__name__ < before])
        db["runs"].insert({"id": "r-1", "name": "old", "created": "x", "status": "finished"})
        db["trajectories"].insert({"id": 1, "run_id": "r-1", "problem_key": "toy/relu", "problem_json": "{}",
                                   "sample": 0, "created": "x"})  # fmt: skip
        for i, columns in enumerate(turns, start=1):
            db["turns"].insert({"trajectory_id": 1, "idx": i, "messages": "[]", "created": "x", **columns})
        db.close()
        return path

    return make
