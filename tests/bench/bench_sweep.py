"""How much faster is a sweep with more trajectories in flight? (issue 14, goal P2)

    python tests/bench/bench_sweep.py [--jobs 1,4] [--latency-s 3] [--problem toy] [--turns 2]
        [--samples 1] [--device cpu] [--replies DIR] [--retime] [--strict] [--executor local,ray,ray-reuse]
        [--db PATH]

Runs the same sweep once per `--jobs` setting: the main job (`agent.job.start`, as `kb-agent solve` runs
it) on `--problem` against the bundled fake model server (`kb_agent.agent.fakeserver`) answering every
request after `--latency-s` seconds, each conversation with reply N+1 of `--replies` at its turn N+1
(default: the built-in scripted/demo replies, Triton kernels written for toy/relu: a compile error, a
wrong result, a correct kernel; other problems get them too and fail them, which costs an evaluation
all the same). `--replies wrap` gives each problem CUDA replies of its own that fit any problem
(tests/bench/sweep_replies.py: a compile error, then two correct candidates that keep the reference's
operators and copy its output with a new CUDA kernel, each turn a .cu built from nothing), so that the
GPU times correct candidates as a real sweep's would. Every setting starts from an empty store in a temporary folder (or writes its run,
named sweep-jobsN, into the store --db names, which keeps it for `report`, `export` and `view`) and a
fresh evaluation pool (`evaluator.pool.EvalPool`: one slot per visible GPU, or one per core with
--device cpu).
`--executor local,ray` runs every --jobs setting once per executor: `ray` through a local Ray instance
started once, after the local sweeps (`evaluator.ray_executor.RayExecutor`; its start is not in wall_s,
it is printed as `ray_start_s`), each evaluation a Ray task in a fresh worker process; `ray-reuse` the same
with workers reused (`RayExecutor(fresh_workers=False)`: each worker's fork server stays warm).

Prints one JSON line per setting:

    {"jobs": 4, "wall_s": 31.2, "evaluations": 10, "gpu_busy": null, "gpu_busy_in_flight": null,
     "in_flight_s": 24.1, "slots": 2, "trajectories": 5,
     "turns": 10, "latency_s": 3.0, "device": "cpu", "statuses": {...}}

Measured on the 2-core CPU machine (toy, 5 trajectories x 2 turns, 3 s latency, other work sharing the
cores, load average about 4): --jobs 1 48.7 s, --jobs 4 20.3 s (0.42 of the time), 10 evaluations each.
Through Ray there (`--executor local,ray`, load average 3 to 6): the same verdicts on every turn; local
44.9 s and 13.9 s, ray 118.8 s and 78.8 s (a fresh worker per task pays a worker start and torch's
imports, about 7 s an evaluation); `--executor local,ray-reuse`: local 38.4 s and 13.8 s, ray-reuse 42.1 s
and 18.2 s.

Measured on the H200 (2026-12-02; 20 level-1 problems 1/1-20 x 3 turns, --replies wrap, 20 s latency,
strict mode off, a cold build cache; tests/bench/gpu_checks.sh sweep): --jobs 8 428.4 s, gpu_busy 0.356;
--jobs 20 301.6 s, gpu_busy 0.633; --jobs 1 over 1/1-3 362.1 s (0.054), about 2,414 s scaled to 20
problems, so --jobs 8 is about 5.6x faster (scaled, not run: --jobs 1 over 20 needs more device time than a
session has). Each run: 40 evaluations, every trajectory compile_error, correct, correct. A turn spends
20 s waiting for the model and its build (`stages.build`, median 22 s, 8-33 s at --jobs 8) on the CPU
against a median 2.1 s (0.4-8.2 s) holding the GPU (correctness and timing) when correct, so 8 trajectories
in flight cannot keep the one GPU busy 70 % of the time.

wall_s: seconds from the start of the run to its end (the store opened, litellm imported before);
evaluations: evaluation jobs the pool ran (turns with code, plus re-timings); gpu_busy: the share of the
wall time the GPU slots were held (`EvalPool.gpu_busy`), null on the CPU; gpu_busy_in_flight: the share
of in_flight_s, the seconds in which at least one candidate was in the pool (building, waiting for a
slot, or running), that they were held (`EvalPool.gpu_busy(in_flight=True)`): how busy the GPU is while
candidates wait for their verdicts, the stretches in which every trajectory waits for its model left out. Progress goes to stderr. The
last line compares the settings: {"speedup_vs_first": {"4": 2.1}, ...}; with two executors or more, a line
{"same_verdicts": true, ...} says whether every turn got the same status under each, per --jobs setting.
verdicts: "problem#sample" -> the statuses of its turns, in order.

Goals (issue 14): on a 2-core CPU machine, toy problems with 3 s latency, --jobs 4 in at most half the wall
time of --jobs 1; on the H200, 20 level-1 problems x 3 turns of scripted CUDA replies with 20 s latency,
--jobs 8 at least 5x faster than --jobs 1 with the GPU busy at least 70 % of the time.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
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

sys.path.insert(0, str(ROOT / "tests" / "bench"))
from sweep_replies import wrapped_replies  # noqa: E402

DEMO = ROOT / "agent" / "scripted" / "demo"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sweep(args: argparse.Namespace, jobs: int, replies: list, problems: list, cluster=None) -> dict:
    """One sweep with `jobs` trajectories in flight (evaluated on `cluster`, a RayExecutor, when given);
    returns its JSON line."""
    config = SolveConfig(turns=args.turns, samples=args.samples, device=args.device,
                         backend="triton" if args.device == "cpu" else args.backend, strict=args.strict,
                         retime_best=args.retime, run_name=f"sweep-jobs{jobs}")  # fmt: skip
    if cluster is None:
        pool = EvalPool(job.evaluator_settings(config))
    else:
        pool = cluster.pool(config.eval_settings())
        if config.device.startswith("cuda"):
            config = dataclasses.replace(config, **cluster.gpu_target())
    with (
        tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp,
        Store(args.db or Path(tmp) / "kb.sqlite") as store,
    ):
        routes = {p.code.strip(): wrapped_replies(p) for p in problems} if args.replies == "wrap" else None
        with FakeLLMServer(replies, by_turn=True, latency_s=args.latency_s, routes=routes) as srv:
            llm = LLMConfig(model="openai/scripted", api_base=srv.openai_base, max_attempts=1)
            turns_seen = []
            t0 = time.perf_counter()
            run_id = job.start(problems, config, llm, store=store, evaluator=pool, jobs=jobs,
                               on_turn=lambda e: turns_seen.append(e.status))  # fmt: skip
            wall = time.perf_counter() - t0
            requests = len(srv.requests)
        statuses = Counter(t["status"] for t in store.turn_summaries(run_id))
        status = store.get_run(run_id)["status"]
        verdicts = {f"{t['problem_key']}#{t['sample']}": ",".join(str(x["status"]) for x in store.turns(t["id"]))
                    for t in store.trajectories(run_id)}  # fmt: skip
    busy, busy_in_flight = pool.gpu_busy(), pool.gpu_busy(in_flight=True)
    return {
        "executor": args.executor_now,
        "jobs": jobs,
        "wall_s": round(wall, 2),
        # a split evaluation passes through a build slot and a run slot: count it once, at its run slot
        "evaluations": sum(s.done for s in pool.slots() if getattr(s, "kind", "run") != "build"),
        "gpu_busy": None if busy is None else round(busy, 3),
        "gpu_busy_in_flight": None if busy_in_flight is None else round(busy_in_flight, 3),
        "in_flight_s": round(pool.in_flight_seconds(), 2),
        "slots": pool.size,
        "trajectories": len(problems) * args.samples,
        "turns": len(turns_seen),
        "requests": requests,
        "latency_s": args.latency_s,
        "device": args.device,
        "run_status": status,
        "statuses": dict(statuses),
        "verdicts": verdicts,
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
    ap.add_argument("--replies", default=str(DEMO),
                    help="a folder of N.md replies (default scripted/demo), or wrap: CUDA replies per problem")  # fmt: skip
    ap.add_argument("--retime", action="store_true", help="re-time each trajectory's winner (off here)")
    ap.add_argument("--strict", action="store_true", help="strict mode (off here: it times nothing compared)")
    ap.add_argument("--dataset", default=None, help="a local KernelBench folder (default $KB_DATASET)")
    ap.add_argument("--executor", default="local", help="comma list of executors: local, ray (default local)")
    ap.add_argument(
        "--db", type=Path, default=None, help="keep the runs in this store (default: a temporary one)"
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    settings = [int(j) for j in args.jobs.split(",")]
    replies = [] if args.replies == "wrap" else load_replies(args.replies)
    problems = resolve(args.problem, args.dataset)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: no fetch of the price map
    import litellm  # noqa: F401  - imported once, outside the timed sweeps

    executors = args.executor.split(",")
    if not set(executors) <= {"local", "ray", "ray-reuse"}:
        ap.error(f"--executor: local, ray or ray-reuse, got {args.executor}")
    with contextlib.ExitStack() as stack:
        lines: dict[str, list[dict]] = {}
        for executor in executors:
            cluster = None
            if executor != "local":  # started after the local sweeps, so that its processes idle beside none
                from kb_agent.evaluator.ray_executor import RayExecutor

                t0 = time.perf_counter()
                stack.close()  # one Ray instance at a time
                cluster = stack.enter_context(RayExecutor(fresh_workers=executor == "ray"))
                cluster.probe(on_gpu=False)  # the first worker, outside the timed sweeps
                print(json.dumps({"ray_start_s": round(time.perf_counter() - t0, 2), "resources": cluster.resources()}),
                      flush=True)  # fmt: skip
            for jobs in settings:
                log(
                    f"{executor}, jobs {jobs}: {len(problems) * args.samples} trajectories x {args.turns} turns ..."
                )
                args.executor_now = executor
                line = sweep(args, jobs, replies, problems, cluster)
                lines.setdefault(executor, []).append(line)
                print(json.dumps(line), flush=True)
    for executor, runs in lines.items():
        first = runs[0]["wall_s"]
        print(json.dumps({"executor": executor,
                          "speedup_vs_first": {str(x["jobs"]): round(first / x["wall_s"], 2) for x in runs[1:]},
                          "wall_ratio_vs_first": {str(x["jobs"]): round(x["wall_s"] / first, 3) for x in runs[1:]}}))  # fmt: skip
    if len(lines) > 1:
        first, *others = lines
        same = {f"{e}/{a['jobs']}": a["verdicts"] == b["verdicts"]
                for e in others for a, b in zip(lines[first], lines[e], strict=True)}  # fmt: skip
        print(json.dumps({"same_verdicts": all(same.values()), "per_setting": same,
                          "wall_ratio_vs_" + first: {f"{e}/{a['jobs']}": round(b["wall_s"] / a["wall_s"], 3)
                                                     for e in others for a, b in zip(lines[first], lines[e], strict=True)}}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
