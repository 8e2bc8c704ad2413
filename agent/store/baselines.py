"""The baseline cache: eager and `torch.compile` timings of references (`kb-agent baseline`), keyed by
(reference SHA-256, GPU name, precision, torch version, compile mode) in the `baselines` table
(migration m010). Functions over an open `Store`; nothing here measures anything."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kb_agent.agent.store.queries import Store
from kb_agent.agent.store.rows import now

COMPILE_MODES = ("default", "max-autotune")
_KEY = ("code_sha256", "gpu", "precision", "torch", "compile_mode")
_COLUMNS = (*_KEY, "problem_key", "level", "problem_id", "name", "device", "status", "message", "method",
            "eager_ms", "compile_ms", "compile_s", "compile_error")  # fmt: skip


def record_baseline(store: Store, record: Mapping[str, Any]) -> None:
    """Store one measurement (`evaluator.runner.time_baseline`'s dict plus `compile_mode`), replacing an
    earlier one under the same key. `gpu` is the record's `gpu_name`, or `cpu` when it has none."""
    row = {c: record.get(c) for c in _COLUMNS}
    row["gpu"] = record.get("gpu_name") or record.get("gpu") or "cpu"
    row["record"] = json.dumps(dict(record), default=str)
    row["measured"] = now()
    store.db["baselines"].upsert(row, pk=_KEY)


def find_baselines(
    store: Store,
    *,
    gpu: str | None = None,
    precision: str | None = None,
    torch: str | None = None,
    compile_mode: str | None = None,
    code_sha256: str | None = None,
) -> list[dict[str, Any]]:
    """Stored baselines matching every argument given (None matches anything), by level and problem id;
    `record` decoded."""
    where, args = [], []
    for col, val in (("gpu", gpu), ("precision", precision), ("torch", torch), ("compile_mode", compile_mode),
                     ("code_sha256", code_sha256)):  # fmt: skip
        if val is not None:
            where.append(f"{col} = ?")
            args.append(val)
    rows = store.db["baselines"].rows_where(
        " and ".join(where) or None, args, order_by="level, problem_id, name"
    )
    return [{**r, "record": json.loads(r["record"] or "{}")} for r in rows]


def cached_baseline(
    store: Store, code_sha256: str, gpu: str, precision: str, torch: str, compile_mode: str = "default"
) -> dict[str, Any] | None:
    """The stored measurement under exactly this key, None when there is none."""
    rows = find_baselines(store, gpu=gpu, precision=precision, torch=torch, compile_mode=compile_mode,
                          code_sha256=code_sha256)  # fmt: skip
    return rows[0] if rows else None


__all__ = ["COMPILE_MODES", "cached_baseline", "find_baselines", "record_baseline"]
