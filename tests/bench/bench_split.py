"""Builds on CPU slots, correctness and timing alone on the GPU slot (issues 13 and 14): what splitting an
evaluation into a build child and a run child costs and buys.

    python tests/bench/bench_split.py [--n 6] [--jobs 1,4] [--modes one,split] [--device cuda]

For each mode and `--jobs` setting, `--n` CUDA candidates (tests/candidates/cuda_relu.py, each with its own
constant in the .cu, so every build is cold) go through one `EvalPool` with `--jobs` of them submitted at
once: "split" with the default settings (a CUDA candidate is split: `EvalSettings.split_build` None),
"one" with `split_build=False` (build, correctness and timing in one child that holds the GPU slot). One
build cache (a fresh KB_BUILD_DIR) for the whole run. Prints one JSON line per setting:

    {"mode": "split", "jobs": 4, "n": 6, "wall_s": 61.2, "gpu_busy": 0.31, "statuses": {"correct": 6},
     "stages": {"build": 24.1, "run_load": 0.4, ...}, "runtime_ms": 0.0123, "builds": [["build", false],
     ["run", true]], "build_slots": 7, "gpu_cores": [14, 15]}

stages: the median of each stage over the candidates (seconds); runtime_ms: the median of the candidates'
mean times (KernelBench's figure; issue 13: a JIT build in the timed process inflates launch times after
it); builds: (child, cached) of each load_inline call of the first candidate; gpu_busy: the share of the
wall time the GPU slot was held. With --jobs above 1, "split" should hold the GPU for less of each
evaluation (run_setup + run_load + correctness + timing) and finish sooner than "one".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kb_agent.evaluator import EvalSettings  # noqa: E402
from kb_agent.evaluator.pool import EvalPool  # noqa: E402
from kb_agent.problems import resolve_one  # noqa: E402

TEMPLATE = (ROOT / "tests" / "candidates" / "cuda_relu.py").read_text()


def candidate(tag: str) -> str:
    """cuda_relu with a constant of its own in the .cu: a new build, the same C++ declarations."""
    return TEMPLATE.replace("#include <torch/extension.h>\n", f"#include <torch/extension.h>\n// {tag}\n", 1)


def setting(mode: str, jobs: int, n: int, device: str) -> dict:
    settings = EvalSettings(device=device, split_build=None if mode == "split" else False)
    pool = EvalPool(settings)
    problem = resolve_one("toy/relu")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as threads:
        results = list(
            threads.map(lambda i: pool.evaluate(problem, candidate(f"{mode}-{jobs}-{i}-{t0}")), range(n))
        )
    wall = time.perf_counter() - t0
    keys = sorted({k for r in results for k in r.stages})
    stages = {k: round(statistics.median(r.stages[k] for r in results if k in r.stages), 3) for k in keys}
    times = [r.runtime_ms for r in results if r.runtime_ms is not None]
    busy = pool.gpu_busy()
    slots = pool.slots()
    return {"mode": mode, "jobs": jobs, "n": n, "wall_s": round(wall, 2), "gpu_busy": busy and round(busy, 3),
            "statuses": dict(Counter(str(r.status) for r in results)), "stages": stages,
            "runtime_ms": round(statistics.median(times), 5) if times else None,
            "builds": [[b.get("child"), b.get("cached")] for b in results[0].compile.builds],
            "build_slots": pool.build_size, "gpu_cores": slots[0].cores,
            "messages": sorted({r.message[:200] for r in results if str(r.status) != "correct"})}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=6, help="candidates per setting (default 6)")
    ap.add_argument("--jobs", default="1,4", help="comma list of candidates in flight (default 1,4)")
    ap.add_argument("--modes", default="one,split", help="comma list of one, split (default both)")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-split-") as tmp:
        os.environ["KB_BUILD_DIR"] = tmp
        for jobs in (int(j) for j in args.jobs.split(",")):
            for mode in args.modes.split(","):
                print(json.dumps(setting(mode, jobs, args.n, args.device)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
