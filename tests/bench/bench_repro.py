"""Do speedups reproduce? Each kernel is evaluated twice, each time in a fresh child (two separate
`kb_agent.evaluator.evaluate` calls), and the two figures are compared (issue 11, goal P3).

    KB_DATASET=... python tests/bench/bench_repro.py [--kernels l1_p19_relu,...] [--order rounds]
        [--budget-s 280] [--repro-method auto] [--correctness-trials 5] [--no-device] [--strict]
        [--json OUT.json]

Kernels: tests/bench/repro_kernels/l<level>_p<id>_<name>.py, each an honest candidate for KernelBench
problem <level>/<id> (KB_DATASET must point at the problems). Kernels built with load_inline are built
first, all at once, in fresh processes of their own (quick evaluations whose figures are thrown away), so
the timed evaluations, one at a time, reuse the build ($KB_BUILD_DIR). --order pairs (the default)
evaluates each kernel twice back to back, as issue 11 measured; rounds evaluates every kernel once, then
every kernel again (a harder test, but a spent budget then leaves no kernel with two figures). One
evaluation of these kernels took 11 to 20 s on the H200 with the defaults and 10 to 18 s with
--correctness-trials 1 --no-device (child start 4-6 s, timing stage 4-10 s, of which the interleaved
pairs 0.05-0.7 s); a 300 s call fits about 8 kernels, so split the list over calls with --kernels.
No new evaluation starts past --budget-s seconds; a kernel without two correct evaluations is reported
and left out of the summary.

Prints one JSON line per kernel: the three speedups of each evaluation (parity: KernelBench's figure;
device: graph replays, one model after the other; repro: the reproducible figure), and for each the
relative difference |s2 - s1| / s1 in percent, with the repro figure's interval, pairs, stopping reason
and SM clocks. The last line:

    {"median_abs_delta_pct": …, "p95_abs_delta_pct": …, "n": …, "figure": "repro", "goal_met": …,
     "parity": {…}, "device": {…}, "repro_ratio_of_medians": {…}}

where the top-level figures are the reproducible one's, and p95 is numpy's linearly interpolated 95th
percentile. Progress goes to stderr. Strict mode and the profile are off (they time nothing compared
here) unless --strict.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kb_agent.evaluator import EvalResult, EvalSettings, Status, evaluate  # noqa: E402
from kb_agent.evaluator.thresholds import REPRO_GOAL_MEDIAN_PCT, REPRO_GOAL_P95_PCT  # noqa: E402
from kb_agent.problems import resolve_one  # noqa: E402

KERNELS = Path(__file__).resolve().parent / "repro_kernels"
NAME = re.compile(r"l(\d+)_p(\d+)_\w+\.py$")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def kernels(names: str | None) -> list[tuple[str, str, str]]:
    """(name, problem, source) of each kernel file, all of them or those named (comma-separated)."""
    found = {p.stem: p for p in sorted(KERNELS.glob("l*_p*.py")) if NAME.match(p.name)}
    wanted = [n.strip() for n in names.split(",") if n.strip()] if names else list(found)
    missing = [n for n in wanted if n not in found]
    if missing:
        raise SystemExit(f"no such kernel: {', '.join(missing)}; choose from {', '.join(found)}")
    out = []
    for n in wanted:
        level, pid = NAME.match(found[n].name).groups()
        out.append((n, f"{int(level)}/{int(pid)}", found[n].read_text()))
    return out


def figures(r: EvalResult, wall_s: float) -> dict:
    t = r.timing
    rom = (
        t.repro_reference.median_ms / t.repro_candidate.median_ms
        if t.repro_reference and t.repro_candidate
        else None
    )
    return {"status": str(r.status), "message": r.message[:300] if r.status != Status.CORRECT else "",
            "parity": r.speedup, "parity_ci95": t.speedup_ci95, "device": t.device_speedup,
            "device_method": t.device_method, "repro": t.repro_speedup, "repro_ci95": t.repro_ci95,
            "repro_rom": rom, "repro_method": t.repro_method, "repro_trials": t.repro_trials,
            "repro_rse": t.repro_rse, "repro_stopped": t.repro_stopped, "repro_s": t.repro_seconds,
            "clock": [t.sm_clock_mhz_before, t.sm_clock_mhz_after],
            "ref_ms": t.reference.mean_ms if t.reference else None,
            "wall_s": round(wall_s, 2), "stages": {k: round(v, 2) for k, v in r.stages.items()}}  # fmt: skip


def delta_pct(a: float | None, b: float | None) -> float | None:
    return abs(b - a) / a * 100 if a and b else None


def summary(deltas: list[float]) -> dict:
    if not deltas:
        return {"median_abs_delta_pct": None, "p95_abs_delta_pct": None, "n": 0}
    return {"median_abs_delta_pct": round(float(np.median(deltas)), 3),
            "p95_abs_delta_pct": round(float(np.percentile(deltas, 95)), 3), "n": len(deltas)}  # fmt: skip


def prebuild(todo: list[tuple[str, str, str]], jobs: int) -> None:
    """Build the load_inline kernels in parallel fresh processes: a quick evaluation each (one correctness
    trial, one timed call, no other figure), so the build cache holds them before anything is timed."""
    quick = EvalSettings(correctness_trials=1, warmup=0, discard=0, timed_trials=1, device_timing=False,
                         repro_timing=False, profile=False, strict=False)  # fmt: skip
    builds = [k for k in todo if "load_inline" in k[2]]
    if not builds:
        return
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {pool.submit(evaluate, resolve_one(p), src, quick): n for n, p, src in builds}
        for f in concurrent.futures.as_completed(futs):
            r = f.result()
            log(f"prebuilt {futs[f]}: {r.status} (build {r.compile.seconds or 0:.1f} s)")
    log(f"prebuild of {len(builds)} kernels: {time.perf_counter() - t0:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", help="comma-separated kernel names (default: all in repro_kernels/)")
    ap.add_argument("--order", choices=("pairs", "rounds"), default="pairs")
    ap.add_argument("--budget-s", type=float, default=280.0, help="no evaluation starts after this")
    ap.add_argument("--repro-method", choices=("auto", "events"), default="auto")
    ap.add_argument("--correctness-trials", type=int, default=5)
    ap.add_argument("--no-device", action="store_true", help="skip the device figure (saves seconds)")
    ap.add_argument("--strict", action="store_true", help="strict mode and the profile on (default off)")
    ap.add_argument("--build-jobs", type=int, default=4)
    ap.add_argument("--json", help="also write every evaluation's figures here")
    args = ap.parse_args()
    t_start = time.perf_counter()
    todo = kernels(args.kernels)
    settings = EvalSettings(strict=args.strict, profile=args.strict, repro_method=args.repro_method,
                            correctness_trials=args.correctness_trials, device_timing=not args.no_device)  # fmt: skip
    prebuild(todo, args.build_jobs)
    runs: dict[str, list[dict]] = {n: [] for n, _, _ in todo}
    plan = [k for k in todo for _ in (0, 1)] if args.order == "pairs" else todo + todo
    for name, problem, src in plan:
        if time.perf_counter() - t_start > args.budget_s:
            log(f"budget of {args.budget_s:.0f} s spent: {name} not evaluated again")
            continue
        t0 = time.perf_counter()
        r = evaluate(resolve_one(problem), src, settings)
        fig = figures(r, time.perf_counter() - t0)
        runs[name].append(fig)
        log(f"{name} ({problem}) #{len(runs[name])}: {fig['status']} parity {fig['parity']} device "
            f"{fig['device']} repro {fig['repro']} {fig['repro_ci95']} ({fig['repro_trials']} pairs, "
            f"{fig['repro_stopped']}) {fig['wall_s']} s")  # fmt: skip
    deltas: dict[str, list[float]] = {"parity": [], "device": [], "repro": [], "repro_rom": []}
    for name, problem, _ in todo:
        got = runs[name]
        line = {"kernel": name, "problem": problem, "status": [g["status"] for g in got]}
        both = len(got) == 2 and all(g["status"] == "correct" for g in got)
        for key in deltas:
            line[key] = [g[key] for g in got]
            d = delta_pct(*line[key]) if both else None
            line[f"{key}_delta_pct"] = None if d is None else round(d, 3)
            if d is not None:
                deltas[key].append(d)
        for key in (
            "repro_ci95",
            "repro_trials",
            "repro_stopped",
            "repro_method",
            "clock",
            "ref_ms",
            "wall_s",
            "stages",
        ):
            line[key] = [g[key] for g in got]
        if not both:
            line["messages"] = [g["message"] for g in got if g["message"]]
        print(json.dumps(line), flush=True)
    last = summary(deltas["repro"])
    last.update(figure="repro", goal={"median_pct": REPRO_GOAL_MEDIAN_PCT, "p95_pct": REPRO_GOAL_P95_PCT})
    last["goal_met"] = bool(last["n"]) and last["median_abs_delta_pct"] <= REPRO_GOAL_MEDIAN_PCT \
        and last["p95_abs_delta_pct"] <= REPRO_GOAL_P95_PCT  # fmt: skip
    last.update(parity=summary(deltas["parity"]), device=summary(deltas["device"]),
                repro_ratio_of_medians=summary(deltas["repro_rom"]), wall_s=round(time.perf_counter() - t_start, 1))  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "summary": last}, indent=1))
    print(json.dumps(last), flush=True)


if __name__ == "__main__":
    main()
