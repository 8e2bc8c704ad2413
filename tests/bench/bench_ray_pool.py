"""The evaluation pool against the Ray executor on one machine: the same CUDA candidates, all submitted
at once, through the local pool and then through a local Ray instance (issue 14).

    KB_DATASET=... python tests/bench/bench_ray_pool.py [--problem 1/1-6] [--turns 1,2,3]
        [--executor local,ray] [--device cuda]

The candidates are bench_sweep's scripted CUDA replies (tests/bench/sweep_replies.py: per problem, turn
1 a compile error, turns 2 and 3 correct, each a .cu built from nothing), evaluated with strict mode off
as in bench_sweep, with no model in between: what is measured is the executor. Each executor starts
from a fresh, empty build cache (KB_BUILD_DIR), so neither finds the other's builds; `ray` is a local
instance with a fresh worker per task (`RayExecutor()`), started before its clock.

Prints one JSON line per executor,

    {"executor": "ray", "wall_s": …, "evaluations": …, "gpu_busy": …, "build_slots": …,
     "statuses": {…}, "verdicts": {"1/1 turn 2": "correct", …}}

then {"same_verdicts": true, "wall_ratio_vs_local": {"ray": …}}. Needs no LLM package: Ray
(tests/bench/ray_bundle.sh) and the evaluator are all it imports.

Measured on one H100 node (16 CPUs, 2026-12-06, --problem 1/1-4: 4 compile errors, 8 correct): local
52.4 s (gpu_busy 0.364), ray 117.0 s (0.778), the same verdicts. With the one-phase Ray executor of
before (every build inside its GPU task) the ray run had not finished after 210 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from kb_agent.evaluator import EvalSettings  # noqa: E402
from kb_agent.evaluator.pool import EvalJob, EvalPool  # noqa: E402
from kb_agent.problems import resolve  # noqa: E402
from sweep_replies import candidate  # noqa: E402


def run(executor: str, jobs: list[tuple[str, EvalJob]], settings: EvalSettings) -> dict:
    """Every job submitted at once to `executor`'s pool; its JSON line."""
    with contextlib.ExitStack() as stack:
        os.environ["KB_BUILD_DIR"] = stack.enter_context(tempfile.TemporaryDirectory(prefix="kb-bench-ray-"))
        if executor == "ray":
            from kb_agent.evaluator.ray_executor import RayExecutor

            cluster = stack.enter_context(RayExecutor())
            cluster.probe(on_gpu=False)
            pool = cluster.pool(settings)
        else:
            pool = EvalPool(settings)
        t0 = time.perf_counter()
        futures = [(name, pool.submit(job)) for name, job in jobs]
        results = {name: f.result(timeout=1800) for name, f in futures}
        wall = time.perf_counter() - t0
        busy = pool.gpu_busy()
    return {
        "executor": executor,
        "wall_s": round(wall, 2),
        "evaluations": len(results),
        "gpu_busy": None if busy is None else round(busy, 3),
        "build_slots": pool.build_size,
        "statuses": dict(Counter(str(r.status) for r in results.values())),
        "verdicts": {name: str(r.status) for name, r in results.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--problem", default="1/1-6", help="problems, as solve --problem takes them (default 1/1-6)"
    )
    ap.add_argument("--turns", default="1,2,3", help="which scripted turns to evaluate (default 1,2,3)")
    ap.add_argument("--executor", default="local,ray", help="comma list: local, ray (default local,ray)")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    settings = EvalSettings(device=args.device, strict=False)
    turns = [int(t) for t in args.turns.split(",")]
    jobs = [
        (f"{p.key} turn {t}", EvalJob(p, candidate(p, t), settings))
        for p in resolve(args.problem)
        for t in turns
    ]
    lines = {}
    for executor in args.executor.split(","):
        print(f"{executor}: {len(jobs)} evaluations at once ...", file=sys.stderr, flush=True)
        lines[executor] = run(executor, jobs, settings)
        print(json.dumps(lines[executor]), flush=True)
    if "local" in lines and len(lines) > 1:
        local = lines["local"]
        print(json.dumps({"same_verdicts": all(x["verdicts"] == local["verdicts"] for x in lines.values()),
                          "wall_ratio_vs_local": {e: round(x["wall_s"] / local["wall_s"], 3)
                                                  for e, x in lines.items() if e != "local"}}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
