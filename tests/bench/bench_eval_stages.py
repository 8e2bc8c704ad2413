"""Wall time of each evaluation stage, cold and with a warm build cache, on a GPU machine.

    python tests/bench/bench_eval_stages.py [--json OUT.json] [--skip-plain] [--strict-problems 1/19,2/40]

Also: the cost of strict mode, the extra seconds a correct candidate's evaluation takes with the strict
checks on (the default) than with them off, with a warm build cache: on toy/relu, and for the ReLU
candidates on each of --strict-problems (default 1/19, 1.6e9 fp32 elements, where the strict trials'
extra input sets are largest).

Prints, for a one-line CUDA kernel (load_inline) and a small Triton kernel on toy/relu:
* the plain `load_inline` build of the same kernel in a fresh process (no evaluator, no PCH);
* evaluate() with an empty build cache (cold), then again with the same cache (warm).
The first cold CUDA run on a machine also builds the precompiled torch/extension.h (once per machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kb_agent.evaluator import EvalSettings, evaluate  # noqa: E402
from kb_agent.problems import resolve_one  # noqa: E402

CAND = ROOT / "tests" / "candidates"

PLAIN = r"""
import sys, time, torch
from torch.utils.cpp_extension import load_inline
src = sys.argv[1]
t = time.perf_counter()
ns = {}
cuda_src = src.split('cuda_src = r\"\"\"')[1].split('\"\"\"')[0]
m = load_inline(name="plain_relu_%d" % int(time.time()), cpp_sources="torch::Tensor relu(torch::Tensor x);",
                cuda_sources=cuda_src, functions=["relu"], build_directory=sys.argv[2])
print(time.perf_counter() - t)
"""


def plain_build_seconds(src: str) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run(
            [sys.executable, "-c", PLAIN, src, d], capture_output=True, text=True, check=True
        )
        return float(out.stdout.strip().splitlines()[-1])


def pch_present() -> bool:
    import torch.utils.cpp_extension as ce

    return (Path(ce._TORCH_PATH) / "include" / "torch" / "extension.h.gch").exists()


def one(name: str, tag: str, build_dir: str, problem: str = "toy/relu", **settings) -> dict:
    os.environ["KB_BUILD_DIR"] = build_dir
    t = time.perf_counter()
    r = evaluate(resolve_one(problem), (CAND / f"{name}.py").read_text(), EvalSettings(**settings))
    row = {"candidate": name, "problem": problem, "run": tag, "status": str(r.status), "wall_s": time.perf_counter() - t,
           "pch_before": None, **{f"{k}_s": v for k, v in r.stages.items()}, "compile_s": r.compile.seconds}  # fmt: skip
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--skip-plain", action="store_true", help="skip the plain load_inline build (~50 s)")
    ap.add_argument(
        "--strict-problems", default="1/19", help="problems for the strict-cost rows ('' for none)"
    )
    args = ap.parse_args()
    rows = []
    src = (CAND / "cuda_relu.py").read_text()
    if not args.skip_plain:
        rows.append({"candidate": "cuda_relu", "run": "plain load_inline (no evaluator)",
                     "compile_s": plain_build_seconds(src)})  # fmt: skip
    for name in ("cuda_relu", "triton_relu"):
        with tempfile.TemporaryDirectory() as cache:
            pch = pch_present()
            rows.append(
                one(name, "cold" + ("" if pch or name != "cuda_relu" else " (+ builds PCH once)"), cache)
            )
            rows.append(one(name, "warm", cache))
            rows.append(one(name, "warm, strict off", cache, strict=False))
        if name == "cuda_relu":
            with tempfile.TemporaryDirectory() as cache:
                rows.append(one(name, "cold (PCH present)", cache))
    for problem in filter(None, args.strict_problems.split(",")):
        for name in ("cuda_relu", "triton_relu"):
            with tempfile.TemporaryDirectory() as cache:
                one(name, "build", cache, problem)  # fills the cache; not a row
                rows.append(one(name, "warm", cache, problem))
                rows.append(one(name, "warm, strict off", cache, problem, strict=False))
    cols = [
        "candidate",
        "problem",
        "run",
        "status",
        "setup_s",
        "build_s",
        "compile_s",
        "correctness_s",
        "timing_s",
        "total_s",
    ]
    print(" | ".join(f"{c:>16}" for c in cols))
    for r in rows:
        print(
            " | ".join(
                f"{r[c]:>16.2f}" if isinstance(r.get(c), float) else f"{str(r.get(c, '')):>16}" for c in cols
            )
        )
    print("\nstrict cost (warm build cache): candidate, problem, total s strict on / off, extra s, ratio")
    for on in rows:
        off = next(
            (
                r
                for r in rows
                if r["run"] == "warm, strict off"
                and on["run"] == "warm"
                and (r["candidate"], r.get("problem")) == (on["candidate"], on.get("problem"))
            ),
            None,
        )
        if off and on.get("total_s") and off.get("total_s"):
            print(
                f"  {on['candidate']:<12} {on['problem']:<9} {on['total_s']:7.2f} / {off['total_s']:7.2f} s   "
                f"+{on['total_s'] - off['total_s']:6.2f} s   x{on['total_s'] / off['total_s']:.2f}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
