"""Strict mode against honest candidates: each problem's reference evaluated as its own candidate.

    KB_DATASET=... python tests/bench/bench_honest_strict.py [--problems 1/1-100] [--device cuda]
        [--budget-s 420] [--jsonl OUT.jsonl]

The candidate is the problem's reference source with `class ModelNew(Model): pass` appended: it computes
exactly what the reference computes, through the same PyTorch calls. Strict mode rejects it, rightly, for
having no kernel of its own (`NO_KERNEL_CHECKS`: the inheritance, no load_inline or Triton source, the
reference's ops doing all the work); every other check it fails (`other_failures`) rejects an honest
computation, and is a false positive of that check: the timing checks (`no_replay`, `no_parity_replay`,
`timed_work_on_stream`, `output_ready_on_stream`, `timing_outputs`, `inputs_unchanged`) above all, whose
thresholds this measures on real problems. Each is evaluated through the public
`kb_agent.evaluator.evaluate` with default settings (strict on).

Prints one JSON line per problem:

    {"problem": "1/19", "status": "rejected", "other_failures": [...], "reason": …, "seconds": …,
     "speedup": …, "parity_over_fresh": …, "parity_over_judged": …, "repeat_over_fresh": …}

(`reason` only where the status is neither rejected for `NO_KERNEL_CHECKS` alone nor correct), then a
summary line `{"summary": {"n": …, "status": {status: count}, "other_failures": {check: count},
"parity_over_fresh": {"min": …, "p05": …, "median": …}, "parity_over_judged": {…}, "repeat_over_fresh": {…}}}`.
`parity_over_judged` is the parity median over the faster of strict timing's judged calls (the figure
the `no_parity_replay` check holds to `thresholds.PARITY_REPLAY_FLOOR`), `parity_over_fresh` over the
median of all its fresh-value calls, `repeat_over_fresh` the repeated-input
median over it (`no_replay`, `thresholds.REPLAY_FLOOR`): how far each honest candidate is from its floor.
No problem starts once fewer than the median seconds of one evaluation so far are left in --budget-s;
those are named in the summary's `skipped`.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kb_agent.evaluator import EvalSettings, evaluate  # noqa: E402
from kb_agent.problems import resolve  # noqa: E402

SUFFIX = "\n\nclass ModelNew(Model):\n    pass\n"
# what strict mode rightly says of a candidate that is the reference itself
NO_KERNEL_CHECKS = {"static", "custom_kernel_source", "not_the_reference_ops", "custom_kernels_do_the_work"}


def as_candidate(reference_source: str) -> str:
    """The reference's own module, with `ModelNew` the reference's `Model`."""
    return reference_source + SUFFIX


def record(key: str, result, seconds: float) -> dict:
    strict = (result.timing.settings or {}).get("strict") or {}
    fresh = strict.get("event_median_ms")
    checks = (result.strict or {}).get("checks") or {}
    other = sorted(
        name for name, c in checks.items() if not c.get("passed", True) and name not in NO_KERNEL_CHECKS
    )
    expected = str(result.status) == "rejected" and not other
    return {
        "problem": key,
        "status": str(result.status),
        "other_failures": other,
        "reason": None if expected or result.correct else result.message[:400],
        "seconds": round(seconds, 2),
        "speedup": result.speedup,
        "parity_over_fresh": strict.get("parity_over_fresh"),
        "parity_over_judged": strict.get("parity_over_judged"),
        "repeat_over_fresh": strict["repeat_median_ms"] / fresh
        if fresh and "repeat_median_ms" in strict
        else None,
    }


def spread(values: list[float]) -> dict:
    if not values:
        return {}
    v = sorted(values)
    return {"min": v[0], "p05": v[int(0.05 * (len(v) - 1))], "median": statistics.median(v), "n": len(v)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default="1/1-100", help="problem spec, e.g. 1/1-100 or 2 (default 1/1-100)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget-s", type=float, default=420.0, help="wall seconds for the whole run")
    ap.add_argument("--jsonl", help="also write every line to this file")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    out = open(args.jsonl, "w") if args.jsonl else None  # noqa: SIM115
    rows, took, skipped = [], [], []

    def emit(line: dict) -> None:
        text = json.dumps(line)
        print(text, flush=True)
        if out:
            out.write(text + "\n")
            out.flush()

    for problem in resolve(args.problems):
        key = f"{problem.level}/{problem.problem_id}"
        left = args.budget_s - (time.perf_counter() - t_start)
        if left < (statistics.median(took) if took else 0.0):
            skipped.append(key)
            continue
        t0 = time.perf_counter()
        result = evaluate(problem, as_candidate(problem.code), EvalSettings(device=args.device))
        took.append(time.perf_counter() - t0)
        rows.append(record(key, result, took[-1]))
        emit(rows[-1])
    emit({"summary": {
        "n": len(rows),
        "status": dict(collections.Counter(r["status"] for r in rows)),
        "other_failures": dict(collections.Counter(c for r in rows for c in r["other_failures"])),
        "parity_over_fresh": spread([r["parity_over_fresh"] for r in rows if r["parity_over_fresh"]]),
        "parity_over_judged": spread([r["parity_over_judged"] for r in rows if r["parity_over_judged"]]),
        "repeat_over_fresh": spread([r["repeat_over_fresh"] for r in rows if r["repeat_over_fresh"]]),
        "skipped": skipped,
    }})  # fmt: skip
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
