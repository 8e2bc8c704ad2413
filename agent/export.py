"""A run's turns as a flat table: one row per turn, written as JSON Lines, Parquet or CSV.

    from kb_agent.agent.export import export_run
    export_run(store, "my-run", "parquet", "my-run.parquet")

    import datasets
    ds = datasets.load_dataset("parquet", data_files="my-run.parquet")["train"]

Each row is one turn: which problem, sample and turn it is, its parent turn, both verdicts, the speedups
(the first figure and the re-timed one), tokens, cost, the reply, the extracted code, the feedback the
model read next and a one-line evaluation summary, plus the whole `EvalResult` as JSON text (`COLUMNS`
says what each column holds). The messages sent to the model are left out (each turn's prompt repeats
the whole conversation so far); they are in the store (`turns.messages`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kb_agent.agent.store import Store
from kb_agent.problems.errors import UsageError

FORMATS = ("jsonl", "parquet", "csv")
SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".csv": "csv"}  # any case

# column -> (Arrow type name, meaning); the order is the order of the columns in every format
COLUMNS: dict[str, tuple[str, str]] = {
    "run_id": ("string", "the run's id"),
    "run_name": ("string", "the run's name"),
    "model": ("string", "the model string the run called"),
    "problem": ("string", "problem key: 2/40, toy/relu, or a file name"),
    "level": ("int64", "KernelBench level (0 = toy; null = a loose file)"),
    "problem_id": ("int64", "the problem's id within its level"),
    "problem_name": ("string", "e.g. 40_Matmul_Scaling_ResidualAdd"),
    "sample": ("int64", "which independent trajectory of the problem (0-based)"),
    "turn": ("int64", "turn index within the trajectory (1-based)"),
    "turn_id": ("int64", "the turn's id in the store (turns.id)"),
    "parent": ("int64", "index of the turn this one continues (null for a root; a chain: turn - 1)"),
    "parent_turn_id": ("int64", "the parent turn's id in the store"),
    "status": ("string", "the evaluator's verdict (strict mode): correct, incorrect, rejected, ..."),
    "parity_status": ("string", "the verdict under KernelBench's rules alone"),
    "failed_checks": ("list<string>", "strict checks the turn failed (null: strict mode did not run)"),
    "correct": ("bool", "status == correct"),
    "speedup": ("double", "reference ms / candidate ms, KernelBench's protocol, this evaluation"),
    "retimed_speedup": ("double", "the same figure re-timed in a fresh process (a trajectory's best turn)"),
    "retimed_repro_speedup": ("double", "the re-timing's reproducible (interleaved) figure"),
    "retimed_status": ("string", "the re-timing evaluation's status"),
    "reused": ("bool", "an earlier turn's result given again: the same code, not evaluated"),
    "runtime_ms": ("double", "candidate mean, ms"),
    "ref_runtime_ms": ("double", "reference mean, ms"),
    "library_share": ("double", "fraction (0..1) of one forward's GPU time in library kernels"),
    "tokens_in": ("int64", "prompt tokens of this call"),
    "tokens_out": ("int64", "completion tokens of this call"),
    "cost_usd": ("double", "US dollars of this call (null: price unknown)"),
    "latency_s": ("double", "seconds from request to reply, retries included"),
    "finish_reason": ("string", "as the provider reported it"),
    "response": ("string", "the model's reply, raw"),
    "code": ("string", "the extracted candidate (null: the reply held none)"),
    "feedback": ("string", "the feedback rendered for the next turn"),
    "eval_summary": ("string", "one line: status, message, trials passed, speedup"),
    "eval_json": ("string", "the whole EvalResult as JSON text"),
    "rescored_status": ("string", "the latest `kb-agent rescore` verdict (null: never rescored)"),
    "rescored_speedup": ("double", "the latest rescoring's speedup"),
    "rescored_version": ("string", "the evaluator version of the latest rescoring"),
    "created": ("string", "when the turn started, ISO 8601 UTC"),
}


def eval_summary(turn: Mapping[str, Any]) -> str:
    """One line about a stored turn's evaluation, e.g. `correct 1.234x (5/5 trials)` or
    `incorrect: output mismatch in correctness trial 1 of 5 (values) (4/5 trials)`."""
    er = turn.get("eval_json") or {}
    status = turn.get("status") or "pending"
    parts = [status]
    if status == "correct" and turn.get("speedup") is not None:
        s = turn["speedup"]
        parts[0] += f" {s:.3f}x" if s >= 0.01 else f" {s:.2g}x"
    message = _headline(str(er.get("message") or ""))
    if status != "correct" and message and message != status:
        parts[0] += f": {message[:200]}"
    if turn.get("parity_status") and turn["parity_status"] != status:
        parts.append(f"KernelBench's rules: {turn['parity_status']}")
    corr = er.get("correctness") or {}
    if corr.get("trials"):
        parts.append(f"{corr.get('passed', 0)}/{corr['trials']} trials")
    if turn.get("failed_checks"):
        parts.append("failed: " + ", ".join(turn["failed_checks"]))
    if er.get("reused") is not None:
        parts.append("reused")
    return parts[0] + "".join(f" ({p})" for p in parts[1:])


def _headline(message: str) -> str:
    """The message's first line; one that ends in a colon (`... while running correctness trial 1:`)
    gets the first line after it that is not traceback scaffolding, or loses the colon when none is left."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines or not lines[0].endswith(":"):
        return lines[0] if lines else ""
    rest = [
        x for x in lines[1:] if not x.startswith(("Traceback (most recent call last)", 'File "', "^", "~"))
    ]
    return f"{lines[0]} {rest[0]}" if rest else lines[0].rstrip(":")


def export_rows(store: Store, run_ref: str) -> list[dict[str, Any]]:
    """One dict per turn of run `run_ref` (id or name), keys as `COLUMNS`, ordered by trajectory then
    turn. Raises StoreError for an unknown run."""
    run = store.get_run(run_ref)
    latest: dict[int, dict[str, Any]] = {}
    for r in store.rescores(run["id"]):  # oldest first: the last one wins
        latest[r["turn_id"]] = r
    turns = store.run_turns(run["id"])
    index_of = {t["id"]: t["idx"] for t in turns}  # a tree's parent is any earlier node, not turn - 1
    rows = []
    for t in turns:
        parent_id = t.get("parent_id")
        parent = index_of.get(parent_id) if parent_id is not None else None
        rescored = latest.get(t["id"]) or {}
        row = {
            "run_id": run["id"], "run_name": run["name"], "model": run["model"],
            "problem": t["problem_key"], "level": t["level"], "problem_id": t["problem_id"],
            "problem_name": t["problem_name"], "sample": t["sample"], "turn": t["idx"], "turn_id": t["id"],
            "parent": parent, "parent_turn_id": parent_id if parent is not None else None,
            "correct": None if t["status"] is None else bool(t["correct"]),
            "reused": None if t["eval_json"] is None else t["eval_json"].get("reused") is not None,
            "eval_summary": eval_summary(t),
            "eval_json": json.dumps(t["eval_json"]) if t["eval_json"] is not None else None,
            "rescored_status": rescored.get("status"), "rescored_speedup": rescored.get("speedup"),
            "rescored_version": rescored.get("evaluator_version"),
        }  # fmt: skip
        rows.append({k: row[k] if k in row else t.get(k) for k in COLUMNS})
    return rows


def file_stem(run_name: str) -> str:
    """A run's name as the stem of a file beside the store (`export`, `view`): its characters other than
    letters, digits, `.`, `-` and `_` become `_`, and so does a leading dot (a run named `../x` or `.x`
    wrote a hidden file); at most 200 characters (a file system takes 255 bytes a name). A name changed
    on the way ends in `-` and 8 hex digits of its SHA-256, so two runs never share a file (`a b` and
    `a/b` both read `a_b`; `über` read `_ber`)."""
    stem = re.sub(r"^\.", "_", re.sub(r"[^A-Za-z0-9._-]", "_", run_name))
    if stem == run_name and len(stem) <= 200:
        return stem
    return f"{stem[:191]}-{hashlib.sha256(run_name.encode()).hexdigest()[:8]}"


def default_output(store: Store, run_ref: str, fmt: str) -> Path:
    """Where `export_run` writes when no path is given: `<run name>.<fmt>` beside the store file (the
    name made a file name by `file_stem`)."""
    return store.path.parent / f"{file_stem(store.get_run(run_ref)['name'])}.{fmt}"


def output_format(fmt: str | None, output: str | Path | None) -> str:
    """The format `export_run` writes: `fmt` when given, else the one `output`'s suffix names (`SUFFIXES`),
    else jsonl (no `output`, or `-`).

    Raises:
        UsageError: an unknown `fmt`; `fmt` and a suffix that name different formats (found by a new user:
        `--format csv -o x.parquet` wrote CSV without a word); no `fmt` and a suffix that names none.
    """
    if fmt is not None and fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if output is None or str(output) == "-":
        return fmt or "jsonl"
    named = SUFFIXES.get(Path(output).suffix.lower())
    if fmt is not None and named is not None and named != fmt:
        raise UsageError(
            f"--format {fmt} does not match --output {str(output)!r}, a {named} name; "
            f"drop --format to write {named}, or end the file name in .{fmt}"
        )
    if fmt is None and named is None:
        raise UsageError(
            f"cannot tell the format from --output {str(output)!r}; end it in .jsonl, .parquet or .csv, "
            "or give --format"
        )
    return fmt or named


def export_run(
    store: Store, run_ref: str, fmt: str | None = None, output: str | Path | None = None
) -> Path | None:
    """Write the turns of run `run_ref` as `fmt` (jsonl, parquet or csv; None: from `output`'s suffix, see
    `output_format`) to `output` (default `default_output`; `-` is standard output, for jsonl and csv;
    missing folders on the way are created, as `view --output` and `report --plot` do) and return the
    path written (None for standard output).

    JSON Lines keeps lists as lists; CSV writes `failed_checks` as JSON text and null as an empty
    field; Parquet has the Arrow types of `COLUMNS`, so `datasets.load_dataset("parquet", ...)` loads it
    with the same columns whatever values a run happens to hold.

    Raises:
        UsageError: as `output_format`, or `-` for parquet. StoreError: an unknown run.
    """
    fmt = output_format(fmt, output)
    if str(output) == "-" and fmt == "parquet":
        raise UsageError(
            "parquet is binary; give --output FILE.parquet, or use --format jsonl or csv for stdout"
        )
    if output is not None and str(output) != "-" and Path(output).is_dir():
        raise UsageError(f"--output {str(output)!r} is a folder; give a file name such as run.{fmt}")
    rows = export_rows(store, run_ref)
    if fmt == "parquet":
        path = Path(output) if output is not None else default_output(store, run_ref, fmt)
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_parquet(rows, path)
        return path
    text = _jsonl(rows) if fmt == "jsonl" else _csv(rows)
    if str(output) == "-":
        sys.stdout.write(text)
        return None
    path = Path(output) if output is not None else default_output(store, run_ref, fmt)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def _csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()})
    return buf.getvalue()


def arrow_schema():
    """The Parquet schema: `COLUMNS` as a `pyarrow.Schema`, each column nullable."""
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "double": pa.float64(), "bool": pa.bool_(),
             "list<string>": pa.list_(pa.string())}  # fmt: skip
    return pa.schema([pa.field(name, types[t]) for name, (t, _) in COLUMNS.items()])


def _write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema()), path)


__all__ = [
    "COLUMNS",
    "FORMATS",
    "SUFFIXES",
    "arrow_schema",
    "default_output",
    "eval_summary",
    "export_rows",
    "export_run",
    "file_stem",
    "output_format",
]
