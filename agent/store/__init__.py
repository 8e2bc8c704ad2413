"""The trajectory store: runs, trajectories and turns in one SQLite file (sqlite-utils, WAL mode).

Layout: a run is one `kb-agent solve` invocation; a trajectory is one (problem, sample) inside a run; a
turn is one model call plus the evaluation of the candidate it returned. A trajectory's turns form a
tree (`turns.parent_id`, `depth`: a linear chain is the simplest one; search strategies branch it), and
a fork's copied turns name their source (`turns.copied_from`). Plain columns hold what people
filter on (run, model, level, problem, turn, status, speedup, tokens, cost); JSON text beside them holds
the rest (the solve config, the messages sent, the full `EvalResult`).

The schema is a list of numbered migrations (`migrations`: `m001_initial`, `m002_...`, each registered
once) applied on every open and recorded in the `_migrations` table. Every write is its own
transaction, committed before the method returns, so a process killed between two calls loses nothing
it wrote; WAL mode lets another process read while one writes.

Resume contract (what the agent loop relies on):
    - a turn row with a `response` but no `status` holds a reply that must be evaluated, not re-asked;
    - a turn row with neither was cut off before the model answered: `start_turn` on the same index
      re-uses the row and the model is asked again.

Modules: `queries` (the `Store` class), `shared` (`SharedStore`: one Store used from many threads),
`migrations` (the schema), `liveness` (is a run's process alive), `rows` (column text to values and
back), `opening` (may this process write the file; reading one it may not), `space` (a full disk as one
line), `errors` (`StoreError`).
Imports nothing heavy (no torch, no litellm).
"""

from kb_agent.agent.store.liveness import owner_gone, running_elsewhere
from kb_agent.agent.store.migrations import MIGRATIONS, migrate, migration
from kb_agent.agent.store.queries import (
    DB_ENV,
    DEFAULT_DB,
    EVAL_STATUSES,
    OUTCOMES,
    RUN_STATUSES,
    TURN_STATUSES,
    VERSIONED_PACKAGES,
    Store,
    StoreError,
    check_run_name,
    default_db_path,
    package_versions,
)
from kb_agent.agent.store.shared import SharedStore

__all__ = [
    "DB_ENV",
    "DEFAULT_DB",
    "EVAL_STATUSES",
    "MIGRATIONS",
    "OUTCOMES",
    "RUN_STATUSES",
    "TURN_STATUSES",
    "VERSIONED_PACKAGES",
    "SharedStore",
    "Store",
    "StoreError",
    "check_run_name",
    "default_db_path",
    "migrate",
    "migration",
    "owner_gone",
    "package_versions",
    "running_elsewhere",
]
