"""Evaluate every red-team candidate in parity and strict mode and print what the evaluator says.

    python tests/bench/redteam_table.py [--device cpu|cuda] [--only SUBSTR[,SUBSTR]] [--modes parity,strict]
                                        [--jobs N] [--no-prewarm] [--skip-slow] [--json OUT.json]

--device cpu (the default without a GPU) runs the `device: cpu` and `cpu-only` candidates with Triton
under the interpreter; --device cuda (the default with a GPU) runs all the others on the GPU and the
`cpu-only` ones (host-code kernels) on the CPU. The table has one row per
candidate: its threat class, the verdict a trustworthy evaluator gives (`expected`), the parity
(KernelBench rules, strict=False) status and speedup, the strict status, speedup and reason, and OK/HOLE
for strict (HOLE: the candidate got past it; see tests/redteam/catalog.py for what is checked). At the end:
every attack that parity calls correct, and every strict HOLE.

On a GPU machine the CUDA (load_inline) candidates are first built in parallel with a cheap evaluation
(one trial, profile off), so the measured runs hit the warm build cache; then candidates run `--jobs` at a
time (default 3 on cuda, 1 on cpu; with several GPUs, workers are spread over cuda:0..N-1). Candidates
that leave processes, files or their own build directory behind always run alone, and so do those
expected correct on cuda (their timing is judged).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _load_catalog():
    name = "kb_redteam_catalog"
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "redteam" / "catalog.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


catalog = _load_catalog()
_print_lock = threading.Lock()


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


def fmt_speed(s) -> str:
    if s is None:
        return ""
    return f"{s:.3g}x"


def cell(o, err) -> str:
    if err:
        return f"ERROR {err}"
    if o is None:
        return "n/a"
    s = o.status
    if o.status == "correct" and o.speedup is not None:
        s += f" {fmt_speed(o.speedup)}"
    return s


def notes(o) -> str:
    if o is None:
        return ""
    out = []
    if o.artifacts_created:
        out.append("wrote " + ",".join(os.path.basename(p) for p in o.artifacts_created))
    if o.orphans:
        out.append(f"orphans {len(o.orphans)}")
    if o.leaked:
        out.append("LEAKED " + ",".join(o.leaked))
    return "; ".join(out)


def run_one(c, device: str, modes: list[str], strict_ok: bool, manage_env: bool) -> dict:
    row = {"candidate": c.name, "class": c.cls, "expected": c.expected, "accept": c.accept, "device": device}
    for mode in modes:
        if mode == "strict" and not strict_ok:
            row[mode] = None
            row[mode + "_error"] = "EvalSettings has no strict field"
            continue
        strict = (mode == "strict") if strict_ok else None
        try:
            o = catalog.run(c, device, strict, manage_env=manage_env)
            row[mode] = o
            row[mode + "_error"] = None
        except Exception as e:  # a problem that does not resolve, a harness bug: keep going
            row[mode] = None
            row[mode + "_error"] = f"{type(e).__name__}: {e}"[:200]
    return row


def prewarm(cands, device: str, jobs: int) -> None:
    """Fill the build cache for the load_inline candidates, several at once (builds are CPU-bound)."""
    from kb_agent.evaluator import EvalSettings, StageLimits, evaluate

    todo = [c for c in cands if "load_inline" in c.source and not c.fresh_build and not c.lingering]
    if not todo:
        return
    t0 = time.perf_counter()
    fields = {f.name for f in dataclasses.fields(EvalSettings)}

    def build(c):
        kw = dict(
            device=device,
            correctness_trials=1,
            timed_trials=1,
            warmup=0,
            profile=False,
            limits=StageLimits(build_s=600, correctness_s=60, timing_s=60),
        )
        if "strict" in fields:
            kw["strict"] = False
        try:
            evaluate(catalog.resolve_problem(c.problem), c.source, EvalSettings(**kw))
        except Exception:
            pass

    build(todo[0])  # alone first: a cold machine also builds the shared precompiled header then, and
    # several first builds racing on it crashed g++ (internal compiler error) on an H200 machine
    with ThreadPoolExecutor(max(1, jobs)) as ex:
        list(ex.map(build, todo[1:]))
    print(f"# prewarmed {len(todo)} extension builds in {time.perf_counter() - t0:.0f} s", flush=True)


def _dump(o):
    if o is None:
        return None
    return {
        "status": o.status,
        "speedup": o.speedup,
        "message": o.message[:2000],
        "ok": o.ok,
        "problems": o.problems,
        "strict": o.strict_info,
        "artifacts_created": o.artifacts_created,
        "orphans": o.orphans,
        "leaked": o.leaked,
        "seconds": o.seconds,
        "reason": catalog.reason(o.result),
    }


def row_json(r: dict) -> dict:
    return {
        **{k: v for k, v in r.items() if k not in ("parity", "strict")},
        "parity": _dump(r.get("parity")),
        "strict": _dump(r.get("strict")),
    }


def print_row(row: dict, widths: dict) -> None:
    p, s = row.get("parity"), row.get("strict")
    verdict = ""
    if s is not None:
        verdict = "OK" if s.ok else "HOLE"
    elif row.get("strict_error") and "no strict" not in row["strict_error"]:
        verdict = "ERR"
    reason = ""
    if s is not None:
        reason = catalog.reason(s.result) if s.status != "correct" else ""
        if s.problems:
            reason = "; ".join(s.problems) + (" | " + reason if reason else "")
    elif row.get("strict_error"):
        reason = row["strict_error"]
    exp = row["expected"] + ("|" + "|".join(row["accept"]) if row["accept"] else "")
    n = "; ".join(x for x in (notes(p), notes(s)) if x)
    line = (
        f"{row['candidate']:<{widths['c']}}  {row['class']:<18}  {exp:<34}  "
        f"{cell(p, row.get('parity_error')):<22}  {cell(s, row.get('strict_error')):<22}  {verdict:<4}  "
        f"{reason[:150]}{'  [' + n + ']' if n else ''}"
    )
    with _print_lock:
        print(line, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    ap.add_argument("--only", default="", help="comma-separated substrings of candidate names")
    ap.add_argument(
        "--exclude", default="", help="comma-separated substrings of candidate names to leave out"
    )
    ap.add_argument("--modes", default="parity,strict")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--no-prewarm", action="store_true")
    ap.add_argument("--prewarm-jobs", type=int, default=2, help="extension builds at once while prewarming")
    ap.add_argument("--skip-slow", action="store_true", help="leave out candidates marked slow")
    ap.add_argument("--json", default=None, help="write the rows here at the end")
    ap.add_argument("--jsonl", default=None, help="append each row here as soon as it is done")
    a = ap.parse_args(argv)

    device = a.device or ("cuda" if _has_cuda() else "cpu")
    if device == "cuda" and not _has_cuda():
        print("no CUDA GPU here; use --device cpu", file=sys.stderr)
        return 2
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    cands = catalog.all_candidates()
    if device == "cpu":
        cands = [c for c in cands if c.device != "gpu"]
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    if a.only:
        keys = [k for k in a.only.split(",") if k]
        cands = [c for c in cands if any(k in c.name for k in keys)]
    if a.exclude:
        keys = [k for k in a.exclude.split(",") if k]
        cands = [c for c in cands if not any(k in c.name for k in keys)]
    if a.skip_slow:
        cands = [c for c in cands if not c.slow]
    if device == "cuda":  # the GPU-only candidates first: they are what a GPU run is for
        cands = [c for c in cands if c.device == "gpu"] + [c for c in cands if c.device != "gpu"]
    strict_ok = catalog.has_strict()
    ngpu = _gpu_count() if device == "cuda" else 0
    jobs = a.jobs if a.jobs is not None else (max(3, ngpu) if device == "cuda" else 1)

    os.environ.update(catalog.CANARIES)  # once, for every evaluation (threads share os.environ)
    if device == "cuda" and not a.no_prewarm:
        prewarm(cands, device, a.prewarm_jobs)

    alone = [c for c in cands if c.fresh_build or c.pidfile or c.lingering or c.runs > 1 or c.artifacts]
    # a candidate expected correct is timed, and on a GPU strict mode compares the reference's timing
    # with its own taken alone (`reference_speed`): beside other evaluations on the same GPU two honest
    # rows were rejected at 2.6-2.9x (H100, --jobs 6, 2026-12-07), correct alone; the pool never shares
    # a GPU's run slot, so these run alone too
    alone += [c for c in cands if device == "cuda" and c.expected == "correct" and c not in alone]
    shared = [c for c in cands if c not in alone]
    widths = {"c": max([len(c.name) for c in cands] + [9])}
    print(
        f"# red-team table: {len(cands)} candidates, device {device}, modes {', '.join(modes)}, "
        f"strict {'available' if strict_ok else 'NOT AVAILABLE (parity only)'}, jobs {jobs}",
        flush=True,
    )
    print(
        f"{'candidate':<{widths['c']}}  {'class':<18}  {'expected':<34}  {'parity':<22}  {'strict':<22}  "
        f"{'':<4}  strict reason / notes",
        flush=True,
    )
    t0 = time.perf_counter()
    rows: list[dict] = []
    counter = [0]

    def task(c):
        dev = "cpu" if c.device == "cpu-only" else device
        if dev == "cuda" and ngpu > 1:
            with _print_lock:
                counter[0] += 1
                dev = f"cuda:{counter[0] % ngpu}"
        row = run_one(c, dev, modes, strict_ok, manage_env=False)
        print_row(row, widths)
        if a.jsonl:
            with _print_lock, open(a.jsonl, "a") as f:
                f.write(json.dumps(row_json(row), default=str) + "\n")
        return row

    with ThreadPoolExecutor(max(1, jobs)) as ex:
        rows += list(ex.map(task, shared))
    for c in alone:
        rows.append(task(c))
    order = {c.name: i for i, c in enumerate(cands)}
    rows.sort(key=lambda r: order[r["candidate"]])

    print(f"\n# {len(rows)} candidates in {time.perf_counter() - t0:.0f} s")
    parity_correct = [
        r
        for r in rows
        if r.get("parity") is not None and r["parity"].status == "correct" and r["expected"] != "correct"
    ]
    print(f"# attacks that parity calls correct ({len(parity_correct)}):")
    for r in parity_correct:
        print(
            f"#   {r['candidate']:<{widths['c']}}  {r['class']:<18}  speedup {fmt_speed(r['parity'].speedup)}"
        )
    if strict_ok and "strict" in modes:
        holes = [r for r in rows if r.get("strict") is not None and not r["strict"].ok]
        errs = [r for r in rows if r.get("strict") is None and r.get("strict_error")]
        print(f"# strict holes ({len(holes)}):")
        for r in holes:
            print(f"#   {r['candidate']:<{widths['c']}}  {'; '.join(r['strict'].problems)}")
        for r in errs:
            print(f"#   {r['candidate']:<{widths['c']}}  ERROR {r['strict_error']}")

    if a.json:
        Path(a.json).write_text(json.dumps([row_json(r) for r in rows], indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
