"""The main job from configs, as `kb-agent solve` runs it: build the model, the evaluator and the store
a run needs, then start the run or resume a stopped one.

    from kb_agent.agent.job import start, resume_run
    from kb_agent.agent.llm import LLMConfig
    from kb_agent.agent.loop import SolveConfig

    run_id = start("toy/relu", SolveConfig(turns=3, device="cpu", backend="triton"),
                   LLMConfig(model="scripted/demo"))
    resume_run(run_id)          # a stopped run, with the model and settings it stored
    fork(run_id, 3, feedback="full")   # turns 1-2 copied, turn 3 on with another recipe (agent.fork)

`agent.loop` takes the model, the evaluator and the store ready-made (tests pass fakes); this module
makes them from a `SolveConfig` and an `LLMConfig`, or from what a run stored. The evaluator is an
`evaluator.pool.EvalPool` (one slot per visible GPU, or per core on the CPU), or what a `pool` factory
makes (`evaluator.ray_executor`: Ray tasks), so `jobs` trajectories in flight share the slots; `jobs` None
picks `default_jobs`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from kb_agent.agent import loop
from kb_agent.agent.llm import LLMConfig, model_for
from kb_agent.agent.loop import OnStart, OnTrajectory, OnTurn, SolveConfig
from kb_agent.agent.store import Store
from kb_agent.evaluator import Evaluator
from kb_agent.evaluator.pool import EvalPool
from kb_agent.evaluator.settings import EvalSettings
from kb_agent.problems import Problem, resolve
from kb_agent.problems.errors import UsageError

log = logging.getLogger(__name__)

StoreRef = Store | str | Path | None
"""A `Store`, a path to its SQLite file, or None for the default (`$KB_DB`, else runs/kb.sqlite)."""
PoolFactory = Callable[[EvalSettings], Evaluator]
"""Makes a run's evaluation pool from its settings: `evaluator.ray_executor.RayExecutor.pool` (Ray tasks,
which needs GPUs in the cluster, not here); None: a local `EvalPool` (a CUDA device needs CUDA here)."""


def start(
    problems: str | Iterable[Problem],
    config: SolveConfig,
    llm: LLMConfig,
    *,
    dataset: str | None = None,
    store: StoreRef = None,
    on_turn: OnTurn | None = None,
    on_start: OnStart | None = None,
    evaluator: Evaluator | None = None,
    jobs: int | None = None,
    on_trajectory: OnTrajectory | None = None,
    on_evaluator: Callable[[Evaluator], None] | None = None,
    pool: PoolFactory | None = None,
) -> str:
    """Run the main job on `problems` (a spec such as "2/40", "1/1-10" or "toy", or `Problem`s) and
    return the run id. `dataset` is a local KernelBench folder for the spec (None: `$KB_DATASET`, else
    the Hub). `evaluator` None evaluates as `config` says, through an `EvalPool` of
    `config.eval_settings()`; tests pass a `ScriptedEvaluator`. `jobs`: trajectories in flight at once
    (None: `default_jobs`). `on_trajectory` hears of each trajectory's end, `on_evaluator` gets the
    evaluator before the run starts (a progress display shows its slots). `pool` makes the pool when
    `evaluator` is None (`PoolFactory`; None: a local `EvalPool`).

    Raises (all `KBAgentError`s, before the run is created): ProblemError for a bad spec, UsageError
    for a CUDA device on a machine without one, LLMError for an unknown model string (scripted or
    litellm), a missing API key, or an `api_base` where nothing answers (in a few seconds).
    KeyboardInterrupt and model errors end the run as `agent.loop.solve` says.
    """
    todo = resolve(problems, dataset) if isinstance(problems, str) else list(problems)
    model, evaluator, jobs = _ready(
        llm, config, evaluator, jobs, lambda: len(todo) * config.samples, on_evaluator, pool
    )
    with _opened(store) as s:
        return loop.solve(todo, config, model, evaluator, s, on_turn=on_turn, on_start=on_start, jobs=jobs,
                          on_trajectory=on_trajectory)  # fmt: skip


def resume_run(
    run_ref: str,
    *,
    store: StoreRef = None,
    api_base: str | None = None,
    rpm: int | None = None,
    tpm: int | None = None,
    on_turn: OnTurn | None = None,
    on_start: OnStart | None = None,
    retry_model_errors: bool = False,
    evaluator: Evaluator | None = None,
    jobs: int | None = None,
    on_trajectory: OnTrajectory | None = None,
    on_evaluator: Callable[[Evaluator], None] | None = None,
    pool: PoolFactory | None = None,
) -> str:
    """Continue the stopped run `run_ref` (id or name) with the settings and the model it stored; return
    its id. See `agent.loop.resume` for what is run again and what is not.

    `api_base` points the run's model at another server (the same model, served elsewhere); each turn
    records the server that answered it (`llm_json.api_base`). `rpm` / `tpm` replace the run's client-side
    rate limits (`LLMConfig.rpm`, `.tpm`). Everything else a run measures is fixed when it starts.

    `evaluator`, `jobs` and `pool` as in `start`. Raises StoreError (unknown run, or one still running
    elsewhere), UsageError and LLMError as `start` does.
    """
    with _opened(store) as s:
        run = s.get_run(run_ref)
        config = SolveConfig.from_dict(run["config"] or {})
        llm = stored_llm_config(run)
        if api_base:
            log.info(
                "run %s: model %s now served at %s (was %s)", run["id"], llm.model, api_base, llm.api_base
            )
            llm.api_base = api_base
        llm.rpm, llm.tpm = rpm or llm.rpm, tpm or llm.tpm
        left = lambda: sum(  # noqa: E731 - counted only when `jobs` is not given
            t["outcome"] in (None, "interrupted", "model_unavailable") for t in s.trajectories(run["id"])
        )
        model, evaluator, jobs = _ready(llm, config, evaluator, jobs, left, on_evaluator, pool)
        return loop.resume(
            run["id"],
            model,
            evaluator,
            s,
            on_turn,
            on_start,
            retry_model_errors=retry_model_errors,
            jobs=jobs,
            on_trajectory=on_trajectory,
        )


def fork(
    run_ref: str,
    turn: int,
    *,
    model: str | None = None,
    feedback: str | None = None,
    temperature: float | None = None,
    context: str | None = None,
    run_name: str | None = None,
    store: StoreRef = None,
    api_base: str | None = None,
    on_turn: OnTurn | None = None,
    on_start: OnStart | None = None,
    evaluator: Evaluator | None = None,
    jobs: int | None = None,
    on_trajectory: OnTrajectory | None = None,
    on_evaluator: Callable[[Evaluator], None] | None = None,
    pool: PoolFactory | None = None,
) -> str:
    """Fork run `run_ref` at turn `turn` (K): a new run on the same problems and samples whose
    trajectories copy turns 1..K-1 exactly (no model call, no evaluation; `agent.fork`) and continue
    from turn K with the source's settings but `model`, `feedback`, `temperature` and `context` where
    given; return the new run's id. `solve --resume` continues it like any run.

    Raises UsageError: the source is not a linear run, K is outside 1..its turns, or a setting is bad;
    StoreError: unknown run, or `run_name` taken; LLMError as `start` does.
    """
    import dataclasses

    with _opened(store) as s:
        src = s.get_run(run_ref)
        config = SolveConfig.from_dict(src["config"] or {})
        if config.strategy != "linear":
            raise UsageError(
                f"run {src['name']} searched a tree ({config.strategy}); only a linear run can be forked"
            )
        if not 1 <= turn <= config.turns:
            raise UsageError(f"--turn must be 1..{config.turns} (run {src['name']} has {config.turns} turns)")
        _check_prefix_stored(s, src, turn)
        try:
            config = dataclasses.replace(
                config, feedback=feedback or config.feedback, context=context or config.context,
                run_name=run_name, forked_from={"run": src["id"], "name": src["name"], "turn": turn,
                                                "feedback": config.feedback},
            )  # fmt: skip
            llm = stored_llm_config(src)
            llm.model, llm.api_base = model or llm.model, api_base or llm.api_base
            if temperature is not None:
                llm.temperature = temperature
                llm.__post_init__()
        except ValueError as e:
            raise UsageError(str(e)) from None
        problems = list({t["problem_key"]: s.problem_of(t) for t in s.trajectories(src["id"])}.values())
        count = lambda: len(problems) * config.samples  # noqa: E731
        llm_model, evaluator, jobs = _ready(llm, config, evaluator, jobs, count, on_evaluator, pool)
        return loop.solve(problems, config, llm_model, evaluator, s, on_turn=on_turn, on_start=on_start,
                          jobs=jobs, on_trajectory=on_trajectory)  # fmt: skip


def _check_prefix_stored(s: Any, src: dict, turn: int) -> None:
    """Refuse to fork `src` at `turn` (K) while one of its trajectories that `--resume` would continue
    lacks an evaluated turn K-1 (a run still going, or killed, interrupted or left by the model before
    it): the fork would ask the new settings for those turns, and its prefix would not be the source's."""
    from kb_agent.agent.store import StoreError, running_elsewhere

    if owner := running_elsewhere(src):
        raise StoreError(f"run {src['name']} is still running (process {owner}); fork it once it has stopped")
    resumable = {t["id"]: t for t in s.unfinished_trajectories(src["id"])}
    resumable.update(
        {t["id"]: t for t in s.trajectories(src["id"]) if t["outcome"] in ("error", "model_unavailable")}
    )
    short = [f"{t['problem_key']}#{t['sample']}" for t in resumable.values()
             if len(loop._evaluated_prefix(s.turns(t["id"]))) < turn - 1]  # fmt: skip
    if short:
        shown = ", ".join(short[:5]) + (", ..." if len(short) > 5 else "")
        raise UsageError(
            f"run {src['name']} stopped before turn {turn - 1} in {len(short)} trajectories ({shown}), so "
            f"there is no prefix to copy; `kb-agent solve --resume {src['name']}` first, or fork at an "
            "earlier --turn"
        )


def _ready(llm: LLMConfig, config: SolveConfig, evaluator: Evaluator | None, jobs: int | None,
           trajectories: Callable[[], int], on_evaluator: Callable[[Evaluator], None] | None,
           pool: PoolFactory | None = None):  # fmt: skip
    """What every way of running a run sets up first: the model (checked by `_preflight`), the evaluator
    (when none is given, `pool` or an `EvalPool` of `config`'s settings), the trajectories in flight
    (`default_jobs` over `trajectories()` when `jobs` is not given), and `on_evaluator` told. Returns (model, evaluator, jobs)."""
    model = model_for(llm)
    _preflight(model)
    if evaluator is None:
        evaluator = (pool(config.eval_settings()) if pool is not None
                     else EvalPool(evaluator_settings(config), reuse_results=config.reuse_results))  # fmt: skip
        if isinstance(evaluator, EvalPool):  # a factory's pool (`--executor ray`) reuses as asked too
            evaluator.reuse_results = config.reuse_results
    jobs = jobs or default_jobs(trajectories(), evaluator)
    if on_evaluator is not None:
        on_evaluator(evaluator)
    return model, evaluator, jobs


def _preflight(model: Any) -> None:
    """The model's own check before a run (`LiteLLMModel.preflight`: is `api_base` answering?)."""
    check = getattr(model, "preflight", None)
    if callable(check):
        check()


def default_jobs(trajectories: int, evaluator: Evaluator) -> int:
    """Trajectories in flight when `--jobs` is not given: twice the evaluator's slots (`EvalPool.size`:
    the visible GPUs, or the cores with device cpu; 1 for an evaluator without slots), at most
    `trajectories`, at least 1. Twice: while half the trajectories wait for the model, the other half
    keep every slot busy, which holds as long as a model reply takes no longer than an evaluation;
    with slower models raise it (`--jobs`)."""
    return max(1, min(trajectories, 2 * int(getattr(evaluator, "size", 1))))


def run_status(run_id: str, *, store: StoreRef = None) -> str:
    """The stored status of run `run_id` (`agent.store.RUN_STATUSES`)."""
    with _opened(store) as s:
        return s.get_run(run_id)["status"]


def stored_llm_config(run: dict[str, Any]) -> LLMConfig:
    """The `LLMConfig` a run started with (its stored `config["llm"]`, keys this version does not know
    dropped); the API key was never stored, so it comes from the environment as at the start."""
    llm = dict((run.get("config") or {}).get("llm") or {})
    llm.setdefault("model", llm.get("name") or run.get("model") or "")
    return LLMConfig(**{k: v for k, v in llm.items() if k in LLMConfig.__dataclass_fields__})


def evaluator_settings(config: SolveConfig) -> EvalSettings:
    """`config.eval_settings()`, refused (UsageError) for a CUDA device on a machine without CUDA."""
    settings = config.eval_settings()
    if settings.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError("no CUDA device here; run on a GPU machine, or use the CPU (--device cpu)")
    return settings


@contextlib.contextmanager
def _opened(store: StoreRef) -> Iterator[Store]:
    """The Store given, or one opened here (and closed on the way out) from a path or None."""
    if isinstance(store, Store):
        yield store
        return
    opened = Store(store)
    try:
        yield opened
    finally:
        opened.close()


__all__ = [
    "PoolFactory",
    "StoreRef",
    "default_jobs",
    "evaluator_settings",
    "fork",
    "resume_run",
    "run_status",
    "start",
    "stored_llm_config",
]
