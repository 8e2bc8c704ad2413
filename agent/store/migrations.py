"""The store's schema as numbered migrations, each registered once and recorded in the database.

A migration is a function `mNNN_what(db)` decorated with `@migration`; the decorator checks that NNN is
the next number and appends it to `MIGRATIONS`, so the order of the functions in this file is the order
they are applied and no list names them a second time. `migrate` applies, on every open of the store,
the migrations that the database's `_migrations` table does not yet record, and records each one with
the time it was applied (ISO 8601, UTC).

A migration, once released, is never edited: a change to the schema is a new migration at the end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from kb_agent.agent.store.rows import eval_seconds, now, verdict_columns
from sqlite_utils import Database

Migration = Callable[[Database], None]

_registered: list[Migration] = []
_NAME = re.compile(r"m(\d{3})_\w+")


def migration(fn: Migration) -> Migration:
    """Register `fn` as the next migration and return it unchanged.

    Raises:
        ValueError: the name is not `mNNN_what` with NNN one more than the last registered migration.
    """
    m = _NAME.fullmatch(fn.__name__)
    expected = len(_registered) + 1
    if m is None or int(m.group(1)) != expected:
        raise ValueError(f"migration {fn.__name__!r} must be named m{expected:03d}_<what it does>")
    _registered.append(fn)
    return fn


@migration
def m001_initial(db: Database) -> None:
    """The three tables: runs, trajectories (one per problem and sample), turns (one per model call)."""
    db["runs"].create(
        {
            "id": str,  # time-sortable: r-20261130T051200-3f2a
            "name": str,
            "created": str,  # ISO 8601, UTC
            "status": str,  # RUN_STATUSES
            "config": str,  # JSON: the full solve config
            "model": str,
            "backend": str,
            "precision": str,
            "gpu": str,  # NULL until the first evaluation reports the hardware
            "hardware": str,  # JSON
            "versions": str,  # JSON: package -> version
        },
        pk="id",
        not_null=["name", "created", "status"],
    )
    db["runs"].create_index(["name"], unique=True)
    db["trajectories"].create(
        {
            "id": int,
            "run_id": str,
            "level": int,  # 0 = toy, NULL = loose file
            "problem_id": int,
            "problem_name": str,
            "problem_key": str,  # "2/40", "toy/relu", or the file name
            "problem_json": str,  # JSON: the full Problem, reference source included
            "sample": int,
            "outcome": str,  # NULL while unfinished, else OUTCOMES
            "best_turn": int,
            "best_speedup": float,
            "created": str,
            "finished": str,
        },
        pk="id",
        foreign_keys=[("run_id", "runs", "id")],
        not_null=["run_id", "problem_key", "problem_json", "sample", "created"],
    )
    db["turns"].create(
        {
            "id": int,
            "trajectory_id": int,
            "idx": int,  # 1-based
            "messages": str,  # JSON: the messages sent to the model
            "response": str,  # raw model text; NULL until it arrives
            "code": str,  # the extracted candidate; NULL if none
            "status": str,  # NULL until evaluated, else TURN_STATUSES
            "correct": int,  # 0/1
            "runtime_ms": float,  # candidate mean
            "ref_runtime_ms": float,  # reference mean
            "speedup": float,  # ref_runtime_ms / runtime_ms
            "eval_json": str,  # JSON: the full EvalResult
            "feedback": str,  # rendered for the next turn
            "tokens_in": int,
            "tokens_out": int,
            "cost_usd": float,
            "latency_s": float,
            "model_answered": str,  # the model name the provider reported
            "finish_reason": str,
            "llm_json": str,  # JSON: anything else recorded about the call
            "created": str,
            "responded_at": str,
            "evaluated_at": str,
        },
        pk="id",
        foreign_keys=[("trajectory_id", "trajectories", "id")],
        not_null=["trajectory_id", "idx", "messages", "created"],
    )
    db["turns"].create_index(["trajectory_id", "idx"], unique=True)


@migration
def m002_trajectory_indexes(db: Database) -> None:
    """Indexes for the queries reports and resume run: a run's trajectories (one per problem and
    sample, which the index also enforces) and runs by creation time (`report` with no run = latest)."""
    db["trajectories"].create_index(["run_id", "problem_key", "sample"], unique=True)
    db["runs"].create_index(["created"])


@migration
def m003_run_finished(db: Database) -> None:
    """`runs.finished`: when the run left the `running` status (ISO UTC), so reports can give wall time."""
    db["runs"].add_column("finished", str)


@migration
def m004_problem_checks(db: Database) -> None:
    """`problem_checks`: degenerate-reference findings of `kb-agent problems check`, one row per
    (problem, GPU, precision), the latest check winning; reports show them beside fast_p."""
    db["problem_checks"].create(
        {
            "problem_key": str,
            "level": int,
            "problem_id": int,
            "name": str,
            "gpu": str,
            "precision": str,
            "status": str,
            "flags": str,
            "nondeterministic": int,
            "zeros_pass": int,
            "constant_pass": int,
            "reference_fails": str,
            "details": str,
            "checked": str,
        },  # fmt: skip
        pk=("problem_key", "gpu", "precision"),
    )


@migration
def m005_run_owner(db: Database) -> None:
    """`runs.pid` and `runs.host`: the process running the run, so a run left `running` by a process that
    was killed (SIGKILL, a crash, a lost machine) reads as `killed` instead of `running` forever."""
    db["runs"].add_column("pid", int)
    db["runs"].add_column("host", str)


@migration
def m006_problem_check_source(db: Database) -> None:
    """`problem_checks.code_sha256`: the SHA-256 of the reference source that was checked, so a report
    shows a finding only beside trajectories on that same source (another file of the same name, or a
    newer dataset version of the problem, is not the problem that was checked)."""
    db["problem_checks"].add_column("code_sha256", str)


@migration
def m007_turn_retime(db: Database) -> None:
    """The winner's curse: a trajectory's best correct turn is re-timed in a fresh process when the
    trajectory ends. `turns.retimed_speedup` (reference ms / candidate ms, KernelBench's protocol, from
    that fresh process), `retimed_repro_speedup` (the interleaved, reproducible figure of the same run),
    `retimed_status` (that evaluation's status: a winner that is not correct again does not count) and
    `retimed_json` (its whole `EvalResult`)."""
    db["turns"].add_column("retimed_speedup", float)
    db["turns"].add_column("retimed_repro_speedup", float)
    db["turns"].add_column("retimed_status", str)
    db["turns"].add_column("retimed_json", str)


@migration
def m008_turn_verdicts(db: Database) -> None:
    """`turns.parity_status`, `turns.failed_checks` and `turns.library_share` (see
    `rows.verdict_columns`), so a report scores every turn under strict mode and under KernelBench's
    rules, counts rejections per strict check and shows library shares without reading the JSON.
    Turns already evaluated are filled from their stored `EvalResult`."""
    db["turns"].add_column("parity_status", str)
    db["turns"].add_column("failed_checks", str)  # JSON list of check names; NULL: strict mode did not run
    db["turns"].add_column("library_share", float)
    for row in list(db.query("SELECT id, status, eval_json FROM turns WHERE status IS NOT NULL")):
        er = json.loads(row["eval_json"]) if row["eval_json"] else None
        values = verdict_columns(row["status"], er)
        db.execute(
            "UPDATE turns SET parity_status = ?, failed_checks = ?, library_share = ? WHERE id = ?",
            [values["parity_status"], values["failed_checks"], values["library_share"], row["id"]],
        )


@migration
def m009_rescores(db: Database) -> None:
    """`rescores`: a stored turn's code evaluated again under a later evaluator (`kb-agent rescore`), kept
    beside the turn's first result, never instead of it. One row per (turn, evaluator version), the
    latest rescoring under a version winning: `evaluator_version` (`agent.rescore.evaluator_version`:
    the package version and a hash of the evaluator's sources), `status`, `parity_status`,
    `failed_checks` and `library_share` as the turn's own columns mean them, `correct` (0/1), `speedup`
    (reference ms / candidate ms), `runtime_ms` and `ref_runtime_ms` (ms), `eval_json` (the whole
    `EvalResult`) and `rescored_at` (ISO 8601, UTC)."""
    db["rescores"].create(
        {
            "id": int,
            "turn_id": int,
            "evaluator_version": str,
            "status": str,
            "parity_status": str,
            "failed_checks": str,  # JSON list of check names; NULL: strict mode did not run
            "correct": int,
            "speedup": float,
            "runtime_ms": float,
            "ref_runtime_ms": float,
            "library_share": float,
            "eval_json": str,
            "rescored_at": str,
        },
        pk="id",
        foreign_keys=[("turn_id", "turns", "id")],
        not_null=["turn_id", "evaluator_version", "status", "rescored_at"],
    )
    db["rescores"].create_index(["turn_id", "evaluator_version"], unique=True)


@migration
def m010_baselines(db: Database) -> None:
    """`baselines`: the reference timed eager and under `torch.compile` by `kb-agent baseline`, one row per
    (reference source SHA-256, GPU name or `cpu`, precision, torch version, compile mode), the latest
    measurement winning; reports compare a run only with rows of its own GPU, precision and torch version.
    `eager_ms` and `compile_ms` are mean per-call times (ms) under the evaluator's protocol (`method`);
    `compile_ms` is NULL when torch.compile failed (`compile_error` says why); `compile_s` the wall seconds
    of the first compiled call (the compilation); `record` the whole measurement as JSON."""
    db["baselines"].create(
        {
            "code_sha256": str,
            "gpu": str,
            "precision": str,
            "torch": str,
            "compile_mode": str,
            "problem_key": str,
            "level": int,
            "problem_id": int,
            "name": str,
            "device": str,
            "status": str,  # ok, compile_failed, error, timeout
            "message": str,
            "method": str,
            "eager_ms": float,
            "compile_ms": float,
            "compile_s": float,
            "compile_error": str,
            "record": str,
            "measured": str,
        },  # fmt: skip
        pk=("code_sha256", "gpu", "precision", "torch", "compile_mode"),
    )


@migration
def m011_problem_check_findings(db: Database) -> None:
    """What `kb-agent problems check` measured beside its flags (issue 19). `problem_checks` gains `atol`
    and `rtol` (the check's own tolerance), `unchecked_reason` (why a problem could not be checked here:
    "package", "downloads", "memory", comma-joined; NULL when it was checked) and `measures` (JSON: per
    tolerance judged, the shares of output elements near zero, near the constant, unchanged across
    seeds). `problem_check_findings` holds one row per flag of a stored check: its tolerance (`atol`,
    `rtol`; NULL for flags judged at none, and for checks stored before this migration), `fraction` (the
    share of output elements it concerns, 0..1; NULL where none), `threshold` (the share it is compared
    with) and `precisions` (JSON: the precisions evaluated at that tolerance). Rows already stored get
    one finding per flag, without measurements."""
    for col, tp in (("atol", float), ("rtol", float), ("unchecked_reason", str), ("measures", str)):
        db["problem_checks"].add_column(col, tp)
    db["problem_check_findings"].create(
        {
            "problem_key": str,
            "gpu": str,
            "precision": str,
            "flag": str,
            "atol": float,
            "rtol": float,
            "fraction": float,
            "threshold": float,
            "precisions": str,
        },  # fmt: skip
        pk=("problem_key", "gpu", "precision", "flag"),
    )
    for row in list(db.query("SELECT problem_key, gpu, precision, flags FROM problem_checks")):
        for flag in json.loads(row["flags"] or "[]"):
            db.execute(
                "INSERT OR IGNORE INTO problem_check_findings (problem_key, gpu, precision, flag) VALUES (?, ?, ?, ?)",
                [row["problem_key"], row["gpu"], row["precision"], flag],
            )


@migration
def m012_turn_tree(db: Database) -> None:
    """A trajectory is a tree of turns (issue 16: best-of-n, beam and tree search store every node).
    `turns.parent_id`: the turn whose reply and feedback this turn's prompt continues (NULL: a root,
    asked from the task prompt alone); `turns.depth`: its place in that conversation (1 for a root);
    `turns.copied_from`: the source turn of a turn a fork copied (no model call, no evaluation here).
    `idx` stays the trajectory's node number in the order nodes were made, so "up to turn k" counts the
    first k nodes of the tree. Old rows are linear chains: the parent is the previous turn, depth = idx."""
    db["turns"].add_column("parent_id", int)
    db["turns"].add_column("depth", int)
    db["turns"].add_column("copied_from", int)
    db.execute(
        "UPDATE turns SET depth = idx, parent_id = (SELECT p.id FROM turns p "
        "WHERE p.trajectory_id = turns.trajectory_id AND p.idx = turns.idx - 1)"
    )


@migration
def m013_turn_eval_seconds(db: Database) -> None:
    """Where a turn's evaluation spent its time (issue 13), as plain columns (`rows.eval_seconds`):
    `turns.setup_s` (starting the child, spawned or forked, and its setup stage), `build_s` (importing the candidate, extension
    builds included), `run_s` (correctness + timing: the evaluation's GPU work) and `eval_s` (the whole
    evaluation), wall seconds as the parent measured them; NULL for a stage that never began. Turns
    already evaluated are filled from their stored `EvalResult`'s `stages`."""
    for col in ("setup_s", "build_s", "run_s", "eval_s"):
        db["turns"].add_column(col, float)
    rows = db.query("SELECT id, eval_json FROM turns WHERE eval_json IS NOT NULL")
    values = []
    for row in rows:
        secs = eval_seconds(json.loads(row["eval_json"]))
        values.append([secs["setup_s"], secs["build_s"], secs["run_s"], secs["eval_s"], row["id"]])
    db.conn.executemany(
        "UPDATE turns SET setup_s = ?, build_s = ?, run_s = ?, eval_s = ? WHERE id = ?", values
    )


MIGRATIONS: tuple[Migration, ...] = tuple(_registered)


def migrate(db: Database, migrations: Sequence[Migration] = MIGRATIONS) -> list[str]:
    """Apply the migrations not yet recorded in `_migrations`, in order; return the names applied.

    Each migration and its record commit together under `BEGIN IMMEDIATE`: a failing migration leaves
    the database as the previous one left it, and two processes opening a fresh database at once do
    not both apply a migration (the second waits for the lock, then finds it recorded).
    """
    conn = db.conn
    db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    applied = []
    for fn in migrations:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("SELECT 1 FROM _migrations WHERE name = ?", (fn.__name__,)).fetchone() is None:
                fn(db)
                conn.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (fn.__name__, now()))
                applied.append(fn.__name__)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return applied


def pending(db: Database, migrations: Sequence[Migration] = MIGRATIONS) -> list[str]:
    """The names of `migrations` that the database does not record, in order; reads only (a store
    opened read-only cannot be migrated)."""
    done = {r["name"] for r in db.query("SELECT name FROM _migrations")}
    return [fn.__name__ for fn in migrations if fn.__name__ not in done]


__all__ = ["MIGRATIONS", "Migration", "migrate", "migration", "pending", *(fn.__name__ for fn in MIGRATIONS)]
