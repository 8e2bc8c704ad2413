"""`kb-agent baseline` as a library call: time each problem's reference eager and under `torch.compile` on
the local device with the evaluator's protocol, cached in the store.

`run_baselines(problems, settings, store=store)` looks each problem up in the baseline cache under
(reference SHA-256, GPU name, precision, torch version, compile mode) (`agent.store.baselines`), and
measures the ones not there with `evaluator.runner.time_baseline` (one isolated child per problem, one at
a time: a timing shares its device with nothing), storing what it measured. A measurement that failed
(`error`, `timeout`) is returned but not stored, so the next call tries again; one where only
torch.compile failed (`compile_failed`) is stored with its eager figure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from kb_agent.agent.store.baselines import COMPILE_MODES, cached_baseline, record_baseline
from kb_agent.evaluator.settings import EvalSettings
from kb_agent.problems import Problem
from kb_agent.problems.errors import UsageError

log = logging.getLogger(__name__)

STORED_STATUSES = ("ok", "compile_failed")  # measurements that reached a figure

TimeFn = Callable[[Problem, EvalSettings, str], dict[str, Any]]
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
    """The installed torch's version from its metadata (what the child reports as `torch`)."""
    try:
        return version("torch")
    except PackageNotFoundError:
        return None


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
    on_result: OnResult | None = None,
    time_fn: TimeFn | None = None,
) -> list[dict[str, Any]]:
    """The baseline of each of `problems`, from the cache or measured now, in the order of `problems`.

    Args:
        settings: device, precision, trials and stage limits (`baseline_settings` is applied).
        store: a `Store`; the cache is read from and written to it.
        compile_mode: `default` (inductor's default) or `max-autotune`.
        force: measure again even when the cache has a figure (the new one replaces it).
        on_result: called with (problem, result) as each result is known.
        time_fn: measures one problem; default `evaluator.runner.time_baseline`.

    Returns:
        One dict per problem: `time_baseline`'s fields (status, eager_ms, compile_ms in ms, compile_s,
        compile_error, message, ...) and `cached` (True when it came from the store).

    Raises:
        UsageError: an unknown compile mode.
    """
    if compile_mode not in COMPILE_MODES:
        raise UsageError(f"unknown compile mode {compile_mode!r}; choose one of {', '.join(COMPILE_MODES)}")
    if time_fn is None:
        from kb_agent.evaluator.runner import time_baseline as time_fn
    settings = baseline_settings(settings)
    gpu, torch_version = local_gpu_name(settings.device), local_torch_version()
    results = []
    for p in problems:
        hit = None
        if not force and torch_version is not None:
            hit = cached_baseline(store, p.code_sha256, gpu, settings.precision, torch_version, compile_mode)
        if hit is not None:
            result = {**hit["record"], "cached": True}
        else:
            result = {**time_fn(p, settings, compile_mode), "cached": False}
            if result["status"] in STORED_STATUSES:
                record_baseline(store, result)
            else:
                log.info("baseline of %s not stored: %s", p.key, result.get("message"))
        results.append(result)
        if on_result is not None:
            on_result(p, result)
    return results


__all__ = ["STORED_STATUSES", "baseline_settings", "local_gpu_name", "local_torch_version", "run_baselines"]
