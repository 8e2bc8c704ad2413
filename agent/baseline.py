"""`kb-agent baseline` as a library call: time each problem's reference eager and under `torch.compile` on
the local device with the evaluator's protocol, cached in the store.

`run_baselines(problems, settings, store=store)` looks each problem up in the baseline cache under
(reference SHA-256, GPU name, precision, torch version, compile mode) (`agent.store.baselines`), and
measures the ones not there with `evaluator.runner.time_baseline` (one isolated child per problem, one at
a time: a timing shares its device with nothing), storing what it measured. A measurement that failed
(`error`, `timeout`) is returned but not stored, so the next call tries again; one where only
torch.compile failed (`compile_failed`) is stored with its eager figure.

With `jobs` above 1 a warm-up phase comes first: `evaluator.runner.warm_baseline` compiles the problems to
measure, `jobs` at once (`agent.checks.run_pooled`: the pool `problems check --jobs` uses, one that ran
out of memory beside the others compiled again alone), into one cache folder made empty for this call
(inductor's FX graph and AOT autograd caches, Triton's kernels); it records each cold compilation's
seconds. Only when every warm-up child has ended does the timing phase begin, one problem at a time as
with `jobs` 1, its children compiling from that folder. The stored `compile_s` stays the cold
compilation's (the warm-up's; `compile_s_from` says which phase measured it), and a warm-up that failed
leaves its problem to compile cold in the timing phase.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kb_agent.agent.store.baselines import COMPILE_MODES, cached_baseline, record_baseline
from kb_agent.evaluator.pool import cpu_cores
from kb_agent.evaluator.settings import EvalSettings
from kb_agent.evaluator.workdir import new_workdir
from kb_agent.problems import Problem
from kb_agent.problems.errors import UsageError

log = logging.getLogger(__name__)

STORED_STATUSES = ("ok", "compile_failed")  # measurements that reached a figure

TimeFn = Callable[..., dict[str, Any]]  # (problem, settings, compile_mode, cache_dir=None) -> result
WarmFn = Callable[..., dict[str, Any]]  # the same arguments and compile_threads=None
OnResult = Callable[[Problem, dict[str, Any]], None]


def local_gpu_name(device: str) -> str:
    """The name the evaluator records for `device` (`cpu` for the CPU; for CUDA, the device's name as
    torch reports it, which is what the evaluation child reports as `gpu_name`)."""
    if not device.startswith("cuda"):
        return "cpu"
    import torch

    index = int(device.split(":", 1)[1]) if ":" in device else 0
    return torch.cuda.get_device_properties(index).name


def local_torch_version() -> str | None:
    """`torch.__version__`, what the evaluation child reports as `torch` (`evaluator.hardware`) and so the
    cache key of what it measured; None without torch. Not the package metadata's version: a PyPI CUDA
    wheel's is `2.11.0` where `torch.__version__` is `2.11.0+cu130`, and on the H200 no stored baseline
    was ever found again."""
    try:
        import torch
    except ImportError:
        return None
    return str(torch.__version__)


def baseline_settings(settings: EvalSettings) -> EvalSettings:
    """`settings` for a baseline job: strict mode, its sandbox and the profile off (they watch candidates;
    a baseline runs only the reference), everything else (trials, warm-up, L2 flush, limits) as given."""
    return replace(settings, strict=False, sandbox=False, profile=False, baseline_compile=False)


def run_baselines(
    problems: Sequence[Problem],
    settings: EvalSettings,
    *,
    store: Any,
    compile_mode: str = "default",
    force: bool = False,
    jobs: int = 1,
    on_result: OnResult | None = None,
    time_fn: TimeFn | None = None,
    warm_fn: WarmFn | None = None,
) -> list[dict[str, Any]]:
    """The baseline of each of `problems`, from the cache or measured now, in the order of `problems`.

    Args:
        settings: device, precision, trials and stage limits (`baseline_settings` is applied).
        store: a `Store`; the cache is read from and written to it.
        compile_mode: `default` (inductor's default) or `max-autotune`.
        force: measure again even when the cache has a figure (the new one replaces it).
        jobs: warm-up compilations at once before the timing phase (module docstring); 1: none, each
            timing child compiles cold, as it always did.
        on_result: called with (problem, result) as each result is known (in the timing phase).
        time_fn: measures one problem, `(problem, settings, compile_mode, cache_dir=None) -> dict`;
            default `evaluator.runner.time_baseline`.
        warm_fn: compiles one problem, the same arguments and `compile_threads` (inductor's compile
            workers: the CPUs over `jobs`); default `evaluator.runner.warm_baseline`.

    Returns:
        One dict per problem: `time_baseline`'s fields (status, eager_ms, compile_ms in ms, compile_s,
        compile_error, message, ...), `cached` (True when it came from the store), and, on what was
        measured now: `compile_s` the cold compilation's seconds, from the warm-up where it compiled
        (`compile_s_from` "warmup"), else the timing child's own ("timing"; None with no compile_s);
        `warm_compile_s` the timing child's first compiled call from the warm caches (seconds; None
        without a warm-up); `warmup` the warm-up's status, message, compile_s, compile_cache, seconds,
        stages and child_start (None where none ran).

    Raises:
        UsageError: an unknown compile mode.
        ValueError: `jobs` below 1.
        KeyboardInterrupt: re-raised after the running children are killed; what was measured before
            is stored.
    """
    if compile_mode not in COMPILE_MODES:
        raise UsageError(f"unknown compile mode {compile_mode!r}; choose one of {', '.join(COMPILE_MODES)}")
    if jobs < 1:
        raise ValueError(f"jobs must be 1 or more, got {jobs}")
    if time_fn is None:
        from kb_agent.evaluator.runner import time_baseline as time_fn
    settings = baseline_settings(settings)
    gpu, torch_version = local_gpu_name(settings.device), local_torch_version()
    hits = {}
    for i, p in enumerate(problems):
        if not force and torch_version is not None:
            hit = cached_baseline(store, p.code_sha256, gpu, settings.precision, torch_version, compile_mode)
            if hit is not None:
                hits[i] = {**hit["record"], "cached": True}
    todo = [i for i in range(len(problems)) if i not in hits]
    cache_dir, warm = None, {}
    try:
        if jobs > 1 and todo:
            cache_dir = new_workdir("kb-base-")  # empty: the warm-up's compilations are cold
            warm = _warm_up([problems[i] for i in todo], settings, jobs, compile_mode, cache_dir, warm_fn)
            warm = {i: warm[k] for k, i in enumerate(todo)}
        results = []
        for i, p in enumerate(problems):
            result = hits.get(i)
            if result is None:
                timed = time_fn(p, settings, compile_mode, cache_dir=cache_dir)
                result = {**_with_warmup(timed, warm.get(i)), "cached": False}
                if result["status"] in STORED_STATUSES:
                    record_baseline(store, result)
                else:
                    log.info("baseline of %s not stored: %s", p.key, result.get("message"))
            results.append(result)
            if on_result is not None:
                on_result(p, result)
    finally:
        if cache_dir is not None:
            shutil.rmtree(cache_dir, ignore_errors=True)
    return results


def _with_warmup(timed: dict[str, Any], warm: dict[str, Any] | None) -> dict[str, Any]:
    """`timed` (a timing child's result) with its warm-up's findings (`warm`, None where none ran):
    `compile_s` the warm-up's cold compilation when the warm-up compiled ("ok" with a compile_s),
    `compile_s_from`, `warm_compile_s` and `warmup` (`run_baselines`' Returns)."""
    summary = None
    if warm is not None:
        keys = ("status", "message", "compile_s", "compile_cache", "seconds", "stages", "child_start")
        summary = {k: warm.get(k) for k in keys}
    if summary is not None and summary["status"] == "ok" and summary["compile_s"] is not None:
        return {**timed, "compile_s": summary["compile_s"], "compile_s_from": "warmup",
                "warm_compile_s": timed.get("compile_s"), "warmup": summary}  # fmt: skip
    source = "timing" if timed.get("compile_s") is not None else None
    return {**timed, "compile_s_from": source, "warm_compile_s": None, "warmup": summary}


def _warm_up(
    problems: list[Problem],
    settings: EvalSettings,
    jobs: int,
    compile_mode: str,
    cache_dir: Path,
    warm_fn: WarmFn | None,
) -> list[dict[str, Any]]:
    """`warm_fn` over `problems`, `jobs` at once on the timing's own device (the compiled graph cached is
    the one its timing asks for), into `cache_dir`, each child with 1/`jobs` of the CPUs for inductor's
    compile workers; one result per problem, in order, a failure among them (never raised, but for an
    interrupt)."""
    from kb_agent.agent.checks import run_pooled

    if warm_fn is None:
        from kb_agent.evaluator.runner import warm_baseline as warm_fn
    on = replace(settings, device="cuda:0") if settings.device == "cuda" else settings
    threads = max(1, cpu_cores() // jobs)  # inductor's compile workers per child: the CPUs shared out

    def warm_one(p: Problem, s: EvalSettings) -> dict[str, Any]:
        try:
            return warm_fn(p, s, compile_mode, cache_dir=cache_dir, compile_threads=threads)
        except Exception as e:  # noqa: BLE001 - a warm-up that cannot run leaves its problem to compile cold
            log.warning("warm-up of %s failed: %s", p.key, e)
            return {"key": p.key, "status": "error", "message": f"the warm-up failed: {e}", "compile_s": None}

    found: dict[int, dict[str, Any]] = {}

    def finish(i: int, result: dict[str, Any]) -> None:
        found[i] = result
        log.info("warm-up of %s: %s, %s s", problems[i].key, result.get("status"), result.get("compile_s"))

    run_pooled(problems, on, jobs, warm_one, finish)
    return [found[i] for i in range(len(problems))]


__all__ = [
    "STORED_STATUSES",
    "baseline_settings",
    "local_gpu_name",
    "local_torch_version",
    "run_baselines",
]
