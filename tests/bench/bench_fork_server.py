"""Per-evaluation wall time with the child spawned and forked from the warm worker (evaluator/zygote.py).

    python tests/bench/bench_fork_server.py [--device cpu|cuda] [-n 5] [--candidate triton_relu] [--problem toy/relu]

Prints one JSON line per case, medians over `-n` runs (spawn and fork alternate, after one untimed
evaluation that starts the warm worker):
* {"case": "import_torch_triton", "median_s"}: `python -c "import torch, triton"` in a fresh process;
* {"case": "zygote_boot", "seconds"}: the first evaluation's wait for the warm worker's imports;
* {"case": "eval_spawn" | "eval_fork", "median_s", "stages": {stage: median s}, "runs": [s, ...]};
* {"case": "fork_vs_import", "ratio"}: eval_fork's median over import_torch_triton's (issue 13's CPU goal:
  at most 1.2 for a Triton candidate inside a solve).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kb_agent.evaluator import EvalSettings, evaluate  # noqa: E402
from kb_agent.problems import resolve_one  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--candidate", default="triton_relu")
    ap.add_argument("--problem", default="toy/relu")
    args = ap.parse_args()
    src = (ROOT / "tests" / "candidates" / f"{args.candidate}.py").read_text()
    problem = resolve_one(args.problem)

    imports = []
    for _ in range(args.n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch, triton"], check=True)
        imports.append(time.perf_counter() - t0)
    print(json.dumps({"case": "import_torch_triton", "median_s": round(statistics.median(imports), 3)}))

    first = evaluate(problem, src, EvalSettings(device=args.device))
    print(json.dumps({"case": "zygote_boot", "seconds": first.child_start.get("seconds"),
                      "method": first.child_start.get("method"), "status": str(first.status)}))  # fmt: skip
    runs: dict[str, list] = {"spawn": [], "fork": []}
    for _ in range(args.n):
        for method in ("spawn", "fork"):
            t0 = time.perf_counter()
            r = evaluate(problem, src, EvalSettings(device=args.device, fork_server=method == "fork"))
            assert r.child_start["method"] == method, r.child_start
            runs[method].append((time.perf_counter() - t0, r.stages, str(r.status)))
    medians = {}
    for method, got in runs.items():
        walls = [w for w, _, _ in got]
        stages = {k: round(statistics.median(s.get(k, 0.0) for _, s, _ in got), 3) for k in got[0][1]}
        medians[method] = statistics.median(walls)
        print(json.dumps({"case": f"eval_{method}", "median_s": round(medians[method], 3), "stages": stages,
                          "runs": [round(w, 2) for w in walls], "statuses": sorted({s for _, _, s in got})}))  # fmt: skip
    ratio = medians["fork"] / statistics.median(imports)
    print(json.dumps({"case": "fork_vs_import", "ratio": round(ratio, 2)}))


if __name__ == "__main__":
    main()
