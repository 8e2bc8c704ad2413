"""Turning a problem into the first messages, and an `EvalResult` into the feedback message of a turn."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from pathlib import Path

from kb_agent.agent.report.text import fmt_speedup
from kb_agent.evaluator.result import (
    CorrectnessInfo,
    EvalResult,
    NcuInfo,
    NcuKernel,
    ProfileInfo,
    Status,
    TrialResult,
)
from kb_agent.evaluator.settings import TOLERANCES
from kb_agent.problems import Problem
from kb_agent.prompts import example_parts, render

MAX_COMPILE_ERRORS = 10  # compiler errors shown, from the first
MAX_ERROR_CHARS = 400  # per error line
MAX_LOG_CHARS = 3000  # compile log excerpt when there are no parsed errors
MAX_OUTPUT_CHARS = 2000  # tail of the candidate's stderr/stdout shown with a runtime error
MAX_FAILED_TRIALS = 3  # correctness trials described in detail
MAX_KERNELS = 8  # profile rows shown
MAX_NCU_KERNELS = 4  # kernels shown with their Nsight Compute figures
# speed of light bands, % of peak (Nsight Compute's own guidance, its SpeedOfLight section's rule: a kernel
# under 60% of peak in both memory and compute has latency issues; 80% and over is close to the roof)
SOL_LATENCY_PCT = 60.0
SOL_ROOF_PCT = 80.0

_DTYPES = {"fp32": "torch.float32", "fp16": "torch.float16", "bf16": "torch.bfloat16"}
_BACKEND_NAMES = {"cuda": "CUDA", "triton": "Triton"}


def initial_messages(
    problem: Problem, backend: str, gpu_name: str, arch: str, precision: str = "fp32"
) -> list[dict]:
    """The system prompt and the task prompt for `problem`.

    `backend` is "cuda" or "triton"; `gpu_name` ("NVIDIA H100 80GB HBM3") and `arch` ("9.0") come
    from the evaluator's hardware record; `precision` is "fp32", "fp16" or "bf16" (KernelBench's
    tolerances are quoted). Raises ValueError for an unknown backend or precision.
    """
    if backend not in _BACKEND_NAMES:
        raise ValueError(f"no task prompt for backend {backend!r}; choose cuda or triton")
    if precision not in TOLERANCES:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(TOLERANCES)}")
    example_reference, example_answer = example_parts(backend)
    tol = TOLERANCES[precision]
    task = render(
        f"task_{backend}",
        reference=problem.code.strip(),
        gpu_name=gpu_name,
        arch=arch,
        precision=precision,
        dtype=_DTYPES[precision],
        atol=f"{tol:g}",
        rtol=f"{tol:g}",
        example_reference=example_reference.strip(),
        example_answer=example_answer.strip(),
    )
    return [{"role": "system", "content": render("system")}, {"role": "user", "content": task}]


# -- recipes ----------------------------------------------------------------------------------------------
COMPONENTS = (
    "compile_log",  # the first compiler errors, else the part of the log from the first error
    "diff_stats",  # trials passed, and per failing trial the statistics and first mismatched elements
    "diagnosis",  # per failing trial, one line naming the mismatch's pattern (TrialResult.diagnosis)
    "map",  # a character map of where the first failing trial's output differs (TrialResult.mismatch_map)
    "timing",  # yours vs the reference, mean ms per call, and the speedup
    "profile",  # the torch.profiler table of the GPU kernels in one forward
    "ncu",  # Nsight Compute per custom kernel; one line saying so when it was not run
    "speed_of_light",  # % of peak memory bandwidth and compute (from Nsight Compute, when it ran)
    "hints",  # the advice paragraph of each status (prompts/templates/hint_<status>.txt)
)
NCU_COMPONENTS = frozenset({"ncu", "speed_of_light"})  # the components Nsight Compute's pass feeds
RECIPES = {
    "minimal": ("compile_log", "diff_stats", "timing"),
    "standard": ("compile_log", "diff_stats", "diagnosis", "timing", "profile", "hints"),
    "full": COMPONENTS,
}


def parse_recipe(spec: str | Iterable[str]) -> frozenset[str]:
    """The components a feedback recipe names: "minimal", "standard" or "full" (RECIPES), or a comma list of
    components and recipes ("standard,map", "diff_stats,diagnosis"), whose union is taken.

    Raises ValueError naming the unknown part and the choices."""
    parts = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec)]
    chosen: set[str] = set()
    for part in parts:
        if part in RECIPES:
            chosen.update(RECIPES[part])
        elif part in COMPONENTS:
            chosen.add(part)
        else:
            raise ValueError(
                f"unknown feedback component {part!r}; give {', '.join(RECIPES)} or a comma list of: "
                + ", ".join(COMPONENTS)
            )
    return frozenset(chosen)


def needs_ncu(recipe: str | Iterable[str]) -> bool:
    """Whether a recipe shows Nsight Compute's figures (`ncu` or `speed_of_light`), so that the evaluator
    must run its pass (`EvalSettings.ncu`). Raises ValueError for an unknown recipe (`parse_recipe`)."""
    return bool(parse_recipe(recipe) & NCU_COMPONENTS)


def feedback_for(
    result: EvalResult | None,
    *,
    no_code: bool = False,
    truncated: bool = False,
    recipe: str | Iterable[str] = "standard",
    repeated: bool | None = None,
) -> str:
    """The feedback message for one turn.

    `no_code=True` (with `result` None): the reply held no code block defining `ModelNew`;
    `truncated=True` adds that the reply was cut off at the token limit. Otherwise the message
    follows `result.status`, with the components `recipe` names (`parse_recipe`; the verdict's message
    and the closing instruction are always there). `repeated`: whether this conversation sent the code
    before (`REPEATED_CODE` opens the message); None: whenever the result was reused. A result reused from
    another trajectory's evaluation (`EvalPool` reuses across the run) repeats nothing this model saw.
    Raises ValueError when there is neither a result nor
    `no_code`, or for an unknown recipe.
    """
    parts = parse_recipe(recipe)
    if no_code or result is None:
        if not no_code:
            raise ValueError("feedback_for needs an EvalResult, or no_code=True")
        note = (
            " Your reply was cut off at the token limit before the code was complete: keep the reasoning"
            " short and put the code block first."
            if truncated
            else ""
        )
        return render("feedback_no_code", truncated=note)
    status = Status(result.status)
    kind = status.value
    if status == Status.COMPILE_ERROR:
        sections = [compile_summary(result, log="compile_log" in parts)]
    elif status == Status.RUNTIME_ERROR and cuda_unchecked(result):
        kind, sections = "unchecked", [_message(result)]
    elif status == Status.RUNTIME_ERROR:
        sections = [_message(result), _output_block(result)]
    elif status in (Status.TIMEOUT, Status.REJECTED):
        sections = [_message(result)]
    elif status == Status.INCORRECT:
        sections = [correctness_summary(result, parts)]
    else:
        sections = [
            timing_line(result) if "timing" in parts else "",
            "GPU kernels in one forward of your module:\n" + profile_table(result.profile)
            if "profile" in parts
            else "",
            ncu_summary(result.ncu, device=result.device) if "ncu" in parts else "",
            speed_of_light(result.ncu, alone="ncu" not in parts, device=result.device)
            if "speed_of_light" in parts
            else "",
        ]
    if "hints" in parts and kind != "unchecked":
        backend = _BACKEND_NAMES.get(result.backend or "", "custom")
        sections.append(render(f"hint_{kind}", backend=backend).strip())
    if (result.reused is not None) if repeated is None else repeated:  # say so before the verdict
        sections.insert(0, REPEATED_CODE)
    body = "\n\n".join(s.strip("\n") for s in sections if s and s.strip())
    return re.sub(r"\n{3,}", "\n\n", render(f"feedback_{kind}", body=body or "(no details)"))


# -- pieces ---------------------------------------------------------------------------------------------
REPEATED_CODE = (
    "This code is identical to code you sent earlier, so it was not evaluated again: the result below is "
    "that evaluation's. Change the code to get a new result."
)


def compile_summary(result: EvalResult, log: bool = True) -> str:
    """The result's message (less the lines that repeat the compiler errors below it), then, with `log`,
    the first compiler errors (from `compile.errors`), else an excerpt of the compile log starting a
    little before its first error line."""
    info = result.compile
    parts: list[str] = []
    errors = [clean_paths(e.strip()) for e in info.errors]
    if result.message:
        repeated = {line.strip() for e in errors for line in e.splitlines() if line.strip()}
        kept = [
            line for line in clean_paths(result.message.strip()).splitlines() if line.strip() not in repeated
        ]
        parts.append("\n".join(kept).strip())
    if log and errors:
        shown = [_clip(e, MAX_ERROR_CHARS) for e in errors[:MAX_COMPILE_ERRORS]]
        more = len(errors) - len(shown)
        lines = "\n".join(shown) + (f"\n... and {more} more errors" if more > 0 else "")
        parts.append(f"First errors:\n```\n{lines}\n```")
    elif log and info.log.strip():
        parts.append(f"Compiler output:\n```\n{trim_log(clean_paths(info.log), MAX_LOG_CHARS)}\n```")
    return "\n\n".join(p for p in parts if p) or "The build failed without a message."


def trim_log(log: str, max_chars: int = MAX_LOG_CHARS) -> str:
    """The part of a compiler log that matters: from two lines before the first line mentioning an
    error, at most `max_chars` characters; the log's end when no line mentions one."""
    lines = log.strip().splitlines()
    first = next((i for i, line in enumerate(lines) if re.search(r"error", line, re.IGNORECASE)), None)
    if first is None:
        return _tail(log.strip(), max_chars)
    text = "\n".join(lines[max(0, first - 2) :])
    return text if len(text) <= max_chars else text[:max_chars].rstrip() + "\n[... trimmed]"


def correctness_summary(result: EvalResult, recipe: Iterable[str] = RECIPES["standard"]) -> str:
    """What went wrong in the correctness trials: how many passed (component diff_stats), and for each of
    the first failing trials, numbered as the verdict numbers them ("trial 2 of 5"), its diagnosis
    (component diagnosis), the shape/dtype problem or the value differences (diff_stats: max/mean abs
    diff, mismatch count and fraction, first mismatched indices, NaN/Inf counts), and for the first one
    the map of where it differs (map)."""
    parts = set(recipe)
    c: CorrectnessInfo = result.correctness
    lines: list[str] = []
    if result.message:
        lines.append(clean_paths(result.message.strip()))
    if c.trials and "diff_stats" in parts:
        tol = f" (atol={_num(c.atol)}, rtol={_num(c.rtol)})" if c.atol is not None else ""
        lines.append(f"Passed {c.passed} of {c.trials} correctness trials{tol}.")
    failed = [t for t in c.results if not t.passed]
    for n, t in enumerate(failed[:MAX_FAILED_TRIALS]):
        name = f"trial {t.trial + 1} of {c.trials}" if t.trial >= 0 and c.trials else "an extra trial"
        detail = []
        if "diagnosis" in parts and t.diagnosis:
            detail.append(f"  Diagnosis: {t.diagnosis}")
        if "diff_stats" in parts:
            detail.append(f"  {trial_line(t)}")
        if "map" in parts and t.mismatch_map and n == 0:
            caption, *rows = t.mismatch_map
            detail.append(f"  Where it differs ({caption}):\n```\n" + "\n".join(rows) + "\n```")
        if detail:
            lines.append(f"- {name}:\n" + "\n".join(detail))
    if len(failed) > MAX_FAILED_TRIALS and "diff_stats" in parts:
        lines.append(f"- ... {len(failed) - MAX_FAILED_TRIALS} more failing trials")
    return "\n".join(lines) or "The output differs from the reference."


def trial_line(t: TrialResult) -> str:
    """One failed correctness trial in words: what kind of mismatch, the statistics, the first
    mismatched elements."""
    if t.problem == "type":
        return f"output type {t.actual_dtype}, expected {t.expected_dtype}"
    which = f"output[{t.output_index}]" if t.output_index is not None else "output"
    if t.problem == "shape" or (t.expected_shape is not None and t.expected_shape != t.actual_shape):
        return f"{which} shape {t.actual_shape}, expected {t.expected_shape}"
    if t.problem == "dtype" or (t.expected_dtype and t.actual_dtype and t.expected_dtype != t.actual_dtype):
        return f"{which} dtype {t.actual_dtype}, expected {t.expected_dtype}"
    if t.problem == "device":
        return f"{which} is on another device than the reference's output (return it on the inputs' device)"
    bits = []
    nonfinite = t.nan_actual or t.nan_expected or t.inf_actual or t.inf_expected
    if t.max_abs_diff is not None:
        bits.append(f"max abs diff {_num(t.max_abs_diff)}" + (" (finite elements)" if nonfinite else ""))
    if t.mean_abs_diff is not None:
        bits.append(f"mean abs diff {_num(t.mean_abs_diff)}")
    if t.max_rel_diff is not None:
        bits.append(f"max rel diff {_num(t.max_rel_diff)}")
    if t.mismatched is not None:
        frac = t.mismatch_fraction
        if frac is None and t.numel:
            frac = t.mismatched / t.numel
        of = f" of {t.numel}" if t.numel else ""
        pct = f" ({frac:.2%})" if frac is not None else ""
        bits.append(f"{t.mismatched}{of} elements outside tolerance{pct}")
    special = []
    for what, actual, expected in (
        ("NaN", t.nan_actual, t.nan_expected),
        ("Inf", t.inf_actual, t.inf_expected),
    ):
        if actual or expected:
            special.append(f"{actual} {what} in your output (reference: {expected})")
    if t.nan_expected:
        special.append("NaN never matches, not even NaN")
    text = (f"{which}: " if t.output_index is not None else "") + (
        ", ".join(bits + special) or "values differ"
    )
    if t.first_mismatches:
        shown = "; ".join(
            f"at {m.get('index')}: expected {_num(m.get('expected'))}, got {_num(m.get('actual'))}"
            for m in t.first_mismatches[:5]
        )
        text += f"; first mismatches {shown}"
    return text


def profile_table(profile: ProfileInfo | None, limit: int = MAX_KERNELS) -> str:
    """The top `limit` GPU kernels of one forward as a fixed-width table (name, calls, total µs, share,
    custom or library), plus a line when no custom kernel ran."""
    if profile is None or not profile.kernels:
        return "(no profile was taken)"
    rows = sorted(profile.kernels, key=lambda k: k.total_us, reverse=True)[:limit]
    names = [_clip(k.name, 70) for k in rows]
    width = max(6, *(len(n) for n in names))
    out = [f"{'kernel':<{width}}  {'calls':>5}  {'total µs':>9}  {'share':>6}  kind"]
    for k, name in zip(rows, names, strict=True):
        kind = "custom" if k.custom else "library"
        out.append(f"{name:<{width}}  {k.calls:>5}  {k.total_us:>9.1f}  {k.share:>6.1%}  {kind}")
    hidden = len(profile.kernels) - len(rows)
    if hidden > 0:
        out.append(f"(... {hidden} more kernels)")
    table = "```\n" + "\n".join(out) + "\n```"
    if profile.custom_kernel_ran is False:
        table += "\nNone of these is your kernel: the time is all library kernels. Launch your own kernels."
    elif profile.custom_share is not None:
        table += f"\nYour kernels take {profile.custom_share:.0%} of the GPU kernel time."
    return table


def timing_line(result: EvalResult) -> str:
    """Timing (KernelBench parity, mean per call): yours and the reference's ms, the speedup, a verdict."""
    return (
        f"Timing (mean per call): yours {_ms(result.runtime_ms)} ms, the reference {_ms(result.ref_runtime_ms)} ms: "
        f"speedup {_speedup(result.speedup)} ({_verdict(result.speedup)})."
    )


def ncu_summary(ncu: NcuInfo | None, limit: int = MAX_NCU_KERNELS, device: str | None = None) -> str:
    """Nsight Compute's figures per custom kernel, three or four lines each: duration and launch shape;
    DRAM bandwidth (% of peak, GB/s), SM throughput and L2 hit rate; achieved and theoretical occupancy,
    registers per thread and shared memory per block; the top warp stalls (their cycles of those between
    a warp's two issued instructions, the first one explained). One line when the pass was not run or measured nothing (`NcuInfo.message`);
    `device` is the evaluation's ("cpu": no pass can run, and the line says so)."""
    if ncu is None:
        if str(device or "").startswith("cpu"):
            return "Nsight Compute: not run (the evaluation ran on the CPU; it profiles GPU kernels)."
        return "Nsight Compute: not run."
    if ncu.status != "ok" or not ncu.kernels:
        return ncu.message or f"Nsight Compute: {ncu.status}."
    forwards = f"{ncu.forwards} forwards" if (ncu.forwards or 1) > 1 else "one forward"
    out = [f"Nsight Compute, your kernels in {forwards} (clocks not locked: figures vary by a few %):"]
    for k in ncu.kernels[:limit]:
        shape = f" (grid {_dims(k.grid)}, block {_dims(k.block)})" if k.grid and k.block else ""
        times = f" each, {k.launches} launches" if k.launches > 1 else ""
        out.append(f"- {_clip(k.name, 70)}{shape}: {_fig(k.duration_us, '{:.1f}')} us{times}")
        gbs = f" ({k.dram_gbs:.0f} GB/s)" if k.dram_gbs is not None else ""
        out.append(f"  DRAM {_pct(k.dram_pct)} of peak{gbs}, SM throughput {_pct(k.compute_pct)}, "
                   f"L2 hit rate {_pct(k.l2_hit_pct)}")  # fmt: skip
        theory = f" (theoretical {_pct(k.theoretical_occupancy_pct)})" if k.theoretical_occupancy_pct else ""
        out.append(f"  occupancy {_pct(k.occupancy_pct)}{theory}, {_fig(k.registers, '{}')} registers/thread, "
                   f"{_fig(k.shared_bytes, '{}')} B shared memory/block")  # fmt: skip
        if k.stalls:
            (top, v), *rest = k.stalls
            gloss = f" ({STALL_MEANING[top]})" if top in STALL_MEANING else ""
            more = "".join(f", {r} {x:.1f}" for r, x in rest)
            of = (
                f"of the {k.issue_cycles:.1f} cycles between a warp's instructions"
                if k.issue_cycles
                else "cycles"
            )
            out.append(f"  top warp stalls ({of}): {top} {v:.1f}{gloss}{more}")
    if len(ncu.kernels) > limit:
        out.append(f"(... {len(ncu.kernels) - limit} more kernels)")
    return "\n".join(out)


# what a warp stall reason means (Nsight Compute's Kernel Profiling Guide, "Warp Scheduler States")
STALL_MEANING = {
    "long_scoreboard": "waiting on global/local memory",
    "short_scoreboard": "waiting on shared memory or special math",
    "barrier": "waiting at a block barrier",
    "membar": "waiting at a memory barrier",
    "mio_throttle": "shared-memory/special-math queue full",
    "lg_throttle": "global/local memory queue full",
    "tex_throttle": "texture queue full",
    "math_pipe_throttle": "a math pipe is busy",
    "wait": "a fixed-latency dependency",
    "not_selected": "ready, another warp issued",
    "no_instruction": "no instruction fetched (cache miss, branch)",
    "drain": "draining memory writes at exit",
    "dispatch_stall": "the dispatcher stalled",
    "imc_miss": "constant cache miss",
    "branch_resolving": "resolving a branch",
    "sleeping": "sleeping",
    "gmma": "waiting on warpgroup MMA (wgmma)",
    "misc": "miscellaneous",
}


def speed_of_light(ncu: NcuInfo | None, alone: bool = False, device: str | None = None) -> str:
    """Where each custom kernel sits against the roofline: memory and compute throughput as % of peak
    (Nsight Compute's speed of light) and what that makes it (latency-, memory- or compute-bound, and
    how close to the roof). When there are no figures: "" (the `ncu` component's line says why), or that
    line itself with `alone` (the recipe shows speed_of_light without ncu)."""
    if ncu is None or ncu.status != "ok" or not ncu.kernels:
        return ncu_summary(ncu, device=device) if alone else ""
    out = ["Speed of light (% of the GPU's peak memory and compute throughput, Nsight Compute):"]
    for k in ncu.kernels[:MAX_NCU_KERNELS]:
        out.append(f"- {_clip(k.name, 70)}: memory {_pct(k.memory_pct)}, compute {_pct(k.compute_pct)}: "
                   + roofline_verdict(k))  # fmt: skip
    return "\n".join(out)


def roofline_verdict(k: NcuKernel) -> str:
    """A kernel's place on the roofline in words, from its speed-of-light figures (SOL_* bands)."""
    mem, comp = k.memory_pct, k.compute_pct
    if mem is None or comp is None:
        return "not measured"
    if max(mem, comp) < SOL_LATENCY_PCT:
        return ("latency-bound (neither is busy): expose more parallelism (more blocks or warps, more "
                "independent work per thread) or remove the stalls")  # fmt: skip
    if mem >= comp:
        if mem >= SOL_ROOF_PCT:
            return (
                "memory-bound, near the roof: only moving fewer bytes (fusion, reuse, narrower types) helps"
            )
        return "memory-bound, below the roof: coalesce and vectorize the accesses"
    if comp >= SOL_ROOF_PCT:
        return "compute-bound, near the roof: do less work per output, or use tensor cores"
    return "compute-bound, below the roof: cut instructions per element, raise occupancy"


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x:.0f}%"


def _fig(x: float | None, fmt: str) -> str:
    return "?" if x is None else fmt.format(x)


def _dims(text: str | None) -> str:
    """ncu's "(4096, 1, 1)" as "4096x1x1"."""
    return re.sub(r"\s*,\s*", "x", (text or "").strip().strip("()").strip()) or "?"


def cuda_unchecked(result: EvalResult) -> bool:
    """Whether a runtime error only says this machine cannot build or run CUDA (a CPU machine, torch without
    CUDA, no driver), so that the candidate was never checked."""
    return Status(result.status) == Status.RUNTIME_ERROR and bool(_NO_CUDA_HERE.search(result.message or ""))


_NO_CUDA_HERE = re.compile(
    r"this machine's torch has no CUDA|no CUDA-enabled torch and no nvcc|nvcc compile check could not finish|"
    r"Found no NVIDIA driver|Torch not compiled with CUDA enabled"
)
# lines the evaluator's own tools print into the child's output (torch.profiler's Kineto: "USDT:2026-12-01
# 20:23:10 23442:23442 SyncActivityProfilerHandler.cpp:52] profiler_start"; older torch: "STAGE:...")
_HARNESS_LINE = re.compile(
    r"^(?:USDT|STAGE):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\n]*\.cpp:\d+\][^\n]*\n?", re.MULTILINE
)


def candidate_output(text: str) -> str:
    """The candidate's stdout/stderr less the lines the evaluator's own profiler writes there."""
    return _HARNESS_LINE.sub("", text or "")


def _harness_prefixes() -> list[tuple[str, str]]:
    roots = [(str(Path(__file__).resolve().parent.parent) + os.sep, "kb_agent/")]
    try:
        from kb_agent.evaluator.runner import default_build_root

        roots.insert(0, (str(default_build_root()) + os.sep, "build/"))
    except Exception:  # noqa: BLE001 - cleaning text must never fail a turn
        pass
    return roots


_HARNESS_PATH = [
    # the evaluation's work directory: <tmp>/kb-eval-<pid>-XXXX/candidate.py -> candidate.py
    (re.compile(r"(?:/[^\s'\"():,]*)?/kb-(?:eval|check)-[^/\s'\"]+/"), ""),
    # the build cache: .../kb-agent/build/<16 hex>/ -> build/
    (re.compile(r"(?:/[^\s'\"():,]*)?/kb-agent/build/(?:[0-9a-f]{16}/)?"), "build/"),
    # installed packages: .../site-packages/torch/nn/... -> torch/nn/...
    (re.compile(r"(?:/[^\s'\"():,]*)?/(?:site|dist)-packages/"), ""),
    # the standard library: /usr/lib/python3.11/x.py -> python3.11/x.py
    (re.compile(r"(?:/[^\s'\"():,]*)?/lib/(python3\.\d+)/"), r"\1/"),
]


def clean_paths(text: str) -> str:
    """`text` with the harness's own paths shortened: the evaluation's temp folder dropped, the build cache
    as build/, installed packages from their package name, the standard library as python3.X/, this
    project as kb_agent/. The model sees where in its own code or in torch an error is, not our disks."""
    for prefix, short in _harness_prefixes():
        text = text.replace(prefix, short)
    for pattern, short in _HARNESS_PATH:
        text = pattern.sub(short, text)
    return text


def _output_block(result: EvalResult) -> str:
    output = clean_paths(_tail(candidate_output(result.stderr or result.stdout).strip(), MAX_OUTPUT_CHARS))
    if not output.strip() or output.strip() in clean_paths(result.message or ""):
        return ""
    return f"Output of your module (the end):\n```\n{output.strip()}\n```"


def _message(result: EvalResult) -> str:
    text = clean_paths((result.message or "").strip())
    return text or f"The evaluator reported {result.status} without a message."


def _tail(text: str, n: int) -> str:
    text = text or ""
    return text if len(text) <= n else "[...]\n" + text[-n:]


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _num(x: object) -> str:
    if isinstance(x, float):
        if math.isnan(x) or math.isinf(x):
            return str(x)
        return f"{x:.4g}"
    return str(x)


def _ms(x: float | None) -> str:
    return "?" if x is None else f"{x:.4g}"


def _speedup(x: float | None) -> str:
    return "?" if x is None else fmt_speedup(x)


def _verdict(speedup: float | None) -> str:
    if speedup is None:
        return "not timed"
    if speedup >= 1.05:
        return "faster than the reference"
    if speedup > 0.95:
        return "about as fast as the reference"
    return "slower than the reference"


__all__ = [
    "COMPONENTS",
    "RECIPES",
    "candidate_output",
    "clean_paths",
    "compile_summary",
    "correctness_summary",
    "cuda_unchecked",
    "feedback_for",
    "initial_messages",
    "ncu_summary",
    "needs_ncu",
    "parse_recipe",
    "profile_table",
    "roofline_verdict",
    "speed_of_light",
    "timing_line",
    "trim_log",
]
