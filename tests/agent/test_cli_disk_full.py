"""A full disk is one line that says where, how much is free there and how to go on, and what was stored
before it stays (found by a new user: a full disk mid-run printed a 70-line `sqlite3.OperationalError:
database or disk is full` traceback; `solve --resume` on a copy finished the run). The store's
`PRAGMA max_page_count` stands in for the full disk: SQLite answers it with the same error."""

from __future__ import annotations

import errno

import pytest
from kb_agent.agent.cli import _run_and_report, _space_checked
from kb_agent.agent.llm import ScriptedModel
from kb_agent.agent.loop import SolveConfig, resume, solve
from kb_agent.agent.store import Store, StoreError
from kb_agent.evaluator.fake import ScriptedEvaluator, canned
from kb_agent.problems import resolve

RELU = resolve("toy")[0]


def reply(tag: str, pad: int = 0) -> str:
    return (
        f"```python\nimport torch\n\nclass ModelNew(torch.nn.Module):  # {tag}\n    pass\n```\n" + "x" * pad
    )


def filling_run(db):
    """A stand-in for `job.start`: the real loop on a store that has room for a few pages more than it
    holds, so turn 1 is stored and turn 2's long reply finds the "disk" full."""

    def run(on_turn=None, on_start=None, on_trajectory=None, **_):
        store = Store(db)
        pages = store.db.execute("PRAGMA page_count").fetchone()[0]
        store.db.execute(f"PRAGMA max_page_count = {pages + 20}")
        model = ScriptedModel([reply("v1"), reply("v2", pad=400_000), reply("v3")])
        evaluator = ScriptedEvaluator([canned("incorrect")] * 3)
        config = SolveConfig(turns=3, run_name="full", gpu_name="NVIDIA H100", arch="9.0")
        return solve([RELU], config, model, evaluator, store, on_turn, on_start, on_trajectory=on_trajectory)

    return run


def test_a_full_store_mid_run_is_one_line_and_the_turns_before_stay(tmp_path, monkeypatch):
    monkeypatch.delenv("KB_DB", raising=False)
    db = tmp_path / "kb.sqlite"
    with pytest.raises(StoreError) as e:
        _run_and_report(filling_run(db), db)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"no space to write {db} (database or disk is full; "), line
    assert " free there): free some space" in line, line
    assert f"`kb-agent solve --resume full --db {db}` continues it" in line, line
    with Store(db) as s:
        run = s.get_run("full")
        assert run["status"] == "failed"
        (traj,) = s.trajectories(run["id"])
        turns = s.turns(traj["id"])
        assert turns[0]["status"] == "incorrect" and "# v1" in turns[0]["response"]  # logged before: kept
        assert [t["response"] for t in turns[1:]] == [None]  # turn 2's reply never landed: asked again
        ended = resume("full", ScriptedModel([reply("v2"), reply("v3")]),
                       ScriptedEvaluator([canned("incorrect"), canned("correct", 1.5)]), s)  # fmt: skip
        assert s.get_run(ended)["status"] == "finished"
        assert [t["status"] for t in s.turns(traj["id"])] == ["incorrect", "incorrect", "correct"]


def test_no_space_from_the_os_names_the_file_it_could_not_write(tmp_path):
    db = tmp_path / "kb.sqlite"
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "turns.parquet"))
    with pytest.raises(StoreError) as e, _space_checked(db, "; the baselines timed so far are stored"):
        raise full
    assert str(e.value).startswith(
        f"no space to write {tmp_path / 'out' / 'turns.parquet'} (No space left on"
    )
    assert str(e.value).endswith("free there): free some space; the baselines timed so far are stored")
    with pytest.raises(OSError, match="Permission denied"), _space_checked(db):
        raise OSError(errno.EACCES, "Permission denied")  # anything else goes on as it was
