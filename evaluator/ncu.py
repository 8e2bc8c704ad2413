"""Nsight Compute's pass over a correct candidate's custom kernels: the figures the feedback's `ncu` and
`speed_of_light` components show (issue 15).

A pass of its own, never the timed run: after the evaluation, a fresh child (`evaluator.worker`'s
"ncu_profile" job, `evaluator.stages.ncu_profile`) is started under

    ncu --clock-control none --target-processes all --profile-from-start off
        --kernel-name-base demangled --kernel-name regex:<the candidate's kernels> --launch-count 20
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
        --metrics dram__bytes.sum.per_second,lts__t_sector_hit_rate.pct --export <report>
        --log-file <report>.log python -m kb_agent.evaluator.worker ...

(`runner.run_wrapped`). The child imports the candidate (its cached build), runs warm-up forwards outside
the profiled range, then `FORWARDS` forwards between cudaProfilerStart and cudaProfilerStop on the
problem's inputs. The kernel filter keeps the kernels the candidate's source defines (`__global__`
functions of its load_inline sources, `@triton.jit` functions); where none is found by name, every
kernel in the range is profiled and library kernels (PyTorch, cuBLAS, cuDNN: `profile.is_library_kernel`)
are left out when reading. `ncu --import <report> --csv --page raw` then gives one row
per profiled launch, one column per metric (`parse_raw_csv`), read into an `NcuInfo` (`read_raw`).

Where ncu is missing, where GPU performance counters are not permitted (ERR_NVGPUCTRPERM), where the pass
runs past `EvalSettings.ncu_s` or fails, `NcuInfo.status` says which and `NcuInfo.message` is the one line
the feedback shows. The child runs without strict mode's sandbox and checks (ncu's injection into the
profiled process needs what the sandbox refuses: a connection to ncu's front end, files outside the
evaluation's folders); the candidate was judged by the evaluation before, and nothing measured here
changes a status.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from kb_agent.evaluator.profile import is_library_kernel
from kb_agent.evaluator.result import NcuInfo, NcuKernel
from kb_agent.evaluator.settings import EvalSettings
from kb_agent.problems import Problem

log = logging.getLogger(__name__)

MAX_LAUNCHES = 20  # launches ncu profiles at most (each is replayed once per counter pass: ~10-40 passes)
WARMUP = 2  # forwards before the profiled range: Triton compiles, caches and allocators settle
FORWARDS = 1  # forwards in the profiled range
SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats")
EXTRA_METRICS = ("dram__bytes.sum.per_second", "lts__t_sector_hit_rate.pct")
# where ncu is looked for after $KB_NCU and PATH (CUDA toolkits install it beside nvcc)
FALLBACK_PATHS = ("/usr/local/cuda/bin/ncu",)

# the raw page's column for each NcuKernel field, the first one present (ncu metric names, Nsight Compute's
# Profiling Guide; checked against the raw page ncu wrote on the H200, tests/evaluator/data/ncu_raw.csv,
# and the human-readable details page of the same kernel, ncu_details.csv)
METRICS = {
    "duration_us": ("gpu__time_duration.sum",),  # details: Duration
    "memory_pct": ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),  # Memory Throughput
    "compute_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),  # Compute (SM) Throughput
    "dram_pct": (
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",  # DRAM Throughput
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    ),  # fmt: skip
    "dram_gbs": ("dram__bytes.sum.per_second",),  # Memory Workload Analysis: Memory Throughput
    "l2_hit_pct": ("lts__t_sector_hit_rate.pct",),  # L2 Hit Rate
    "occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),  # Achieved Occupancy
    "theoretical_occupancy_pct": ("sm__maximum_warps_per_active_cycle_pct",),  # Theoretical Occupancy
    "registers": ("launch__registers_per_thread",),  # Registers Per Thread
    "issue_cycles": (
        "smsp__average_warp_latency_per_inst_issued.ratio",
    ),  # Warp Cycles Per Issued Instruction
}
SHARED_METRICS = ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic")
# warp stall reasons, in cycles per issued instruction (WarpStateStats); the first family found is used
STALL_FAMILIES = (
    re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio"),
    re.compile(r"smsp__average_warp_latency_issue_stalled_(\w+?)\.ratio"),
    re.compile(r"smsp__pcsamp_warps_issue_stalled_(\w+)"),
)
NOT_STALLS = {"selected"}  # "selected" is a warp issuing, not waiting
MAX_STALLS = 3

# units of the raw page ("ns", "byte/s", "byte/block" on the H200; other scalings and spellings read too)
_TIME_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
            "second": 1e6, "s": 1e6}  # fmt: skip
_BYTES = {"byte": 1.0, "B": 1.0, "Kbyte": 1e3, "KB": 1e3, "Mbyte": 1e6, "MB": 1e6, "Gbyte": 1e9, "GB": 1e9,
          "Tbyte": 1e12, "TB": 1e12, "Kibyte": 2**10, "Mibyte": 2**20, "Gibyte": 2**30}  # fmt: skip

_DENIED = "ERR_NVGPUCTRPERM"
_CUDA_KERNEL = re.compile(r"__global__\s+(?:[\w:<>,\s*&]*?\s)?(\w+)\s*\(")
_TRITON_KERNEL = re.compile(r"@(?:triton\.)?jit\b[^\n]*\n(?:[ \t]*@[^\n]*\n)*[ \t]*def\s+(\w+)")


class NcuError(Exception):
    """A raw CSV page that cannot be read (no header row with "Kernel Name")."""


def find_ncu() -> str | None:
    """The ncu executable: $KB_NCU when set (an empty or missing path means none), else `ncu` on PATH,
    else FALLBACK_PATHS; None when there is none."""
    given = os.environ.get("KB_NCU")
    if given is not None:
        return given if given and os.access(given, os.X_OK) else None
    found = shutil.which("ncu")
    return found or next((p for p in FALLBACK_PATHS if os.access(p, os.X_OK)), None)


def custom_kernel_names(source: str) -> list[str]:
    """The kernels a candidate's source defines by name: `__global__` functions (load_inline sources,
    `__launch_bounds__` allowed) and `@triton.jit` / `@jit` functions, in order of appearance."""
    text = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", source)
    names = [m.group(1) for m in _CUDA_KERNEL.finditer(text)] + [
        m.group(1) for m in _TRITON_KERNEL.finditer(text)
    ]
    return list(dict.fromkeys(n for n in names if n not in {"void", "__launch_bounds__"}))


def kernel_filter(names: list[str]) -> str:
    """ncu's `--kernel-name` for demangled names that are one of `names`: the name after start, a space or
    `::`, before a template's `<`, the parameters' `(` or the end ("void k<256>(float*)", "ns::k(int)",
    "k" for Triton). Only alternation, groups and classes: any regex engine reads it the same."""
    return "regex:(^|[ :])(" + "|".join(re.escape(n) for n in names) + r")([<(]|$)"


def ncu_options(report: Path, names: list[str]) -> list[str]:
    """The options of the profiling run: `report` the file it exports (ncu adds `.ncu-rep`), its own
    messages to `report` + ".log" (apart from what the candidate prints)."""
    opts = ["--clock-control", "none", "--target-processes", "all", "--profile-from-start", "off",
            "--launch-count", str(MAX_LAUNCHES), "--kernel-name-base", "demangled"]  # fmt: skip
    if names:
        opts += ["--kernel-name", kernel_filter(names)]
    for section in SECTIONS:
        opts += ["--section", section]
    return opts + [
        "--metrics",
        ",".join(EXTRA_METRICS),
        "--export",
        str(report),
        "--force-overwrite",
        "--log-file",
        str(report) + ".log",
    ]


# -- reading ncu's CSV -----------------------------------------------------------------------------------
def parse_raw_csv(text: str) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The rows of ncu's `--csv --page raw` output (one per profiled launch, keyed by the header: "ID",
    "Kernel Name", "Block Size", "Grid Size", then metric names) and each column's unit (the second row,
    where the first cells are empty). Lines ncu prints about itself ("==PROF==", "==WARNING==") are
    skipped. Raises NcuError when there is no header row."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("==")]
    table = list(csv.reader(io.StringIO("\n".join(lines))))
    start = next((i for i, row in enumerate(table) if "Kernel Name" in row and "ID" in row), None)
    if start is None:
        raise NcuError("no CSV header with 'Kernel Name' in ncu's output")
    header, body = table[start], table[start + 1 :]
    units: dict[str, str] = {}
    if body and not body[0][header.index("ID")].strip():
        units = dict(zip(header, body[0], strict=False))
        body = body[1:]
    rows = [dict(zip(header, row, strict=False)) for row in body if len(row) == len(header)]
    return rows, units


def number(value: str | None) -> float | None:
    """A raw-page value as a float ("1,024.5" -> 1024.5); None for "", "n/a" and the like."""
    if value is None:
        return None
    text = value.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def scaled(value: str | None, unit: str, kind: str) -> float | None:
    """`value` in `unit` converted: kind "us" (a time to µs), "bytes" (a size to bytes), "gbs" (a rate to
    GB/s) or "" (as it is, a % or a count)."""
    x = number(value)
    if x is None or not kind:
        return x
    unit = unit.strip()
    if kind == "us":
        return x * _TIME_US.get(unit, 1e-3)  # nanoseconds when the unit is not named
    if kind == "bytes":
        return x * _BYTES.get(unit, 1.0)
    base = unit.split("/")[0]
    return x * _BYTES.get(base, 1.0) / 1e9


_KINDS = {"duration_us": "us", "dram_gbs": "gbs"}


def short_name(name: str) -> str:
    """A kernel's demangled name without its return type and parameters ("void k<256>(float*)" -> "k<256>")."""
    name = re.sub(r"^void\s+", "", name.strip())
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0:
            cut = i
            break
    return name[:cut].strip() or name


def launch_figures(row: dict[str, str], units: dict[str, str]) -> dict:
    """The NcuKernel fields of one profiled launch (one raw-page row)."""
    fig: dict = {}
    for field, names in METRICS.items():
        metric = next((m for m in names if m in row), names[0])
        fig[field] = scaled(row.get(metric), units.get(metric, ""), _KINDS.get(field, ""))
    shared = [scaled(row.get(m), units.get(m, ""), "bytes") for m in SHARED_METRICS]
    fig["shared_bytes"] = (
        sum(s for s in shared if s is not None) if any(s is not None for s in shared) else None
    )
    for family in STALL_FAMILIES:
        stalls = {m.group(1): number(v) for k, v in row.items() if (m := family.fullmatch(k))}
        stalls = {r: v for r, v in stalls.items() if v is not None and r not in NOT_STALLS
                  and not r.endswith("_not_issued")}  # fmt: skip
        if stalls:
            fig["stalls"] = stalls
            break
    return fig


def read_raw(text: str, names: list[str] | None = None, max_kernels: int = 8) -> NcuInfo:
    """An NcuInfo ("ok", or "no_kernels") from ncu's raw CSV page: launches grouped by kernel name, each
    figure the mean over its launches, kernels by total duration. A launch whose name is not one of
    `names` (the source's kernels) and is a library kernel by name (`is_library_kernel`) is left out and
    counted in `library_skipped`. Raises NcuError when the text has no CSV header."""
    rows, units = parse_raw_csv(text)
    groups: dict[str, list[dict]] = {}
    meta: dict[str, dict] = {}
    skipped = 0
    wanted = set(names or ())
    for row in rows:
        full = row.get("Kernel Name", "")
        short = short_name(full)
        base = re.split(r"[<(]", short)[0].split("::")[-1]
        if base not in wanted and is_library_kernel(full):
            skipped += 1
            continue
        groups.setdefault(short, []).append(launch_figures(row, units))
        meta.setdefault(short, {"grid": row.get("Grid Size") or None, "block": row.get("Block Size") or None})
    kernels = [_mean_kernel(name, figs, **meta[name]) for name, figs in groups.items()]
    kernels.sort(key=lambda k: -(k.duration_us or 0.0) * k.launches)
    info = NcuInfo(kernels=kernels[:max_kernels], library_skipped=skipped)
    if not kernels:
        info.status = "no_kernels"
        info.message = ("Nsight Compute: none of your kernels ran in the profiled forward"
                        + (f" ({skipped} library kernel launches left out)." if skipped else "."))  # fmt: skip
    return info


def _mean_kernel(name: str, figs: list[dict], grid: str | None, block: str | None) -> NcuKernel:
    def mean(field: str) -> float | None:
        xs = [f[field] for f in figs if f.get(field) is not None]
        return sum(xs) / len(xs) if xs else None

    stalls: dict[str, list[float]] = {}
    for f in figs:
        for reason, v in (f.get("stalls") or {}).items():
            stalls.setdefault(reason, []).append(v)
    top = sorted(((r, sum(v) / len(v)) for r, v in stalls.items()), key=lambda rv: -rv[1])[:MAX_STALLS]
    regs, shared = mean("registers"), mean("shared_bytes")
    return NcuKernel(
        name=name, launches=len(figs), grid=grid, block=block,
        **{f: mean(f) for f in METRICS if f != "registers"},
        registers=round(regs) if regs is not None else None,
        shared_bytes=round(shared) if shared is not None else None,
        stalls=[[r, round(v, 3)] for r, v in top if v > 0],
    )  # fmt: skip


def failure(messages: str) -> NcuInfo | None:
    """The NcuInfo of a pass whose output (ncu's log, the child's stderr) says it could not measure
    anything: counters not permitted, an ncu error; None when it says neither."""
    if _DENIED in messages:
        return NcuInfo(status="denied", message="Nsight Compute: not run, GPU performance counters are not "
                       f"permitted to this user here ({_DENIED}).")  # fmt: skip
    err = next((ln for ln in messages.splitlines() if ln.startswith("==ERROR==")), None)
    if err:
        return NcuInfo(status="error", message=f"Nsight Compute failed: {err[9:].strip()[:200]}")
    return None


# -- the pass --------------------------------------------------------------------------------------------
def profile_candidate(
    problem: Problem, candidate_source: str, settings: EvalSettings, build_root: Path
) -> NcuInfo:
    """Nsight Compute's figures for `candidate_source`'s custom kernels on `problem`'s inputs (see the
    module docstring), in a fresh child under ncu, within `settings.ncu_s` wall seconds in all.
    `build_root` is the candidate's build folder (its cached extension build is reused). Never raises
    for what ncu or the candidate does: every ending is an `NcuInfo` status."""
    from kb_agent.evaluator.runner import candidate_job, run_wrapped
    from kb_agent.evaluator.workdir import new_workdir

    t0 = time.perf_counter()
    exe = find_ncu()
    if exe is None:
        return NcuInfo(status="unavailable", message="Nsight Compute: not run, no `ncu` on this machine "
                       "(install Nsight Compute or set KB_NCU).", seconds=0.0)  # fmt: skip
    names = custom_kernel_names(candidate_source)
    workdir = new_workdir("kb-eval-")
    report = workdir / "ncu" / "report"
    report.parent.mkdir()
    options = ncu_options(report, names)
    child_settings = dataclasses.replace(settings, strict=False, sandbox=False, profile=False)
    # the evaluation's own job (`runner.candidate_job`): a job of its own once named no binding cache, and
    # the child took torch's stock build under another module name and compiled main.cpp and cuda.cu again
    # (the pass of 1/19's load_inline ReLU took 36-40 s on the H200, 9-11 s for Triton candidates)
    job = {**candidate_job(problem, candidate_source, child_settings, workdir, build_root),
           "mode": "ncu_profile", "warmup": WARMUP, "forwards": FORWARDS}  # fmt: skip
    parts: dict = {}
    try:
        child = run_wrapped([exe, *options], job, child_settings, workdir, build_root,
                            lambda m: parts.update({m["event"]: m}), {}, settings.ncu_s)  # fmt: skip
        info = _outcome(exe, report, child, parts, t0, settings.ncu_s, names)
        if info.status != "ok":
            info.detail = _tail(report.with_name(report.name + ".log"), child.stderr)
            log.info("Nsight Compute's pass: %s\n%s", info.message, info.detail)
    except Exception as e:  # noqa: BLE001 - the pass is feedback: a bug of ours must not fail the evaluation
        log.warning("Nsight Compute's pass failed", exc_info=True)
        info = NcuInfo(
            status="error", message=f"Nsight Compute: the pass failed ({type(e).__name__}: {e})"[:240]
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    info.options = options
    info.forwards = parts.get("ncu_forwards", {}).get("forwards")
    info.builds = parts.get("compile", {}).get("builds") or []
    info.seconds = time.perf_counter() - t0
    return info


def _outcome(exe: str, report: Path, child, parts: dict, t0: float, limit_s: float, names) -> NcuInfo:
    """The NcuInfo of a finished profiling child: the time limit or the counters' permission first, then
    the exported report read, else why there is none (no kernel profiled, an ncu error, the run failed)."""
    if child.timed_out:
        return NcuInfo(status="timeout", message=f"Nsight Compute: stopped at its {limit_s:g} s limit "
                       "(EvalSettings.ncu_s), no figures.")  # fmt: skip
    own = report.with_name(report.name + ".log")
    said = "\n".join([own.read_text(errors="replace") if own.is_file() else "", child.stdout, child.stderr])
    if _DENIED in said:
        return failure(said)
    rep = report.with_name(report.name + ".ncu-rep")
    if rep.is_file():
        info = _import(exe, rep, max(5.0, limit_s - (time.perf_counter() - t0)), limit_s, names)
        return failure(said) or info if info.status == "no_kernels" else info
    done = child.done or {}
    if "No kernels were profiled" in said:
        return NcuInfo(status="no_kernels", message="Nsight Compute: none of your kernels ran in the "
                       "profiled forward.")  # fmt: skip
    if done.get("status") not in (None, "correct"):
        first = (done.get("message") or "").strip().splitlines()[:1]
        return NcuInfo(status="error", message="Nsight Compute: the profiled run failed: "
                       + (first[0][:200] if first else str(done.get("status"))))  # fmt: skip
    ended = "ended without a verdict or" if child.done is None else "finished without"
    return failure(said) or NcuInfo(status="error", message=f"Nsight Compute failed: the profiled process "
                                    f"{ended} a report.")  # fmt: skip


def _tail(log_path: Path, stderr: str, lines: int = 12) -> str:
    """The last `lines` lines of ncu's own log and of the child's stderr."""
    own = log_path.read_text(errors="replace") if log_path.is_file() else ""
    parts = [("ncu: ", own), ("stderr: ", stderr)]
    return "\n".join(
        label + "\n".join(text.strip().splitlines()[-lines:]) for label, text in parts if text.strip()
    )


def _import(exe: str, rep: Path, timeout_s: float, limit_s: float, names) -> NcuInfo:
    """`ncu --import REP --csv --page raw` read (`read_raw`), within `timeout_s` seconds."""
    try:
        out = subprocess.run([exe, "--import", str(rep), "--csv", "--page", "raw"], capture_output=True,
                             text=True, timeout=timeout_s)  # fmt: skip
    except subprocess.TimeoutExpired:
        return NcuInfo(status="timeout", message=f"Nsight Compute: stopped at its {limit_s:g} s limit "
                       "while reading its report, no figures.")  # fmt: skip
    except OSError as e:
        return NcuInfo(status="error", message=f"Nsight Compute failed reading its report: {e}")
    try:
        return read_raw(out.stdout, names)
    except NcuError:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no CSV"]
        return failure(out.stdout + "\n" + out.stderr) or NcuInfo(
            status="error", message=f"Nsight Compute failed reading its report: {tail[0][:200]}"
        )
