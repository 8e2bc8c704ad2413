"""Wall seconds of `kb-agent baseline` with and without the warm-up phase (`run_baselines(jobs=N)`).

    python tests/bench/bench_baseline_jobs.py [--spec toy] [--device cpu|cuda] [--jobs 1 2] [--mode default]

For each N of `--jobs`, in that order, times every problem of `--spec` again (`force`) into a store of its
own in a temp folder, and prints one JSON line: {"case": "jobs=N", "wall_s" (the whole call), "warmup_s"
(the warm-up phase's wall seconds: its first start to its last end; null for N 1), "timing_s" (the rest),
"statuses", "problems": [{"key", "compile_s" (the cold compile), "compile_s_from", "warm_compile_s" (the
timing child's first call from the warm caches), "fxgraph_hit" (that call's FX graph cache hits),
"eager_ms", "compile_ms"}]}. Then {"case": "speedup", "wall_ratio"}: the first N's wall over the last's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kb_agent.agent.baseline import run_baselines  # noqa: E402
from kb_agent.agent.store import Store  # noqa: E402
from kb_agent.evaluator import EvalSettings  # noqa: E402
from kb_agent.evaluator.runner import warm_baseline  # noqa: E402
from kb_agent.problems import resolve  # noqa: E402


def one(problems, settings, jobs: int, mode: str) -> dict:
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    def warm_fn(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return warm_baseline(*args, **kwargs)
        finally:
            with lock:
                spans.append((t0, time.perf_counter()))

    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "bench.sqlite") as store:
        t0 = time.perf_counter()
        out = run_baselines(problems, settings, store=store, compile_mode=mode, force=True, jobs=jobs,
                            warm_fn=warm_fn)  # fmt: skip
        wall = time.perf_counter() - t0
    warmup = max(e for _, e in spans) - min(s for s, _ in spans) if spans else None
    rows = [{"key": r["key"], "compile_s": r.get("compile_s"), "compile_s_from": r.get("compile_s_from"),
             "warm_compile_s": r.get("warm_compile_s"),
             "fxgraph_hit": (r.get("compile_cache") or {}).get("fxgraph_hit"),
             "eager_ms": r.get("eager_ms"), "compile_ms": r.get("compile_ms")} for r in out]  # fmt: skip
    return {"case": f"jobs={jobs}", "wall_s": round(wall, 1), "warmup_s": None if warmup is None else round(warmup, 1),
            "timing_s": round(wall - (warmup or 0.0), 1), "statuses": [r["status"] for r in out],
            "problems": rows}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="toy")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--mode", default="default")
    args = ap.parse_args()
    problems = resolve(args.spec)
    settings = EvalSettings(device=args.device)
    walls = []
    for jobs in args.jobs:
        line = one(problems, settings, jobs, args.mode)
        walls.append(line["wall_s"])
        print(json.dumps(line), flush=True)
    if len(walls) > 1:
        print(json.dumps({"case": "speedup", "wall_ratio": round(walls[0] / walls[-1], 2)}))


if __name__ == "__main__":
    main()
