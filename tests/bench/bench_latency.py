"""Seconds per evaluation, case by case (issue 13's table), beside the stock `load_inline` build of the
same kernels in the same run.

    KB_DATASET=... python tests/bench/bench_latency.py [--device cuda|cpu] [--kernels relu,sigmoid,...]
        [--cases first_build_cuda,...] [--budget-s 480] [--small] [--no-warmup] [--json OUT.json]

Kernels: small elementwise KernelBench level-1 problems (ReLU 1/19, Sigmoid 1/21, Tanh 1/22, Softsign
1/30, HardTanh 1/32, MinGPT's GELU 1/88 by default; Swish 1/25 and HardSigmoid 1/28 on request), each
with a CUDA candidate written here in KernelBench's style (one `load_inline` module: a .cu with a
one-line kernel and its wrapper, a C++ declaration, `ModelNew` calling it; `cuda_candidate`) and the
Triton candidate of tests/bench/repro_kernels/. Cases, each evaluated through the public
`kb_agent.evaluator.evaluate` with default settings (strict mode on) but the backend:

    first_build_cuda    a new CUDA candidate, nothing of it in the build cache: build + full evaluation
    refine_same_decls   then a second candidate with the same C++ declarations and a changed .cu (another
                        block size, the load through __ldg): what a refinement turn costs
    identical_again     then the first source again, its build cached: a fresh evaluation of it
    identical_in_solve  then the first source once more, through the evaluation pool of a `solve`
                        (`EvalPool(reuse_results=True)`, which evaluated the first build): a turn whose
                        code repeats an earlier turn's gets that verdict again, nothing evaluated
    triton              a new Triton candidate, its Triton cache empty
    stock_load_inline   the same CUDA kernel built by torch's plain `load_inline` in a fresh process
                        (`python -c`: no evaluator; torch's default flags, TORCH_CUDA_ARCH_LIST unset,
                        use_pch=False; an empty TORCH_EXTENSIONS_DIR): interpreter, import torch, build
    cpu_triton_in_solve (--device cpu) the Triton candidates, each on its level-1 problem shrunk to
                        16 x 1024 elements for the interpreter, evaluated by a `solve` (one turn each, a
                        scripted model, the run's EvalPool, TRITON_INTERPRET) against the seconds of
                        `python -c "import torch, triton"` measured in the same run: the ratio is the goal

The whole run uses one fresh, empty KB_BUILD_DIR. Every cold case is a source (and, for CUDA, a set of
declarations) evaluated nowhere before in it, so its builds, binding object and Triton cache start
empty: as cold as a fresh KB_BUILD_DIR per case, without changing the evaluation's environment between
cases (the fork server keys its warm worker by that environment, so a KB_BUILD_DIR per case would start
a new worker per case, which no `solve` does). Before the first case, one untimed evaluation of a
torch-only candidate starts whatever the evaluator keeps warm (--no-warmup: none; the CPU row has
none either: a solve's first evaluation starts it, and that evaluation is reported as `first_s`).

Order: kernel by kernel, stock_load_inline, first_build_cuda, refine_same_decls, identical_again,
identical_in_solve, triton. first_build_cuda goes through that pool (its one-phase executor calls
`evaluate` as every other case does), the other cases call `evaluate` directly.
No item starts when the seconds left in --budget-s (from the start of this script) are fewer than its
estimate (the median of its case so far, else the issue's figure of today, PRIOR_S); it is skipped and
named in its case's `skipped`; so are the cases that need a skipped or failed first build. Split a
longer run over calls with --kernels or --cases. --small shrinks the GPU problems too (the stages then
show the evaluator's own overhead without the 1.6e9-element inputs of the real problems).

Prints one JSON line per case:

    {"case": …, "median_s": …, "n": …, "stages": {stage: median seconds}, "goal_s": …, "goal_met": …,
     "failed": [...], "skipped": [...], "child_start": {method: count}, "build_paths": {path: count},
     "cuda_includes": {include: count}, "publish_wait_s": …, "nvcc_s": …, "main_cpp_pch": …,
     "cu_split": {"split" | "whole": count}, "cu_whole_reasons": [...]}

Every line also says `"strict"`: whether strict mode's checks ran (the default; `--no-strict` times
KernelBench's checks alone, so that what strict mode adds to each case can be read apart).
`median_s` is the median over kernels of the wall seconds of one evaluation (of the whole `python -c`
process for stock_load_inline); `stages` the medians of `EvalResult.stages` (setup: the child's start
and imports; build: importing the candidate, extension builds included; correctness; timing; total),
`compile` (`EvalResult.compile.seconds`), `child_start` (`EvalResult.child_start["seconds"]`, where the
evaluator records how its child started) and, for the stock build, import_torch and build;
`child_start` and `build_paths` count `EvalResult.child_start["method"]` and each
`EvalResult.compile.builds[i]["path"]` where those fields exist, `cuda_includes` each build's
`cuda_include` (which torch header its .cu compiled against: "slim", "prelude", "types_h", "given"), `reused`
the results that repeat an earlier evaluation (`EvalResult.reused`). Only correct evaluations count;
others are listed under `failed` with their status. cpu_triton_in_solve adds `import_s` (the median
of `python -c "import torch, triton"`), `ratio` (median_s / import_s, goal 1.2) and `first_s` (the
solve's first evaluation, which starts what the evaluator keeps warm). Where they apply:
`publish_wait_s` (refine_same_decls: the seconds waited, before the refinement, for the harness to
finish publishing the first build's binding object, `bindcache.wait_for_publishers`; in a solve that
runs while the model writes its reply, and here the reply is instant), `nvcc_s` (the median seconds of
a build's .cu compiles, `compile.builds[i]["nvcc"]`), `main_cpp_pch` (builds that compiled main.cpp
against the cached precompiled header) and `cu_split` (builds whose .cu compiled as a device and a host
unit, "split", or whole, `evaluator.splitcu`, which KB_SPLIT_CU=1 turns on; `cu_whole_reasons` says
why not). The warm-up also waits for the precompiled headers its evaluation started (`bindcache.warm_pch`, `pch_warm_s` in its line): they are kept warm, like the fork
server. Progress goes to stderr; --json also writes every evaluation's record.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kb_agent.evaluator import EvalResult, EvalSettings, Status, bindcache, evaluate  # noqa: E402
from kb_agent.evaluator.pool import EvalJob, EvalPool  # noqa: E402
from kb_agent.problems import Problem, resolve_one  # noqa: E402

TRITON_KERNELS = Path(__file__).resolve().parent / "repro_kernels"


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One elementwise level-1 problem: its key, the CUDA expression of `v` (one float) and the Triton
    candidate's file in repro_kernels/."""

    problem: str
    cuda_expr: str
    triton_file: str


KERNELS = {
    "relu": Kernel("1/19", "fmaxf(v, 0.0f)", "l1_p19_relu.py"),
    "sigmoid": Kernel("1/21", "1.0f / (1.0f + expf(-v))", "l1_p21_sigmoid.py"),
    "tanh": Kernel("1/22", "tanhf(v)", "l1_p22_tanh.py"),
    "softsign": Kernel("1/30", "v / (1.0f + fabsf(v))", "l1_p30_softsign.py"),
    "hardtanh": Kernel("1/32", "fminf(fmaxf(v, -1.0f), 1.0f)", "l1_p32_hardtanh.py"),
    "gelu_tanh": Kernel(
        "1/88",
        "0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)))",
        "l1_p88_gelu_tanh.py",
    ),  # fmt: skip
    "swish": Kernel("1/25", "v / (1.0f + expf(-v))", "l1_p25_swish.py"),
    "hardsigmoid": Kernel("1/28", "fminf(fmaxf(v / 6.0f + 0.5f, 0.0f), 1.0f)", "l1_p28_hardsigmoid.py"),
}
DEFAULT_KERNELS = ("relu", "sigmoid", "tanh", "softsign", "hardtanh", "gelu_tanh")
GPU_CASES = ("stock_load_inline", "first_build_cuda", "refine_same_decls", "identical_again", "identical_in_solve",
             "triton")  # fmt: skip
CPU_CASES = ("cpu_triton_in_solve",)
# issue 13's goals on the H200 (seconds; for the CPU row, a ratio to `import torch, triton`)
GOALS = {"first_build_cuda": 12.0, "refine_same_decls": 8.0, "triton": 3.0, "identical_again": 1.5,
         "identical_in_solve": 1.5}  # fmt: skip
CPU_GOAL_RATIO = 1.2
# the figures of today (s), the estimate of an item before its case has one of its own
PRIOR_S = {"stock_load_inline": 60.0, "first_build_cuda": 45.0, "refine_same_decls": 45.0,
           "identical_again": 15.0, "identical_in_solve": 1.0, "triton": 15.0}  # fmt: skip
STRICT = True  # strict mode's checks beside KernelBench's (--no-strict: KernelBench's alone)
SMALL = {"batch_size": 16, "dim": 1024}  # elements of a shrunk problem (the toy problems' size)

CUDA_TEMPLATE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

{name}_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

__global__ void {name}_kernel(const float* __restrict__ x, float* __restrict__ out, long long size) {{
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {{
        float v = x[idx];
        out[idx] = {expr};
    }}
}}

torch::Tensor {name}_cuda(torch::Tensor x) {{
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "{name}: a float32 CUDA tensor expected");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    long long size = xc.numel();
    const int block_size = 256;
    long long num_blocks = (size + block_size - 1) / block_size;
    if (num_blocks > 0) {{
        {name}_kernel<<<(unsigned int)num_blocks, block_size, 0, at::cuda::getCurrentCUDAStream()>>>(
            xc.data_ptr<float>(), out.data_ptr<float>(), size);
    }}
    return out;
}}
"""

{name}_cpp_source = "torch::Tensor {name}_cuda(torch::Tensor x);"

{name} = load_inline(
    name="{name}",
    cpp_sources={name}_cpp_source,
    cuda_sources={name}_source,
    functions=["{name}_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.{name} = {name}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.{name}.{name}_cuda(x)
'''
# a refinement that keeps the C++ declarations: the .cu's block size and its load change
REFINE = (("const int block_size = 256;", "const int block_size = 512;"),
          ("float v = x[idx];", "float v = __ldg(x + idx);"))  # fmt: skip

WARMUP = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""

# torch's plain load_inline in a fresh process: argv[1] the candidate file; prints the seconds of
# `import torch` and of the builds on its last line (use_pch=False where this torch has the argument)
STOCK = r"""
import inspect, json, sys, time
t0 = time.perf_counter()
import torch
import torch.utils.cpp_extension as ce
t1 = time.perf_counter()
original, builds = ce.load_inline, []
pch = "use_pch" in inspect.signature(original).parameters
def load_inline(*args, **kwargs):
    if pch:
        kwargs["use_pch"] = False
    t = time.perf_counter()
    try:
        return original(*args, **kwargs)
    finally:
        builds.append(time.perf_counter() - t)
ce.load_inline = load_inline
source = open(sys.argv[1]).read()
exec(compile(source, "candidate.py", "exec"), {"__name__": "candidate"})
print(json.dumps({"import_torch": t1 - t0, "build": sum(builds), "builds": len(builds)}))
"""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cuda_candidate(name: str, kernel: Kernel) -> str:
    """The KernelBench-style CUDA candidate for `kernel`, its extension and function named after `name`."""
    return CUDA_TEMPLATE.format(name=name, expr=kernel.cuda_expr)


def refined(source: str) -> str:
    """`source` with its .cu changed and its C++ declarations kept (REFINE). Raises ValueError when a
    change does not apply."""
    for old, new in REFINE:
        if old not in source:
            raise ValueError(f"refinement {old!r} not in the candidate")
        source = source.replace(old, new)
    return source


def shrunk(problem: Problem) -> Problem:
    """`problem` with its size constants (`batch_size`, `dim`) set to SMALL: the same reference at a size
    the Triton interpreter runs in a second. Raises ValueError for a problem without them."""
    code = problem.code
    for name, value in SMALL.items():
        code, n = re.subn(rf"^{name} = \d+$", f"{name} = {value}", code, flags=re.M)
        if n != 1:
            raise ValueError(f"{problem.key}: no single `{name} = N` line to shrink")
    return dataclasses.replace(problem, code=code)


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def record(case: str, name: str, kernel: Kernel, r: EvalResult, wall_s: float) -> dict:
    """One evaluation's figures: wall and stage seconds, and how its child started and its builds ran
    (the fields where this evaluator has them)."""
    stages = {k: round(v, 3) for k, v in r.stages.items()}
    if r.compile.seconds is not None:
        stages["compile"] = round(r.compile.seconds, 3)
    start = getattr(r, "child_start", None) or {}
    if start.get("seconds") is not None:
        stages["child_start"] = round(float(start["seconds"]), 3)
    builds = list(getattr(r.compile, "builds", None) or [])
    return {"case": case, "kernel": name, "problem": kernel.problem, "status": str(r.status),
            "message": "" if r.status == Status.CORRECT else r.message[:400], "wall_s": round(wall_s, 3),
            "stages": stages, "child_start": start, "builds": builds, "reused": r.reused is not None}  # fmt: skip


def timed_evaluate(case: str, name: str, kernel: Kernel, problem: Problem, source: str, backend: str,
                   device: str, pool: EvalPool | None = None) -> dict:  # fmt: skip
    settings = EvalSettings(backend=backend, device=device, strict=STRICT)
    t0 = time.perf_counter()
    r = pool.run(EvalJob(problem, source, settings)) if pool else evaluate(problem, source, settings)
    rec = record(case, name, kernel, r, time.perf_counter() - t0)
    log(f"{case} {name} ({kernel.problem}): {rec['status']} {rec['wall_s']:.2f} s {rec['stages']}"
        + (f" - {rec['message'][:200]}" if rec["message"] else ""))  # fmt: skip
    return rec


def stock_build(case: str, name: str, kernel: Kernel, source: str) -> dict:
    """The candidate's module run by a fresh `python -c STOCK` with torch's own load_inline."""
    with tempfile.TemporaryDirectory(prefix="kb-stock-") as d:
        path = Path(d) / "candidate.py"
        path.write_text(source)
        env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(Path(d) / "ext")}
        env.pop("TORCH_CUDA_ARCH_LIST", None)  # torch's default: the visible GPUs' architectures
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", STOCK, str(path)], capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
    rec = {"case": case, "kernel": name, "problem": kernel.problem, "wall_s": round(wall, 3),
           "status": "correct" if p.returncode == 0 else "compile_error", "message": "",
           "stages": {"total": round(wall, 3)}, "child_start": {}, "builds": []}  # fmt: skip
    try:
        got = json.loads(p.stdout.strip().splitlines()[-1])
        rec["stages"].update(import_torch=round(got["import_torch"], 3), build=round(got["build"], 3))
    except (IndexError, ValueError, KeyError):
        rec["status"], rec["message"] = "compile_error", (p.stderr or p.stdout)[-400:]
    log(f"{case} {name}: {rec['status']} {rec['wall_s']:.2f} s {rec['stages']}"
        + (f" - {rec['message'][:200]}" if rec["message"] else ""))  # fmt: skip
    return rec


def summarise(case: str, recs: list[dict], skipped: list[str]) -> dict:
    ok = [r for r in recs if r["status"] == "correct"]
    keys = sorted({k for r in ok for k in r["stages"]})
    line = {"case": case, "median_s": median([r["wall_s"] for r in ok]), "n": len(ok),
            "stages": {k: median([r["stages"][k] for r in ok if k in r["stages"]]) for k in keys},
            "failed": [f"{r['kernel']}: {r['status']}" for r in recs if r["status"] != "correct"],
            "skipped": skipped}  # fmt: skip
    if case in GOALS:
        line["goal_s"] = GOALS[case]
        line["goal_met"] = line["median_s"] is not None and line["median_s"] <= GOALS[case]
    starts = Counter(r["child_start"].get("method") for r in ok if r["child_start"].get("method"))
    paths = Counter(b.get("path") for r in ok for b in r["builds"] if b.get("path"))
    if starts:
        line["child_start"] = dict(starts)
    if any(r.get("reused") for r in ok):
        line["reused"] = sum(1 for r in ok if r.get("reused"))
    includes = Counter(b.get("cuda_include") for r in ok for b in r["builds"] if b.get("cuda_include"))
    if paths:
        line["build_paths"] = dict(paths)
    if includes:
        line["cuda_includes"] = dict(includes)
    waits = [r["publish_wait_s"] for r in ok if "publish_wait_s" in r]
    if waits:
        line["publish_wait_s"] = median(waits)
    compiled = [b for r in ok for b in r["builds"] if not b.get("cached")]  # each build once, where it ran
    nvcc = [sum(n.get("seconds", 0.0) for n in b["nvcc"]) for b in compiled if b.get("nvcc")]
    if nvcc:
        line["nvcc_s"] = median(nvcc)
    if any("pch" in b for b in compiled):
        line["main_cpp_pch"] = sum(1 for b in compiled if b.get("pch"))
    splits = Counter("split" if b["split"].get("used") else "whole" for b in compiled if b.get("split"))
    if splits:
        line["cu_split"] = dict(splits)
        line["cu_whole_reasons"] = sorted(
            {b["split"]["reason"][:120] for b in compiled if b.get("split") and not b["split"].get("used")}
        )
    return line


class Budget:
    """Seconds left of --budget-s, and each case's estimate: the median so far, else PRIOR_S."""

    def __init__(self, seconds: float):
        self.end = time.perf_counter() + seconds

    def fits(self, case: str, recs: list[dict]) -> bool:
        done = [r["wall_s"] for r in recs]
        estimate = statistics.median(done) if done else PRIOR_S.get(case, 30.0)
        return time.perf_counter() + estimate <= self.end


def gpu_cases(names: list[str], cases: list[str], budget: Budget, small: bool, device: str) -> dict:
    """Kernel by kernel, the GPU cases asked for, in GPU_CASES' order; returns case -> (records,
    skipped kernels). refine_same_decls and identical_again need a correct first_build_cuda."""
    out: dict[str, tuple[list[dict], list[str]]] = {c: ([], []) for c in GPU_CASES if c in cases}

    def direct(job: EvalJob) -> EvalResult:  # `evaluate` as the direct cases call it (their device too)
        return evaluate(job.problem, job.source, dataclasses.replace(job.settings, device=device))

    settings = EvalSettings(device=device, strict=STRICT)
    pool = EvalPool(settings, reuse_results=True, run_job=direct)  # a solve's reuse
    for name in names:
        kernel = KERNELS[name]
        problem = shrunk(resolve_one(kernel.problem)) if small else resolve_one(kernel.problem)
        cuda = cuda_candidate(f"lat_{name}", kernel)
        sources = {"stock_load_inline": cuda, "first_build_cuda": cuda, "refine_same_decls": refined(cuda),
                   "identical_again": cuda, "identical_in_solve": cuda,
                   "triton": (TRITON_KERNELS / kernel.triton_file).read_text()}  # fmt: skip
        first = None
        for case, (recs, skipped) in out.items():
            if (
                case in ("refine_same_decls", "identical_again", "identical_in_solve")
                and (first or {}).get("status") != "correct"
            ):
                skipped.append(f"{name} (no correct first build)")
            elif not budget.fits(case, recs):
                skipped.append(f"{name} (budget)")
                log(f"{case} {name}: skipped, not enough of the budget left")
            elif case == "stock_load_inline":
                recs.append(stock_build(case, name, kernel, cuda))
            else:
                backend = "triton" if case == "triton" else "cuda"
                through = pool if case in ("first_build_cuda", "identical_in_solve") else None
                # a refinement follows the model's reply, during which the harness publishes the first
                # build's binding object; here the reply is instant, so that wait is taken apart
                waited = bindcache.wait_for_publishers(120.0) if case == "refine_same_decls" else None
                recs.append(
                    timed_evaluate(case, name, kernel, problem, sources[case], backend, device, through)
                )
                if waited is not None:
                    recs[-1]["publish_wait_s"] = round(waited, 3)
                first = recs[-1] if case == "first_build_cuda" else first
    return out


def import_seconds() -> float:
    """Wall seconds of one `python -c "import torch, triton"` (TRITON_INTERPRET=1, as the CPU child has)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, triton"], check=True,
                   env={**os.environ, "TRITON_INTERPRET": "1"})  # fmt: skip
    return time.perf_counter() - t0


def cpu_triton_in_solve(names: list[str], db: Path, imports: int = 5) -> tuple[list[dict], dict]:
    """The Triton candidates evaluated by a `solve` on the CPU (one trajectory of one turn per kernel,
    a scripted model, no re-timing), and `python -c "import torch, triton"` timed before and after it.
    Returns (one record per evaluation, {"import_s": [...], "solve_s": wall seconds of the solve})."""
    from kb_agent.agent.llm import ScriptedModel
    from kb_agent.agent.loop import SolveConfig, solve
    from kb_agent.agent.store import Store
    from kb_agent.evaluator.pool import EvalPool

    problems = [shrunk(resolve_one(KERNELS[n].problem)) for n in names]
    replies = [f"```python\n{(TRITON_KERNELS / KERNELS[n].triton_file).read_text()}\n```" for n in names]
    config = SolveConfig(turns=1, backend="triton", device="cpu", retime_best=False, gpu_name="none",
                         arch="none", run_name="bench-latency")  # fmt: skip
    before = [import_seconds() for _ in range((imports + 1) // 2)]
    with Store(db) as store:
        t0 = time.perf_counter()
        run_id = solve(problems, config, ScriptedModel(replies), EvalPool(config.eval_settings()), store)
        solve_s = time.perf_counter() - t0
        turns = [store.turns(t["id"]) for t in store.trajectories(run_id)]
    after = [import_seconds() for _ in range(imports // 2)]
    recs = []
    for name, (turn,) in zip(names, turns, strict=True):
        r = EvalResult.from_dict(turn["eval_json"]) if turn["eval_json"] else EvalResult(Status.RUNTIME_ERROR)
        recs.append(record("cpu_triton_in_solve", name, KERNELS[name], r, r.stages.get("total", 0.0)))
        log(
            f"cpu_triton_in_solve {name}: {recs[-1]['status']} {recs[-1]['wall_s']:.2f} s {recs[-1]['stages']}"
        )
    return recs, {"import_s": [round(s, 3) for s in before + after], "solve_s": round(solve_s, 3)}


def warm_up(device: str) -> dict:
    """One untimed evaluation of a torch-only candidate on toy/relu: what the evaluator keeps warm starts."""
    t0 = time.perf_counter()
    r = evaluate(resolve_one("toy/relu"), WARMUP, EvalSettings(device=device))
    out = {"status": str(r.status), "wall_s": round(time.perf_counter() - t0, 3),
           "child_start": getattr(r, "child_start", None) or {}}  # fmt: skip
    # the precompiled headers the evaluation started (bindcache.warm_pch): part of what is kept warm
    out["pch_warm_s"] = round(bindcache.wait_for_publishers(300.0), 3)
    log(f"warm-up: {out}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--kernels", default=",".join(DEFAULT_KERNELS),
                    help=f"comma-separated, of: {', '.join(KERNELS)}")  # fmt: skip
    ap.add_argument("--cases", help=f"comma-separated (default: {', '.join(GPU_CASES)} on cuda, "
                    f"{CPU_CASES[0]} on cpu)")  # fmt: skip
    ap.add_argument("--budget-s", type=float, default=480.0, help="no item starts that would end after this")
    ap.add_argument("--small", action="store_true", help="shrink the GPU problems too (16 x 1024 elements)")
    ap.add_argument("--no-warmup", action="store_true", help="no untimed evaluation before the first case")
    ap.add_argument("--json", help="also write every evaluation's record here")
    ap.add_argument("--no-strict", action="store_true",
                    help="KernelBench's checks only (EvalSettings(strict=False)): what strict mode costs, apart")  # fmt: skip
    args = ap.parse_args()
    global STRICT
    STRICT = not args.no_strict
    budget, t_start = Budget(args.budget_s), time.perf_counter()
    names = [n.strip() for n in args.kernels.split(",") if n.strip()]
    unknown = [n for n in names if n not in KERNELS]
    cases = [c.strip() for c in args.cases.split(",")] if args.cases else list(
        GPU_CASES if args.device == "cuda" else CPU_CASES
    )  # fmt: skip
    bad = [c for c in cases if c not in GPU_CASES + CPU_CASES]
    if unknown or bad:
        raise SystemExit(f"unknown kernels {unknown} or cases {bad}; kernels: {', '.join(KERNELS)}; "
                         f"cases: {', '.join(GPU_CASES + CPU_CASES)}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="kb-bench-latency-") as tmp:
        os.environ["KB_BUILD_DIR"] = str(Path(tmp) / "build")  # one for the run: see the module doc
        log(f"KB_BUILD_DIR={os.environ['KB_BUILD_DIR']} (empty)")
        lines, records, extra, warm = [], [], {}, None
        gpu = [c for c in cases if c in GPU_CASES]
        if gpu and not args.no_warmup and gpu != ["stock_load_inline"]:
            warm = warm_up(args.device)
        if gpu:
            for case, (recs, skipped) in gpu_cases(names, gpu, budget, args.small, args.device).items():
                lines.append(summarise(case, recs, skipped))
                records += recs
        if "cpu_triton_in_solve" in cases:
            recs, extra = cpu_triton_in_solve(names, Path(tmp) / "kb.sqlite")
            records += recs
            line = summarise("cpu_triton_in_solve", recs, [])
            line["import_s"] = median(extra["import_s"])
            line["ratio"] = round(line["median_s"] / line["import_s"], 3) if line["median_s"] else None
            line["goal_ratio"] = CPU_GOAL_RATIO
            line["goal_met"] = line["ratio"] is not None and line["ratio"] <= CPU_GOAL_RATIO
            line["first_s"] = recs[0]["wall_s"] if recs else None
            lines.append(line)
    for line in lines:
        print(json.dumps({**line, "strict": STRICT}), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "args": vars(args), "warmup": warm, "cases": lines, "records": records, **extra,
            "wall_s": round(time.perf_counter() - t_start, 1)}, indent=1))  # fmt: skip
    log(f"bench_latency: {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
