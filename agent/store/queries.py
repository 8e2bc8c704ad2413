"""The `Store` class: every read and write of runs, trajectories, turns and problem checks.

The schema is in `migrations`, applied when a `Store` opens its file; whether a run's process is alive
is in `liveness`; the package's docstring gives the layout and the resume contract.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import sqlite3
import unicodedata
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from enum import Enum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from kb_agent.agent.store.errors import StoreError
from kb_agent.agent.store.liveness import this_process
from kb_agent.agent.store.migrations import migrate, pending
from kb_agent.agent.store.opening import check_store_file, connect_read_only, unwritable
from kb_agent.agent.store.rows import GPU_STAGES, decode, dumps, eval_seconds, now, verdict_columns
from kb_agent.problems.errors import os_reason
from kb_agent.problems.problem import Problem
from sqlite_utils import Database

log = logging.getLogger(__name__)

DB_ENV = "KB_DB"
DEFAULT_DB = Path("runs") / "kb.sqlite"

# stored; a `running` run whose process is gone reads "killed" (derived: `liveness.owner_gone`)
# finished_with_errors: every trajectory ended, some with a model error (a request the provider refused);
# incomplete: some trajectories were left resumable because the model was unavailable (`solve --resume`)
RUN_STATUSES = ("running", "finished", "finished_with_errors", "incomplete", "interrupted", "failed")
# model_unavailable: a transient failure (rate limit, 5xx, timeout, connection) outlasted the retries; the
# trajectory is resumable. model_error: the provider refused the request (not retried; final)
OUTCOMES = (
    *("turn_budget", "token_budget", "cost_budget"),
    *("model_error", "model_unavailable", "interrupted", "error"),
)
EVAL_STATUSES = ("compile_error", "runtime_error", "timeout", "incorrect", "rejected", "correct")
TURN_STATUSES = (*EVAL_STATUSES, "no_code", "model_error")

# the packages whose versions a run records by default (read from metadata; nothing is imported)
VERSIONED_PACKAGES = ("kb-agent", "torch", "triton", "litellm", "openai", "anthropic", "sqlite-utils")


def default_db_path() -> Path:
    """The store path when none is given: `$KB_DB`, else `runs/kb.sqlite` relative to the working directory."""
    return Path(os.environ.get(DB_ENV) or DEFAULT_DB)


def package_versions(packages: tuple[str, ...] = VERSIONED_PACKAGES) -> dict[str, str | None]:
    """Installed versions of `packages` from their metadata (None when absent); imports none of them."""
    out: dict[str, str | None] = {}
    for name in packages:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _new_run_id(created: datetime) -> str:
    return f"r-{created.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(2)}"


_RUN_ID = re.compile(r"r-\d{8}T\d{6}-[0-9a-f]{4}")  # what `_new_run_id` makes


def check_run_name(name: str) -> None:
    """StoreError unless `name` can name a new run: not empty, no whitespace around it, no control
    characters (tabs, newlines, escapes), and not shaped like a run id (`r-20261130T051200-3f2a`), since
    `--resume NAME_OR_ID` and every other RUN argument take either. (Ids are not integers, so a name of
    digits is unambiguous and allowed.) `Store.create_run` also refuses the id of a run already there."""
    if not name.strip():
        raise StoreError("a run name cannot be empty; choose a name, or leave --run-name out")
    if name != name.strip():
        raise StoreError(f"run name {name!r} has whitespace around it; did you mean {name.strip()!r}?")
    if any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in name):
        raise StoreError(f"run name {name!r} holds a control character; choose a name without one")
    if _RUN_ID.fullmatch(name):
        raise StoreError(
            f"run name {name!r} looks like a run id, so RUN arguments could not tell them apart; choose another"
        )


# ---------------------------------------------------------------- the store


def _trajectory_row(run_id: str, problem: Problem, sample: int) -> dict[str, Any]:
    """A new trajectory's row: the full problem stored, so a resumed run needs no dataset."""
    return {"run_id": run_id, "level": problem.level, "problem_id": problem.problem_id,
            "problem_name": problem.name, "problem_key": problem.key, "problem_json": dumps(problem.to_dict()),
            "sample": sample, "outcome": None, "best_turn": None, "best_speedup": None, "created": now(),
            "finished": None}  # fmt: skip


class Store:
    """One SQLite trajectory store. Open it, write through its methods, `close()` it (or use `with`).

    Args:
        path: the database file; default `$KB_DB`, else `runs/kb.sqlite` under the working directory.
        create: make the file (and its folder) when missing; with False a missing file raises StoreError.
        for_reading: the caller only reads (`runs list`, `report`, `export`, `view`): the file must be a
            kb-agent store already (a missing, empty, non-SQLite or foreign file raises StoreError and is
            left as it was), and one this process cannot write is opened read-only (`read_only`; see
            `opening`), where a schema older than this kb-agent's raises StoreError.
        timeout_s: how long a write waits for another process's write lock before failing, in seconds.

    Opened for writing, a store this process cannot write raises StoreError ("... is read-only: copy it
    or fix its permissions").
    """

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        *,
        create: bool = True,
        for_reading: bool = False,
        timeout_s: float = 30.0,
    ):
        self.path = Path(path) if path is not None else default_db_path()
        self.read_only = False
        if self.path.is_dir():
            raise StoreError(
                f"{self.path} is a folder; point --db / {DB_ENV} at a file such as runs/kb.sqlite"
            )
        missing = (
            f"no kb-agent store at {self.path} (run `kb-agent solve ...` first, or point --db / {DB_ENV} "
            "at an existing store)"
        )
        if for_reading:
            check_store_file(self.path, missing)
        elif not self.path.exists():
            if not create:
                raise StoreError(missing)
            self._make_folder()
        why = unwritable(self.path) if self.path.exists() else None
        if why is not None and not for_reading:
            raise StoreError(f"{self.path} is read-only ({why}): copy it or fix its permissions")
        try:
            applied = self._open(read_only=why is not None, for_reading=for_reading, missing=missing,
                                 timeout_s=timeout_s)  # fmt: skip
        except BaseException as e:
            if getattr(self, "db", None) is not None:
                self.db.close()
            if not isinstance(e, sqlite3.DatabaseError):
                raise
            # not a database, unreadable, locked for longer than timeout_s
            if "locked" in str(e):
                raise StoreError(
                    f"{self.path} is locked by another process (a write transaction held for over "
                    f"{timeout_s:g} s); try again when it is free"
                ) from None
            raise StoreError(
                f"cannot use {self.path} as the trajectory store ({e}); point --db / {DB_ENV} at another file"
            ) from None
        if applied:
            log.info("store %s: applied migrations %s", self.path, ", ".join(applied))

    def _open(self, *, read_only: bool, for_reading: bool, missing: str, timeout_s: float) -> list[str]:
        """Connect, check, set WAL and foreign keys, migrate; return the migrations applied."""
        self.db = Database(self._connect(read_only=read_only, timeout_s=timeout_s))
        if for_reading:
            self._check_kb_store(missing)
        if not self.read_only:
            self.db.enable_wal()
        self.db.execute("PRAGMA foreign_keys = ON")
        return self._migrate()

    def _make_folder(self) -> None:
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(
                f"cannot create {folder} for the store ({os_reason(e, self.path)}); choose another --db"
            ) from None
        if not os.access(folder, os.W_OK | os.X_OK):
            raise StoreError(f"cannot create {self.path}: {folder} is read-only; choose another --db")

    def _connect(self, *, read_only: bool, timeout_s: float) -> sqlite3.Connection:
        if read_only:
            self.read_only = True
            log.info("store %s: not writable here, opened read-only", self.path)
            return connect_read_only(self.path, timeout_s)
        # usable from other threads, one call at a time (`agent.store.shared.SharedStore` serialises them)
        return sqlite3.connect(str(self.path), timeout=timeout_s, check_same_thread=False)

    def _check_kb_store(self, missing: str) -> None:
        """StoreError unless the file holds a kb-agent store (its `_migrations` table): a command that
        only reads neither fills an empty database with the schema nor adds it to another program's."""
        tables = set(self.db.table_names())
        if not tables:
            raise StoreError(missing)
        if "_migrations" not in tables:
            raise StoreError(
                f"{self.path} is an SQLite database but not a kb-agent store (no _migrations table); "
                f"point --db / {DB_ENV} at the store"
            )

    def _migrate(self) -> list[str]:
        if not self.read_only:
            return migrate(self.db)
        if todo := pending(self.db):
            raise StoreError(
                f"{self.path} needs {len(todo)} schema migrations ({todo[0]} first) from this kb-agent and "
                "is read-only: copy it or fix its permissions"
            )
        return []

    # -- lifecycle

    def close(self) -> None:
        """Close the connection. Everything written is already committed."""
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def applied_migrations(self) -> list[str]:
        """Names of the migrations recorded in this database, in the order they were applied."""
        return [r["name"] for r in self.db.query("SELECT name FROM _migrations ORDER BY rowid")]

    # -- runs

    def create_run(
        self,
        name: str | None,
        config: Any,
        model: str,
        backend: str,
        precision: str,
        versions: Mapping[str, str | None] | None = None,
    ) -> str:
        """Record a new run with status `running`; return its id (time-sortable, e.g. `r-20261130T051200-3f2a`).

        Args:
            name: unique, readable name (`check_run_name` says which are refused); None gives
                `<model>-<YYYYMMDD-HHMMSS>`.
            config: the full solve config, a dict or a dataclass; stored as JSON.
            model: the model string as passed to the LLM client, e.g. `openai/gpt-4o`.
            backend: `cuda` or `triton`.
            precision: e.g. `fp32`; reports refuse to pool runs of different precisions.
            versions: package -> version; None records `package_versions()`.

        Raises:
            StoreError: `name` is taken, is another run's id, or is refused by `check_run_name`.
        """
        created_dt = datetime.now(timezone.utc)
        name_given, base, n = name is not None, name, 1
        if name is None:
            base = f"{model.rsplit('/', 1)[-1]}-{created_dt.strftime('%Y%m%d-%H%M%S')}"
            name, n = base, 1
            while self._run_row("name", name) is not None:
                n += 1
                name = f"{base}-{n}"
        else:
            if self._run_row("id", name) is not None:
                raise StoreError(f"{name!r} is another run's id; choose another name")
            check_run_name(name)
            if self._run_row("name", name) is not None:
                raise StoreError(f"a run named {name!r} already exists; choose another name")
        row = {
            "name": name,
            "created": created_dt.isoformat(timespec="microseconds"),
            "status": "running",
            **this_process(),
            "config": dumps(config),
            "model": model,
            "backend": backend,
            "precision": precision,
            "gpu": None,
            "hardware": None,
            "versions": dumps(dict(versions) if versions is not None else package_versions()),
        }
        for _ in range(100):  # same second and same 16 random bits: draw again
            run_id = _new_run_id(created_dt)
            if self._run_row("id", run_id) is None and self._run_row("name", run_id) is None:
                break
        for attempt in range(20):
            try:
                self.db["runs"].insert({"id": run_id, **row})
                return run_id
            except sqlite3.IntegrityError:  # another process took the name (or id) between check and insert
                if name_given or attempt == 19:
                    raise StoreError(
                        f"a run named {row['name']!r} already exists; choose another name"
                    ) from None
                row["name"] = f"{base}-{n + attempt + 1}"
                run_id = _new_run_id(created_dt)
        return run_id

    def set_run_hardware(self, run_id: str, hardware: Mapping[str, Any]) -> None:
        """Record the hardware the run's candidates were evaluated on (an `EvalResult.hardware` dict);
        fills the `gpu` column from `hardware["gpu_name"]`."""
        self._update("runs", run_id, {"hardware": dumps(dict(hardware)), "gpu": hardware.get("gpu_name")})

    def set_run_status(self, run_id: str, status: str) -> None:
        """Set the run's status (one of RUN_STATUSES); leaving `running` also stamps `finished` (ISO UTC)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"run status {status!r} is not one of {', '.join(RUN_STATUSES)}")
        values: dict[str, Any] = {"status": status, "finished": None if status == "running" else now()}
        if status == "running":  # resumed: this process owns it now
            values.update(this_process())
        self._update("runs", run_id, values)

    def get_run(self, ref: str) -> dict[str, Any]:
        """The run whose id or name is `ref`, JSON columns decoded.

        Raises:
            StoreError: no such run.
        """
        row = self._run_row("id", ref) or self._run_row("name", ref)
        if row is None:
            raise StoreError(f"no run {ref!r} in {self.path}; `kb-agent runs list` shows the runs")
        return decode("runs", row)

    def latest_run(self) -> dict[str, Any]:
        """The most recently created run.

        Raises:
            StoreError: the store has no runs.
        """
        rows = list(self.db.query("SELECT * FROM runs ORDER BY created DESC, rowid DESC LIMIT 1"))
        if not rows:
            raise StoreError(f"no runs in {self.path}; `kb-agent solve` creates one")
        return decode("runs", rows[0])

    def list_runs(self) -> list[dict[str, Any]]:
        """All runs, oldest first, JSON columns decoded, with counts: `problems` (distinct problem keys)
        and `trajectories`."""
        sql = """
            SELECT runs.*,
                   (SELECT count(DISTINCT problem_key) FROM trajectories t WHERE t.run_id = runs.id) AS problems,
                   (SELECT count(*) FROM trajectories t WHERE t.run_id = runs.id) AS trajectories
            FROM runs ORDER BY created, rowid
        """
        return [decode("runs", r) for r in self.db.query(sql)]

    # -- trajectories

    def create_trajectory(self, run_id: str, problem: Problem, sample: int = 0) -> int:
        """Record a trajectory for one (problem, sample) of a run; return its id.

        The full problem is stored, so a resumed run needs no dataset.

        Raises:
            StoreError: the run already has this (problem, sample).
        """
        self.get_run(run_id)
        existing = self._one(
            "SELECT id FROM trajectories WHERE run_id = ? AND problem_key = ? AND sample = ?",
            (run_id, problem.key, sample),
        )
        if existing is not None:
            raise StoreError(
                f"run {run_id} already has a trajectory for {problem.key} sample {sample} "
                f"(id {existing['id']}); resume it instead"
            )
        table = self.db["trajectories"].insert(_trajectory_row(run_id, problem, sample))
        return int(table.last_pk)

    def create_trajectories(self, run_id: str, items: Iterable[tuple[Problem, int]]) -> list[int]:
        """Record a new run's trajectories, one per (problem, sample) of `items`, in one transaction;
        return their ids in order. A run stopped while they are made (Ctrl-C during a large `--samples`)
        keeps none of them, never a part that `--resume` would take for the whole run.

        Raises:
            StoreError: the run already has one of these (problem, sample).
        """
        self.get_run(run_id)
        ids: list[int] = []
        sql = ""
        try:
            with self.db.conn:
                for p, sample in items:
                    row = _trajectory_row(run_id, p, sample)
                    sql = (
                        sql
                        or f"INSERT INTO trajectories ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})"
                    )
                    ids.append(int(self.db.conn.execute(sql, list(row.values())).lastrowid))
        except sqlite3.IntegrityError:
            raise StoreError(
                f"run {run_id} already has one of these trajectories; resume it instead"
            ) from None
        return ids

    def discard_run(self, run_id: str) -> None:
        """Delete run `run_id` when nothing is stored under it (no trajectory): one stopped while it was
        set up, so that it reads as never created."""
        with self.db.conn:
            self.db.conn.execute(
                "DELETE FROM runs WHERE id = ? AND NOT EXISTS (SELECT 1 FROM trajectories WHERE run_id = ?)",
                (run_id, run_id),
            )

    def get_trajectory(self, traj_id: int) -> dict[str, Any]:
        """One trajectory row, `problem_json` decoded.

        Raises:
            StoreError: no such trajectory.
        """
        row = self._one("SELECT * FROM trajectories WHERE id = ?", (traj_id,))
        if row is None:
            raise StoreError(f"no trajectory {traj_id} in {self.path}")
        return decode("trajectories", row)

    def trajectories(self, run_id: str) -> list[dict[str, Any]]:
        """The run's trajectories in creation order, `problem_json` decoded."""
        rows = self.db.query("SELECT * FROM trajectories WHERE run_id = ? ORDER BY id", (run_id,))
        return [decode("trajectories", r) for r in rows]

    def unfinished_trajectories(self, run_id: str) -> list[dict[str, Any]]:
        """The trajectories a resumed run continues: no outcome yet, or ended by an interrupt (the user
        stopped it; no budget was spent). Creation order, `problem_json` decoded."""
        rows = self.db.query(
            "SELECT * FROM trajectories WHERE run_id = ? AND (outcome IS NULL OR outcome = 'interrupted') "
            "ORDER BY id",
            (run_id,),
        )
        return [decode("trajectories", r) for r in rows]

    def finish_trajectory(self, traj_id: int, outcome: str) -> None:
        """End a trajectory with a named outcome (one of OUTCOMES) and record its best correct turn:
        `best_speedup` is the highest speedup (reference time / candidate time) among correct turns (the
        re-timed figure where the turn was re-timed, leaving out one not correct when re-timed: see
        `record_retime`), `best_turn` its index (the earliest on a tie); both NULL when no turn was correct
        and timed.

        Calling it again (after a resumed trajectory ends) overwrites the outcome.
        """
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
        best = self._one(  # a re-timed winner counts with its re-timed figure, and not if it failed then
            "SELECT idx, COALESCE(retimed_speedup, speedup) AS speedup FROM turns WHERE trajectory_id = ? "
            "AND correct = 1 AND speedup IS NOT NULL AND COALESCE(retimed_status, 'correct') = 'correct' "
            "ORDER BY 2 DESC, idx ASC LIMIT 1",
            (traj_id,),
        )
        self._update(
            "trajectories",
            traj_id,
            {
                "outcome": outcome,
                "best_turn": best["idx"] if best else None,
                "best_speedup": best["speedup"] if best else None,
                "finished": now(),
            },
        )

    def problem_of(self, traj: Mapping[str, Any] | int) -> Problem:
        """The `Problem` a trajectory works on (a trajectory dict or its id), rebuilt from the stored JSON."""
        if not isinstance(traj, Mapping):
            traj = self.get_trajectory(traj)
        d = traj["problem_json"]
        return Problem.from_dict(json.loads(d) if isinstance(d, str) else d)

    # -- turns

    def start_turn(
        self, traj_id: int, idx: int, messages: list[dict[str, Any]], *, parent_idx: int | None = None
    ) -> int:
        """Record turn `idx` (1-based) with the messages about to be sent, before the model is called;
        return the turn id.

        A trajectory is a tree of turns: `parent_idx` is the index of the turn this one continues (its
        reply and feedback end the messages), 0 for a root asked from the task prompt alone, None for a
        linear chain's default (the previous turn, `idx - 1`). `parent_id` and `depth` (1 for a root)
        are stored from it.

        If the row exists without a response (the process died while waiting for the model), it is
        re-used: the messages and `created` are replaced and the same id is returned.

        Raises:
            StoreError: turn `idx` already has a response (evaluate it; do not ask again).
        """
        if idx < 1:
            raise ValueError(f"turn index {idx} must be 1 or more")
        existing = self._one(
            "SELECT id, response FROM turns WHERE trajectory_id = ? AND idx = ?", (traj_id, idx)
        )
        if existing is not None:
            if existing["response"] is not None:
                raise StoreError(
                    f"turn {idx} of trajectory {traj_id} already has a response; evaluate it instead of asking again"
                )
            self._update("turns", existing["id"], {"messages": dumps(messages), "created": now(),
                                                    **self._parent_columns(traj_id, idx, parent_idx)})  # fmt: skip
            return int(existing["id"])
        table = self.db["turns"].insert(
            {
                "trajectory_id": traj_id,
                "idx": idx,
                "messages": dumps(messages),
                "created": now(),
                **self._parent_columns(traj_id, idx, parent_idx),
            }  # fmt: skip
        )
        return int(table.last_pk)

    def _parent_columns(self, traj_id: int, idx: int, parent_idx: int | None) -> dict[str, Any]:
        parent_idx = idx - 1 if parent_idx is None else parent_idx
        if parent_idx == 0:
            return {"parent_id": None, "depth": 1}
        if not 0 < parent_idx < idx:
            raise ValueError(f"turn {idx}'s parent must be an earlier turn, not {parent_idx}")
        parent = self._one(
            "SELECT id, depth FROM turns WHERE trajectory_id = ? AND idx = ?", (traj_id, parent_idx)
        )
        if parent is None:
            raise StoreError(f"trajectory {traj_id} has no turn {parent_idx} to continue from")
        return {"parent_id": parent["id"], "depth": (parent["depth"] or parent_idx) + 1}

    def copy_turns(
        self, source_traj_id: int, traj_id: int, last_idx: int, feedback: Mapping[int, str] | None = None
    ) -> int:
        """Copy turns 1..`last_idx` of trajectory `source_traj_id` into `traj_id` exactly (messages,
        reply, evaluation, feedback, tokens, cost), each with `copied_from` = its source turn and its
        parent mapped to the copy; one transaction. Return how many were copied. A fork's prefix.
        `feedback` (turn index -> text) replaces the feedback of those copies (a fork's new recipe
        rendered from the same evaluation).

        Raises:
            StoreError: `traj_id` already has turns.
        """
        if self._one("SELECT id FROM turns WHERE trajectory_id = ? LIMIT 1", (traj_id,)) is not None:
            raise StoreError(f"trajectory {traj_id} already has turns; a fork copies into an empty one")
        rows = list(
            self.db.query(
                "SELECT * FROM turns WHERE trajectory_id = ? AND idx <= ? ORDER BY idx",
                (source_traj_id, last_idx),
            )
        )
        ids: dict[int, int] = {}
        with self.db.conn:
            for r in rows:
                src = r.pop("id")
                r.update(trajectory_id=traj_id, copied_from=src, parent_id=ids.get(r["parent_id"]))
                r["feedback"] = (feedback or {}).get(r["idx"], r["feedback"])
                cur = self.db.conn.execute(
                    f"INSERT INTO turns ({', '.join(r)}) VALUES ({', '.join('?' for _ in r)})",
                    list(r.values()),
                )
                ids[src] = int(cur.lastrowid)
        return len(rows)

    def record_response(
        self,
        turn_id: int,
        response: str,
        *,
        tokens_in: int | None = None,
        tokens_out: int | None = None,
        cost_usd: float | None = None,
        latency_s: float | None = None,
        model_answered: str | None = None,
        finish_reason: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Record the model's reply the moment it arrives.

        Args:
            response: the raw text.
            tokens_in / tokens_out: prompt and completion tokens of this call.
            cost_usd: cost of this call in US dollars (None when the provider's price is unknown).
            latency_s: wall seconds from request to reply, retries included.
            model_answered: the model name the provider reported.
            finish_reason: as the provider reported it (`stop`, `length`, ...).
            extra: anything else about the call (stored as `llm_json`).
        """
        self._update(
            "turns",
            turn_id,
            {
                "response": response,
                "tokens_in": tokens_in,
                "tokens_out": tokens_out,
                "cost_usd": cost_usd,
                "latency_s": latency_s,
                "model_answered": model_answered,
                "finish_reason": finish_reason,
                "llm_json": dumps(dict(extra) if extra is not None else None),
                "responded_at": now(),
            },
        )

    def record_evaluation(
        self,
        turn_id: int,
        *,
        code: str | None,
        status: str,
        eval_result: Mapping[str, Any] | Any | None,
        feedback: str | None,
    ) -> None:
        """Record what became of the turn's reply.

        Args:
            code: the extracted candidate source, None when the reply held none.
            status: an evaluator status (`compile_error`, `runtime_error`, `timeout`, `incorrect`,
                `rejected`, `correct`), or `no_code`, or `model_error`.
            eval_result: the `EvalResult` as a dict (or the object itself; its `to_dict()` is used);
                `correct`, `runtime_ms`, `ref_runtime_ms` (milliseconds) and `speedup` are copied from it,
                its stage seconds to `setup_s`, `build_s`, `run_s` and `eval_s` (`rows.eval_seconds`).
            feedback: the text rendered for the next turn.
        """
        status = str(status.value if isinstance(status, Enum) else status)
        if status not in TURN_STATUSES:
            raise ValueError(f"turn status {status!r} is not one of {', '.join(TURN_STATUSES)}")
        if eval_result is not None and not isinstance(eval_result, Mapping):
            eval_result = eval_result.to_dict()
        er = eval_result or {}
        self._update(
            "turns",
            turn_id,
            {
                "code": code,
                "status": status,
                "correct": int(status == "correct"),
                "runtime_ms": er.get("runtime_ms"),
                "ref_runtime_ms": er.get("ref_runtime_ms"),
                "speedup": er.get("speedup"),
                **verdict_columns(status, eval_result),
                **eval_seconds(eval_result),
                "eval_json": dumps(dict(eval_result) if eval_result is not None else None),
                "feedback": feedback,
                "evaluated_at": now(),
            },
        )

    def record_retime(self, turn_id: int, eval_result: Mapping[str, Any] | Any) -> None:
        """Record the re-timing of a trajectory's best turn in a fresh process (the winner's curse).

        Args:
            eval_result: the re-evaluation's `EvalResult` (or its dict). Its status goes to
                `retimed_status`; when it is `correct`, its `speedup` (KernelBench's protocol, ms ÷ ms) goes
                to `retimed_speedup` and `timing.repro_speedup` to `retimed_repro_speedup`.
        """
        er = eval_result if isinstance(eval_result, Mapping) else eval_result.to_dict()
        correct = er.get("status") == "correct"
        self._update(
            "turns",
            turn_id,
            {
                "retimed_status": er.get("status"),
                "retimed_speedup": er.get("speedup") if correct else None,
                "retimed_repro_speedup": (er.get("timing") or {}).get("repro_speedup") if correct else None,
                "retimed_json": dumps(dict(er)),
            },
        )

    def turns(self, traj_id: int) -> list[dict[str, Any]]:
        """A trajectory's turns by index, JSON columns (`messages`, `eval_json`, `llm_json`, `retimed_json`) decoded."""
        rows = self.db.query("SELECT * FROM turns WHERE trajectory_id = ? ORDER BY idx", (traj_id,))
        return [decode("turns", r) for r in rows]

    def turn(self, traj_id: int, idx: int) -> dict[str, Any] | None:
        """Turn `idx` of a trajectory, JSON columns decoded; None when there is no such turn."""
        row = self._one("SELECT * FROM turns WHERE trajectory_id = ? AND idx = ?", (traj_id, idx))
        return None if row is None else decode("turns", row)

    def record_problem_check(self, check: dict[str, Any]) -> None:
        """Store one result of `evaluator.runner.check_problem` (replacing an earlier check of the same
        problem on the same GPU and precision), with one `problem_check_findings` row per finding (flag,
        atol, rtol, fraction 0..1, threshold, precisions), in one transaction.

        An `unchecked` result (status "unchecked": `check["unchecked"]` or `unchecked_reason` says why)
        does not replace a stored finding ("ok" or "flagged") of the same reference source: that the
        problem cannot be checked on one machine says nothing against what another measured."""
        key, gpu, precision = check["key"], check.get("gpu_name") or "cpu", check["precision"]
        unchecked = check.get("unchecked") or {}
        if check["status"] == "unchecked":
            old = self._one(
                "SELECT status, code_sha256 FROM problem_checks WHERE problem_key = ? AND gpu = ? AND precision = ?",
                (key, gpu, precision),
            )
            if old and old["status"] in ("ok", "flagged") and old["code_sha256"] == check.get("code_sha256"):
                return
        details = list(check.get("details") or [])
        if unchecked.get("message"):
            details.append(unchecked["message"])
        row = {
            "problem_key": key, "level": check["level"], "problem_id": check["problem_id"],
            "name": check["name"], "gpu": gpu, "precision": precision,
            "status": check["status"], "flags": json.dumps(check.get("flags") or []),
            "nondeterministic": int(bool(check.get("nondeterministic"))),
            "zeros_pass": int(bool(check.get("zeros_pass"))), "constant_pass": int(bool(check.get("constant_pass"))),
            "reference_fails": check.get("reference_fails"), "details": json.dumps(details),
            "checked": now(), "code_sha256": check.get("code_sha256"),
            "atol": check.get("atol"), "rtol": check.get("rtol"),
            "unchecked_reason": unchecked.get("reason") or check.get("unchecked_reason"),
            "measures": json.dumps(check.get("measures") or []),
        }  # fmt: skip
        findings = check.get("findings")
        if findings is None:  # a result without measurements: one finding per flag
            findings = [{"flag": f} for f in check.get("flags") or []]
        if row["atol"] is None:  # the check's own tolerance: the first measured, or the first finding's
            own = (check.get("measures") or []) + [f for f in findings if f.get("atol") is not None]
            if own:
                row["atol"], row["rtol"] = own[0]["atol"], own[0]["rtol"]
        pk = (key, gpu, precision)
        with self.db.conn:
            self.db.conn.execute(
                f"INSERT OR REPLACE INTO problem_checks ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
                list(row.values()),
            )
            self.db.conn.execute(
                "DELETE FROM problem_check_findings WHERE problem_key = ? AND gpu = ? AND precision = ?", pk
            )
            self.db.conn.executemany(
                "INSERT OR REPLACE INTO problem_check_findings (problem_key, gpu, precision, flag, atol, rtol, "
                "fraction, threshold, precisions) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(*pk, f["flag"], f.get("atol"), f.get("rtol"), f.get("fraction"), f.get("threshold"),
                  json.dumps(f.get("precisions") or [])) for f in findings],
            )  # fmt: skip

    def problem_checks(self, gpu: str | None = None, precision: str | None = None) -> list[dict[str, Any]]:
        """Stored problem checks, optionally for one GPU name and precision, by level and problem id;
        `flags`, `details` and `measures` decoded, and `findings`: the check's rows of
        `problem_check_findings` (flag, atol, rtol, fraction, threshold, precisions decoded) in the
        order of `flags`."""
        where, args = [], []
        for col, val in (("gpu", gpu), ("precision", precision)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        rows = self.db["problem_checks"].rows_where(
            " and ".join(where) or None, args, order_by="level, problem_id"
        )
        found: dict[tuple, list[dict[str, Any]]] = {}
        for f in self.db.query("SELECT * FROM problem_check_findings"):
            f["precisions"] = json.loads(f["precisions"] or "[]")
            found.setdefault((f.pop("problem_key"), f.pop("gpu"), f.pop("precision")), []).append(f)
        out = []
        for r in rows:
            flags = json.loads(r["flags"] or "[]")
            findings = found.get((r["problem_key"], r["gpu"], r["precision"]), [])
            findings.sort(key=lambda f: flags.index(f["flag"]) if f["flag"] in flags else len(flags))
            out.append({**r, "flags": flags, "details": json.loads(r["details"] or "[]"),
                        "measures": json.loads(r.get("measures") or "[]"), "findings": findings})  # fmt: skip
        return out

    def turn_summaries(self, run_id: str) -> list[dict[str, Any]]:
        """Every turn of a run without the bulky columns (messages, response, code, JSON): trajectory_id,
        idx, status, correct, speedup, retimed_speedup, retimed_repro_speedup, retimed_status,
        parity_status, failed_checks (a list, decoded; None when strict mode did not run), library_share,
        runtime_ms, ref_runtime_ms, tokens_in, tokens_out, cost_usd, latency_s, has_code, gpu_s (wall
        seconds of the evaluation's GPU_STAGES, None when the turn was not evaluated), setup_s, build_s,
        run_s and eval_s (seconds, `rows.eval_seconds`), the tree's depth,
        parent_idx (None for a root) and copied_from, model_call (1: this run asked the model for it) and
        evaluation (1: this run evaluated it; a fork's copied turns are neither), reused (1: this run
        gave it an earlier evaluation's result, `EvalResult.reused`; not an evaluation); ordered by
        trajectory then index. What reports and tables need."""
        gpu_s = " + ".join(f"COALESCE(json_extract(turns.eval_json, '$.stages.{s}'), 0)" for s in GPU_STAGES)
        sql = f"""
            SELECT turns.trajectory_id, turns.idx, turns.status, turns.correct, turns.speedup,
                   turns.retimed_speedup, turns.retimed_repro_speedup, turns.retimed_status,
                   turns.parity_status, turns.failed_checks, turns.library_share,
                   turns.runtime_ms, turns.ref_runtime_ms, turns.tokens_in, turns.tokens_out,
                   turns.cost_usd, turns.latency_s, turns.code IS NOT NULL AS has_code,
                   turns.depth, turns.copied_from,
                   turns.setup_s, turns.build_s, turns.run_s, turns.eval_s,
                   (SELECT p.idx FROM turns p WHERE p.id = turns.parent_id) AS parent_idx,
                   turns.copied_from IS NULL AND (turns.response IS NOT NULL
                       OR turns.status IS 'model_error') AS model_call,
                   turns.copied_from IS NULL AND turns.eval_json IS NOT NULL
                       AND json_extract(turns.eval_json, '$.reused') IS NULL AS evaluation,
                   turns.copied_from IS NULL
                       AND json_extract(turns.eval_json, '$.reused') IS NOT NULL AS reused,
                   CASE WHEN turns.eval_json IS NULL THEN NULL ELSE {gpu_s} END AS gpu_s
            FROM turns JOIN trajectories t ON t.id = turns.trajectory_id
            WHERE t.run_id = ? ORDER BY turns.trajectory_id, turns.idx
        """
        rows = [dict(r) for r in self.db.query(sql, (run_id,))]
        for r in rows:
            if r["failed_checks"] is not None:
                r["failed_checks"] = json.loads(r["failed_checks"])
        return rows

    # -- whole runs: export, the viewer, rescoring

    def run_turns(self, run_id: str) -> list[dict[str, Any]]:
        """Every turn of a run, whole: all turn columns (JSON columns decoded) plus the trajectory's
        `run_id`, `level`, `problem_id`, `problem_name`, `problem_key` and `sample`; ordered by
        trajectory, then turn index. What export, the viewer and rescoring read."""
        sql = """
            SELECT turns.*, t.run_id, t.level, t.problem_id, t.problem_name, t.problem_key, t.sample
            FROM turns JOIN trajectories t ON t.id = turns.trajectory_id
            WHERE t.run_id = ? ORDER BY turns.trajectory_id, turns.idx
        """
        return [decode("turns", r) for r in self.db.query(sql, (run_id,))]

    def record_rescore(
        self, turn_id: int, evaluator_version: str, eval_result: Mapping[str, Any] | Any
    ) -> None:
        """Store a turn's code evaluated again (`kb-agent rescore`) beside its first result, replacing an
        earlier rescoring of the same turn under the same `evaluator_version`.

        Args:
            eval_result: the new `EvalResult` (or its dict); its status, speedup (reference ms / candidate
                ms), runtimes (ms) and verdict columns (`rows.verdict_columns`) become plain columns.

        Raises:
            StoreError: no turn `turn_id`.
        """
        er = dict(eval_result if isinstance(eval_result, Mapping) else eval_result.to_dict())
        status = str(er["status"].value if isinstance(er["status"], Enum) else er["status"])
        if self._one("SELECT id FROM turns WHERE id = ?", (turn_id,)) is None:
            raise StoreError(f"no turn {turn_id!r} in {self.path}")
        row = {
            "turn_id": turn_id,
            "evaluator_version": evaluator_version,
            "status": status,
            **verdict_columns(status, er),
            "correct": int(status == "correct"),
            "speedup": er.get("speedup"),
            "runtime_ms": er.get("runtime_ms"),
            "ref_runtime_ms": er.get("ref_runtime_ms"),
            "eval_json": dumps(er),
            "rescored_at": now(),
        }
        cols = ", ".join(row)
        updates = ", ".join(f"{k} = excluded.{k}" for k in row if k not in ("turn_id", "evaluator_version"))
        self.db.execute(
            f"INSERT INTO rescores ({cols}) VALUES ({', '.join('?' for _ in row)}) "
            f"ON CONFLICT(turn_id, evaluator_version) DO UPDATE SET {updates}",
            list(row.values()),
        )
        self.db.conn.commit()

    def rescores(self, run_id: str, evaluator_version: str | None = None) -> list[dict[str, Any]]:
        """The rescorings of a run's turns (all versions, or one), oldest first, JSON columns decoded;
        each row has the `rescores` columns plus the turn's `trajectory_id` and `idx`."""
        sql = """
            SELECT r.*, turns.trajectory_id, turns.idx FROM rescores r
            JOIN turns ON turns.id = r.turn_id JOIN trajectories t ON t.id = turns.trajectory_id
            WHERE t.run_id = ? AND (? IS NULL OR r.evaluator_version = ?)
            ORDER BY r.rescored_at, r.id
        """
        rows = self.db.query(sql, (run_id, evaluator_version, evaluator_version))
        return [decode("rescores", r) for r in rows]

    # -- internals

    def _one(self, sql: str, params: tuple) -> dict[str, Any] | None:
        rows = list(self.db.query(sql, params))
        return rows[0] if rows else None

    def _run_row(self, column: str, value: str) -> dict[str, Any] | None:
        return self._one(f"SELECT * FROM runs WHERE {column} = ?", (value,))

    def _update(self, table: str, pk: Any, values: dict[str, Any]) -> None:
        cur = self.db.execute(
            f"UPDATE {table} SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?", [*values.values(), pk]
        )
        if cur.rowcount != 1:
            raise StoreError(f"no {table.rstrip('s')} {pk!r} in {self.path}")


__all__ = [
    "DB_ENV",
    "DEFAULT_DB",
    "EVAL_STATUSES",
    "OUTCOMES",
    "RUN_STATUSES",
    "TURN_STATUSES",
    "VERSIONED_PACKAGES",
    "Store",
    "StoreError",
    "check_run_name",
    "default_db_path",
    "package_versions",
]
