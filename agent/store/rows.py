"""How values become column text in the store and back: timestamps, JSON columns, and the plain turn
columns derived from an `EvalResult` (its verdict under KernelBench's rules, the strict checks it failed,
its library share, the seconds its stages took)."""

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
    "turns": ("messages", "eval_json", "llm_json", "retimed_json", "failed_checks"),
    "rescores": ("eval_json", "failed_checks"),
}


# the evaluation stages that hold a GPU slot (EvalResult.stages): a turn's `run_s` (and `gpu_s` in
# `Store.turn_summaries`) is their wall seconds
# the stages that hold the evaluation's GPU slot: a split evaluation's run child (`run_setup`: its start,
# `run_load`: the candidate imported again, its builds found cached; evaluator.runner) and the
# correctness and timing stages of every evaluation
GPU_STAGES = ("run_setup", "run_load", "correctness", "timing")


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


def library_share(eval_result: Mapping[str, Any] | None) -> float | None:
    """The fraction (0..1) of one forward's GPU kernel time spent in library kernels (PyTorch, cuBLAS,
    cuDNN, ...) rather than the candidate's own, from an `EvalResult` dict; None when no GPU profile ran.

    Read from, in order: `strict["library_share"]` (a record that gives it directly), the profile
    (`1 - profile.custom_share`, when its kernels took any time), `1 - strict["custom_share"]`.
    """
    er = eval_result or {}
    strict = er.get("strict") or {}
    if strict.get("library_share") is not None:
        return float(strict["library_share"])
    profile = er.get("profile") or {}
    if profile.get("custom_share") is not None and profile.get("total_us"):
        return 1.0 - float(profile["custom_share"])
    if strict.get("custom_share") is not None:
        return 1.0 - float(strict["custom_share"])
    return None


def verdict_columns(status: str, eval_result: Mapping[str, Any] | None) -> dict[str, Any]:
    """The plain turn columns derived from a turn's status and its `EvalResult` dict.

    Returns:
        `parity_status`: the status under KernelBench's rules alone: the strict record's `parity_status`
            when strict mode rejected the turn, else `status` itself (strict mode only ever adds
            rejections);
        `failed_checks`: JSON text, the names of the strict checks that failed (a list, empty when all
            passed), NULL when strict mode did not run;
        `library_share`: see `library_share`.
    """
    strict = (eval_result or {}).get("strict")
    if not strict or strict.get("enabled") is False:
        strict = None
    parity = status
    if status == "rejected" and strict is not None and strict.get("parity_status"):
        parity = str(strict["parity_status"])
    failed = None
    if strict is not None:
        failed = [name for name, c in (strict.get("checks") or {}).items() if not c.get("passed")]
    return {
        "parity_status": parity,
        "failed_checks": dumps(failed),
        "library_share": library_share(eval_result),
    }


def eval_seconds(eval_result: Mapping[str, Any] | None) -> dict[str, float | None]:
    """The plain turn columns of an evaluation's wall seconds, from an `EvalResult` dict's `stages` (what
    the parent saw each stage take; `evaluator.runner`).

    Returns:
        `setup_s`: starting the child: spawning it or forking it from the warm worker (the seconds of
            `child_start`, where the result has them) and its setup stage (a spawned child's imports);
        `build_s`: the build stage (importing the candidate, its extension builds included);
        `run_s`: the GPU_STAGES summed (correctness + timing, and a split evaluation's run child's start
            and load), the seconds the evaluation held its GPU slot; None when none began (a compile
            error);
        `eval_s`: the whole evaluation (`stages["total"]`).
        Each None when that stage never began, all None without an evaluation or stage times.
    """
    stages = (eval_result or {}).get("stages") or {}
    ran = [float(stages[s]) for s in GPU_STAGES if stages.get(s) is not None]
    as_float = lambda key: None if stages.get(key) is None else float(stages[key])  # noqa: E731
    start = ((eval_result or {}).get("child_start") or {}).get("seconds")
    setup = as_float("setup")
    return {
        "setup_s": None if setup is None else setup + float(start or 0.0),
        "build_s": as_float("build"),
        "run_s": sum(ran) if ran else None,
        "eval_s": as_float("total"),
    }


__all__ = [
    "GPU_STAGES",
    "JSON_COLUMNS",
    "decode",
    "dumps",
    "eval_seconds",
    "library_share",
    "now",
    "verdict_columns",
]
