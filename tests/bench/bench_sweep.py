"""How much faster is a sweep with more trajectories in flight? (issue 14, goal P2)

    python tests/bench/bench_sweep.py [--jobs 1,4] [--latency-s 3] [--problem toy] [--turns 2]
        [--samples 1] [--device cpu] [--replies DIR] [--retime] [--strict]

Runs the same sweep once per `--jobs` setting: the main job (`agent.job.start`, as `kb-agent solve` runs
it) on `--problem` against the bundled fake model server (`kb_agent.agent.fakeserver`) answering every
request after `--latency-s` seconds, each conversation with reply N+1 of `--replies` at its turn N+1
(default: the built-in scripted/demo replies, Triton kernels written for toy/relu: a compile error, a
wrong result, a correct kernel; other problems get them too and fail them, which costs an evaluation
all the same). Every setting starts from an empty store in a temporary folder and a fresh evaluation
pool (`evaluator.pool.EvalPool`: one slot per visible GPU, or one per core with --device cpu).

Prints one JSON line per setting:

    {"jobs": 4, "wall_s": 31.2, "evaluations": 10, "gpu_busy": null, "slots": 2, "trajectories": 5,
     "turns": 10, "latency_s": 3.0, "device": "cpu", "statuses": {...}}

Measured on the 2-core CPU machine (toy, 5 trajectories x 2 turns, 3 s latency, other work sharing the
cores, load average about 4): --jobs 1 48.7 s, --jobs 4 20.3 s (0.42 of the time), 10 evaluations each.

wall_s: seconds from the start of the run to its end (the store opened, litellm imported before);
evaluations: evaluation jobs the pool ran (turns with code, plus re-timings); gpu_busy: the share of the
wall time the GPU slots were held (`EvalPool.gpu_busy`), null on the CPU. Progress goes to stderr. The
last line compares the settings: {"speedup_vs_first": {"4": 2.1}, ...}.

Goals (issue 14): on a 2-core CPU machine, toy problems with 3 s latency, --jobs 4 in at most half the wall
time of --jobs 1; on the H200, 20 level-1 problems x 3 turns of scripted CUDA replies with 20 s latency,
--jobs 8 at least 5x faster than --jobs 1 with the GPU busy at least 70 % of the time.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kb_agent.agent import job  # noqa: E402
from kb_agent.agent.fakeserver import FakeLLMServer, load_replies  # noqa: E402
from kb_agent.agent.llm import LLMConfig  # noqa: E402
from kb_agent.agent.loop import SolveConfig  # noqa: E402
from kb_agent.agent.store import Store  # noqa: E402
from kb_agent.evaluator.pool import EvalPool  # noqa: E402
from kb_agent.problems import resolve  # noqa: E402

DEMO = ROOT / "agent" / "scripted" / "demo"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sweep(args: argparse.Namespace, jobs: int, replies: list, problems: list) -> dict:
    """One sweep with `jobs` trajectories in flight; returns its JSON line."""
    config = SolveConfig(turns=args.turns, samples=args.samples, device=args.device,
                         backend="triton" if args.device == "cpu" else args.backend, strict=args.strict,
                         retime_best=args.retime, run_name=f"sweep-jobs{jobs}")  # fmt: skip
    pool = EvalPool(job.evaluator_settings(config))
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp, Store(Path(tmp) / "kb.sqlite") as store:
        with FakeLLMServer(replies, by_turn=True, latency_s=args.latency_s) as srv:
            llm = LLMConfig(model="openai/scripted", api_base=srv.openai_base, max_attempts=1)
            turns_seen = []
            t0 = time.perf_counter()
            run_id = job.start(problems, config, llm, store=store, evaluator=pool, jobs=jobs,
                               on_turn=lambda e: turns_seen.append(e.status))  # fmt: skip
            wall = time.perf_counter() - t0
            requests = len(srv.requests)
        statuses = Counter(t["status"] for t in store.turn_summaries(run_id))
        status = store.get_run(run_id)["status"]
    busy = pool.gpu_busy()
    return {
        "jobs": jobs,
        "wall_s": round(wall, 2),
        "evaluations": sum(s.done for s in pool.slots()),
        "gpu_busy": None if busy is None else round(busy, 3),
        "slots": pool.size,
        "trajectories": len(problems) * args.samples,
        "turns": len(turns_seen),
        "requests": requests,
        "latency_s": args.latency_s,
        "device": args.device,
        "run_status": status,
        "statuses": dict(statuses),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", default="1,4", help="comma list of --jobs settings to compare (default 1,4)")
    ap.add_argument("--latency-s", type=float, default=3.0, help="the fake model's reply latency (default 3)")
    ap.add_argument("--problem", default="toy", help="problems, as solve --problem takes them (default toy)")
    ap.add_argument("--turns", type=int, default=2, help="turns per trajectory (default 2)")
    ap.add_argument("--samples", type=int, default=1, help="trajectories per problem (default 1)")
    ap.add_argument("--device", default="cpu", help="cpu (Triton under the interpreter) or cuda")
    ap.add_argument("--backend", default="cuda", help="cuda or triton, for --device cuda (default cuda)")
    ap.add_argument("--replies", default=str(DEMO), help="a folder of N.md replies (default scripted/demo)")
    ap.add_argument("--retime", action="store_true", help="re-time each trajectory's winner (off here)")
    ap.add_argument("--strict", action="store_true", help="strict mode (off here: it times nothing compared)")
    ap.add_argument("--dataset", default=None, help="a local KernelBench folder (default $KB_DATASET)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    settings = [int(j) for j in args.jobs.split(",")]
    replies = load_replies(args.replies)
    problems = resolve(args.problem, args.dataset)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: no fetch of the price map
    import litellm  # noqa: F401  - imported once, outside the timed sweeps

    lines = []
    for jobs in settings:
        log(f"jobs {jobs}: {len(problems) * args.samples} trajectories x {args.turns} turns ...")
        line = sweep(args, jobs, replies, problems)
        lines.append(line)
        print(json.dumps(line), flush=True)
    first = lines[0]["wall_s"]
    print(json.dumps({"speedup_vs_first": {str(x["jobs"]): round(first / x["wall_s"], 2) for x in lines[1:]},
                      "wall_ratio_vs_first": {str(x["jobs"]): round(x["wall_s"] / first, 3) for x in lines[1:]}}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
