"""How values become column text in the store and back: timestamps, JSON columns, derived fields."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any

from kb_agent.agent.store.liveness import owner_gone

# JSON text columns, decoded on the way out
JSON_COLUMNS = {
    "runs": ("config", "hardware", "versions"),
    "trajectories": ("problem_json",),
    "turns": ("messages", "eval_json", "llm_json", "retimed_json"),
}


def now() -> str:
    """The current time, ISO 8601 in UTC with microseconds (sorts as text)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _json_default(o: Any) -> Any:
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if isinstance(o, Enum):
        return o.value
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=str)
    if hasattr(o, "to_dict"):
        return o.to_dict()
    return str(o)


def dumps(value: Any) -> str | None:
    """`value` as JSON text (dataclasses, enums, paths and sets included); None stays None (SQL NULL)."""
    return None if value is None else json.dumps(value, default=_json_default)


def decode(table: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """A row of `table` as a dict with its JSON columns decoded; a `running` run whose process is gone
    reads `killed` (derived, never stored: `solve --resume` continues it)."""
    out = dict(row)
    for col in JSON_COLUMNS[table]:
        if out.get(col) is not None:
            out[col] = json.loads(out[col])
    if table == "runs" and out.get("status") == "running" and owner_gone(out.get("pid"), out.get("host")):
        out["status"] = "killed"
    return out


__all__ = ["JSON_COLUMNS", "decode", "dumps", "now"]
