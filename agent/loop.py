"""The agent loop: problem -> model -> code -> evaluator -> feedback -> model ..., every turn stored.

`solve(problems, config, model, evaluator, store)` creates a run with one trajectory per (problem,
sample), then runs each trajectory for up to `config.turns` turns. A turn, top to bottom:

    start the turn in the store (the messages about to be sent)
    ask the model                        -> the raw reply is stored the moment it arrives
    extract the candidate (`ModelNew`)   -> no code: "no_code" and a feedback asking for a code block
    evaluate it                          -> an `EvalResult`
    store the evaluation and the feedback rendered from it
    append the reply and the feedback to the conversation

Every trajectory ends with a named outcome, written in a `finally`: `turn_budget` (all turns done),
`token_budget`, `cost_budget`, `model_error` (the provider refused the request: not retried, final),
`model_unavailable` (a transient failure, such as a rate limit, a 5xx, a timeout or a lost connection,
outlasted the retries: `resume` continues it), `interrupted` (Ctrl-C), or `error` (a bug: the exception
is re-raised). The run ends `finished`, `finished_with_errors` (some trajectory ended in a model error),
`incomplete` (some trajectory was left for `resume`), `interrupted` or `failed`.

When the model is down (its endpoint failed for every call: `agent.llm.EndpointDown`, or a transient
failure before the run had one reply), the run stops asking it: the trajectory that met it ends
`model_unavailable`, the others end so before their next model call (an evaluation in flight finishes
and is stored first), those not started are left without an outcome, and the run ends `incomplete` at
once instead of every trajectory spending its own retries on the same dead server. `TrajectoryEnd.reason`
says why.

Concurrency (`jobs` above 1): that many trajectories are in flight at once, each on a thread of its own
(model calls and evaluation children release the GIL); the evaluator bounds how many evaluations run at
once (`evaluator.pool.EvalPool`: one per GPU slot), and every store call goes through one lock
(`agent.store.SharedStore`). On Ctrl-C the evaluations in flight are killed and their results dropped
(the replies stay stored, so `resume` evaluates them without asking again); trajectories still waiting
for the model are left without an outcome, which `resume` continues too.

`resume(run_ref, model, evaluator, store)` continues a run that was stopped: a turn whose reply is
stored but not evaluated is evaluated without asking the model again; a turn cut off before the reply
arrived is asked again; finished trajectories are left alone.

Search strategies (`SolveConfig.strategy`: best-of-n, beam, tree) are units beside this loop, in
`agent.strategies`: `run_trajectory` runs one of them instead of the linear `_turns` below, with the same
endings, store and resume contract. A fork's trajectory (`SolveConfig.forked_from`) starts with the
source's turns 1..K-1 copied into the store (`agent.fork`), which the loop then treats as answered.

The model (an `agent.llm.LLM`), the evaluator and the store are passed in; the fakes
(`agent.llm.ScriptedModel`, `evaluator.fake.ScriptedEvaluator`) make a dry run. `agent.job` builds them
from configs (the stored ones, to resume) for the CLI and for Python callers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kb_agent.agent.extract import extract_code
from kb_agent.agent.feedback import feedback_for, initial_messages, needs_ncu, parse_recipe
from kb_agent.agent.llm import LLM, EndpointDown, LLMError, LLMReply
from kb_agent.agent.store import SharedStore, Store, StoreError, running_elsewhere
from kb_agent.evaluator import Evaluator
from kb_agent.evaluator.result import EvalResult
from kb_agent.evaluator.settings import EvalSettings, StageLimits
from kb_agent.problems import Problem

log = logging.getLogger(__name__)

CONTEXTS = ("full", "last", "summary")
STRATEGIES = ("linear", "best-of-n", "beam", "tree")
"""`linear` is this module's loop; the others live in `agent.strategies`, beside it."""
BACKENDS = ("cuda", "triton")


@dataclass
class SolveConfig:
    """How to run the loop. Stored with the run (as JSON), so `resume` runs it the same way."""

    turns: int = 5
    """K: most turns (model calls) per trajectory."""
    context: str = "full"
    """What each call sees: "full" (the whole conversation so far), "last" (the system and task
    prompts plus only the previous reply and its feedback) or "summary" (the whole conversation with
    the reasoning of every reply but the previous one dropped: each keeps its code block; every
    feedback stays, as the Kevin paper did). The model layer then trims whatever would still overflow
    the model's window (`agent.llm.fit_messages`)."""
    samples: int = 1
    """Independent trajectories per problem (use a temperature above 0 for them to differ)."""
    backend: str = "cuda"
    """"cuda" (load_inline) or "triton": which task prompt and worked example the model gets."""
    precision: str = "fp32"
    """"fp32", "fp16" or "bf16": quoted in the task prompt with its tolerance. Evaluate with the same."""
    device: str = "cuda"
    """Where candidates are evaluated: "cuda" or "cpu" (Triton under the interpreter, for dry runs)."""
    strict: bool = True
    """Evaluate in strict mode (reward hacks are `rejected`); False scores by KernelBench's rules alone."""
    sandbox: bool = True
    """In strict mode, confine each evaluation with Landlock where the kernel has it (`EvalSettings.sandbox`)."""
    retime_best: bool = True
    """When a trajectory ends, re-time its best correct turn in a fresh process (against the winner's curse:
    the best of several noisy timings is biased upwards); fast_p then uses the re-timed speedup."""
    reuse_results: bool = True
    """A turn whose code equals an earlier turn's of the run (same problem and settings) gets that turn's
    verdict and figures again, marked `EvalResult.reused`, instead of a second evaluation
    (`EvalPool(reuse_results=True)`; a timeout or runtime error is evaluated again)."""
    stage_limits: str | None = None
    """Per-stage wall-clock limits of each evaluation, e.g. "build=600" (`StageLimits.parse`); None: defaults."""
    gpu_name: str | None = None
    """The GPU named in the task prompt; None detects it (torch.cuda) when the run starts."""
    arch: str | None = None
    """Its compute capability ("9.0"); None detects it with `gpu_name`."""
    token_budget: int | None = None
    """Most tokens (prompt + completion, summed over turns) one trajectory may use; checked before each
    model call, so the last call may go over it. None: no limit."""
    cost_budget_usd: float | None = None
    """Most US dollars the whole run may spend on model calls; checked before each call. Calls whose
    cost litellm cannot price count as 0. None: no limit."""
    run_name: str | None = None
    """A readable, unique name for the run; None lets the store make one from the model and the time."""
    feedback: str = "standard"
    """The feedback recipe: "minimal", "standard", "full" or a comma list of components
    (`agent.feedback.parse_recipe`), so an ablation of the feedback is one setting."""
    strategy: str = "linear"
    """How a trajectory searches (STRATEGIES): "linear" (one chain of `turns` turns), "best-of-n" (`turns`
    rounds of `n` completions), "beam" (`turns` rounds of `width` x `branch`) or "tree" (`turns` steps)."""
    n: int = 4
    """best-of-n: completions per turn."""
    width: int = 2
    """beam: the kernels kept after each round."""
    branch: int = 2
    """beam: children of each kept kernel per round."""
    seed: int = 0
    """tree: seeds the draw of the kernel each step refines (with the problem and the sample)."""
    forked_from: dict[str, Any] | None = None
    """A fork's source (`agent.fork`): {"run": its id, "name", "turn": K, "feedback": its recipe}; each
    trajectory starts as a copy of the source's turns 1..K-1. None: not a fork."""

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise ValueError(f"turns must be 1 or more, got {self.turns}")
        if self.samples < 1:
            raise ValueError(f"samples must be 1 or more, got {self.samples}")
        if self.context not in CONTEXTS:
            raise ValueError(f"unknown context {self.context!r}; choose one of {', '.join(CONTEXTS)}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; choose one of {', '.join(STRATEGIES)}")
        for name in ("n", "width", "branch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be 1 or more, got {getattr(self, name)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        self.eval_settings()  # precision, device and stage limits: ValueError now, not at the first turn
        parse_recipe(self.feedback)

    def model_calls(self) -> int:
        """The most model calls one trajectory makes under this strategy (`turns` for linear and tree)."""
        per_turn = {"best-of-n": self.n, "beam": self.width * self.branch}.get(self.strategy, 1)
        return self.turns * per_turn

    def eval_settings(self) -> EvalSettings:
        """The evaluator settings this config implies (backend, device, precision, strict, sandbox,
        stage limits; Nsight Compute's pass when the feedback recipe shows it, `needs_ncu`; KernelBench's
        defaults for the rest). Raises ValueError for a bad value."""
        try:
            limits = StageLimits.parse(self.stage_limits) if self.stage_limits else StageLimits()
        except ValueError as e:
            raise ValueError(f"stage limits: {e}") from None
        return EvalSettings(backend=self.backend, device=self.device, precision=self.precision,
                            strict=self.strict, sandbox=self.sandbox, limits=limits,
                            ncu=needs_ncu(self.feedback))  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SolveConfig:
        """Rebuild from a stored dict, ignoring keys this version does not know."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class TurnEvent:
    """What `on_turn` receives after each stored turn (for progress display)."""

    run_id: str
    trajectory_id: int
    problem: str  # the problem key, "2/40"
    sample: int
    idx: int  # 1-based turn index
    status: str  # an evaluator status, or "no_code"
    speedup: float | None  # reference time / candidate time, when correct and timed
    tokens_in: int | None
    tokens_out: int | None
    cost_usd: float | None
    result: EvalResult | None = field(default=None, repr=False)


@dataclass
class TrajectoryEnd:
    """What `on_trajectory` receives when a trajectory ends, whatever its outcome (for progress display)."""

    run_id: str
    trajectory_id: int
    problem: str  # the problem key, "2/40"
    sample: int
    outcome: str  # one of agent.store.OUTCOMES
    reason: str | None = None  # model_unavailable because the run stopped asking a model that is down: why
    # the best correct turn's speedup re-timed in a fresh process (fast_p's)
    retimed_speedup: float | None = None


OnTurn = Callable[[TurnEvent], None]
OnTrajectory = Callable[[TrajectoryEnd], None]
OnStart = Callable[[int, int], None]
"""Called once before the first turn with the number of trajectories about to run and the turns (K) of
each, for a progress bar."""


def solve(
    problems: Iterable[Problem],
    config: SolveConfig,
    model: LLM,
    evaluator: Evaluator,
    store: Store,
    on_turn: OnTurn | None = None,
    on_start: OnStart | None = None,
    *,
    jobs: int = 1,
    on_trajectory: OnTrajectory | None = None,
) -> str:
    """Run the loop over `problems` and return the run id.

    All trajectories are created first (so a stopped run can be resumed in full), then run in order,
    `jobs` at once (1: one after another, in this thread). The run ends `finished`,
    `finished_with_errors`, `incomplete` (see the module docstring), `interrupted` (KeyboardInterrupt,
    re-raised) or `failed` (any other exception, re-raised); model errors and budgets end a trajectory,
    not the run. Raises ValueError for `jobs` below 1.
    """
    _check_jobs(jobs)
    problems = list(problems)
    store = SharedStore(store)
    if not (config.gpu_name and config.arch):
        config = dataclasses.replace(config, **_detect_target(config))
    run_config = {**dataclasses.asdict(config), "llm": _llm_settings(model)}
    run_id = store.create_run(config.run_name, run_config, model.name, config.backend, config.precision)
    pairs = lambda: itertools.product(problems, range(config.samples))  # noqa: E731 (lazy: --samples 10**9)
    try:
        ids = store.create_trajectories(run_id, pairs())
    except BaseException:  # stopped before the first trajectory was stored: no run either
        store.discard_run(run_id)
        raise
    todo = [(i, p, s) for i, (p, s) in zip(ids, pairs(), strict=True)]
    log.info("run %s: %d problems x %d samples with %s", run_id, len(problems), config.samples, model.name)
    _run(_Run(run_id, config, model, evaluator, store, on_turn, on_start, on_trajectory), todo, jobs)
    return run_id


def resume(
    run_ref: str,
    model: LLM,
    evaluator: Evaluator,
    store: Store,
    on_turn: OnTurn | None = None,
    on_start: OnStart | None = None,
    *,
    retry_model_errors: bool = False,
    jobs: int = 1,
    on_trajectory: OnTrajectory | None = None,
) -> str:
    """Continue run `run_ref` (id or name) where it stopped, `jobs` trajectories at once; return the run id.

    Runs the trajectories without an outcome, stopped by an interrupt or left by an unavailable model
    (and, with `retry_model_errors`, those that ended in a model error), with the run's stored config.
    Never asks the model again for a reply already stored. Raises StoreError for an unknown run, or one
    still running in another live process on this machine; ValueError for `jobs` below 1.
    """
    _check_jobs(jobs)
    store = SharedStore(store)
    run = store.get_run(run_ref)
    if owner := running_elsewhere(run):
        raise StoreError(f"run {run['name']} is still running (process {owner}); stop it before resuming it")
    config = SolveConfig.from_dict(run["config"] or {})
    todo = {t["id"]: t for t in store.unfinished_trajectories(run["id"])}
    # trajectories ended by a failure of the harness or the model connection are continued too
    retry = {"error", "model_unavailable", *(["model_error"] if retry_model_errors else [])}
    todo.update({t["id"]: t for t in store.trajectories(run["id"]) if t["outcome"] in retry})
    items = [
        (t["id"], store.problem_of(t), t["sample"]) for t in sorted(todo.values(), key=lambda t: t["id"])
    ]
    log.info("run %s: resuming %d trajectories", run["id"], len(items))
    ctx = _Run(run["id"], config, model, evaluator, store, on_turn, on_start, on_trajectory)
    ctx.cost_usd = sum(t["cost_usd"] or 0.0 for t in store.turn_summaries(run["id"]))
    ctx.hardware_recorded = bool(run.get("gpu"))
    _remember_results(ctx)
    store.set_run_status(run["id"], "running")
    _run(ctx, items, jobs)
    return run["id"]


def _remember_results(ctx: _Run) -> None:
    """Give the evaluator's pool (`EvalPool.remember`, where it has one) the results this run stored
    before it stopped, so a resumed run reuses them for repeated code as the run would have without the
    stop. A fork's copied turns (evaluated by another run) and reused copies are left out."""
    remember = getattr(ctx.evaluator, "remember", None)
    if remember is None or not getattr(ctx.evaluator, "reuse_results", False):
        return
    for traj in ctx.store.trajectories(ctx.run_id):
        problem = ctx.store.problem_of(traj)
        for t in ctx.store.turns(traj["id"]):
            if t["code"] is not None and t["eval_json"] and t.get("copied_from") is None:
                remember(problem, t["code"], EvalResult.from_dict(t["eval_json"]))


class ModelUnavailable(LLMError):
    """The model refused a request before it had given a single reply in this run (a bad key, an
    invalid request): the run stops (status `failed`) instead of failing every remaining trajectory.
    `outcome` is the failed trajectory's, `model_error`; a transient failure there (`model_unavailable`,
    raised so by a strategy) stops the run as a model that is down does, `incomplete`."""

    def __init__(self, message: str, *, outcome: str = "model_error"):
        super().__init__(message)
        self.outcome = outcome


class _Stopped(Exception):
    """The run is stopping (an interrupt, or a failure on another thread): this trajectory ends
    `interrupted` before its next model call, or drops an evaluation that was killed."""


def _check_jobs(jobs: int) -> None:
    if jobs < 1:
        raise ValueError(f"jobs must be 1 or more, got {jobs}")


@dataclass
class _Run:
    """What the trajectories of one run share: its settings, the seams, and the money spent so far."""

    run_id: str
    config: SolveConfig
    model: LLM
    evaluator: Evaluator
    store: Store
    on_turn: OnTurn | None
    on_start: OnStart | None = None
    on_trajectory: OnTrajectory | None = None
    cost_usd: float = 0.0
    hardware_recorded: bool = False
    replies: int = 0  # model replies received in this session of the run
    down: str | None = None  # why the run stopped asking the model (`_model_down`), once it did
    lock: threading.RLock = field(default_factory=threading.RLock)  # guards the counters and on_turn
    stop: threading.Event = field(default_factory=threading.Event)  # no trajectory asks the model again
    abort: threading.Event = field(default_factory=threading.Event)  # evaluations in flight were killed
    evaluating: int = 0  # trajectories inside an evaluation now


Todo = Sequence[tuple[int, Problem, int]]  # (trajectory id, problem, sample)


def _run(ctx: _Run, todo: Todo, jobs: int = 1) -> None:
    status = "failed"
    try:
        if ctx.on_start is not None:
            ctx.on_start(len(todo), ctx.config.model_calls())
        if jobs == 1 or len(todo) <= 1:
            for traj_id, problem, sample in todo:
                if ctx.stop.is_set():  # the model is down: the rest stay without an outcome, resumable
                    break
                run_trajectory(ctx, traj_id, problem, sample)
        else:
            _run_concurrently(ctx, todo, jobs)
        status = _ending(ctx)
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        ctx.store.set_run_status(ctx.run_id, status)
        log.info("run %s: %s", ctx.run_id, status)


def _run_concurrently(ctx: _Run, todo: Todo, jobs: int) -> None:
    """`todo` on `jobs` daemon threads (daemons: a thread stuck in a model call never holds up the exit).
    The first exception of a thread, or the model found down, stops the others before their next model
    call; the exception is re-raised here once the evaluations in flight are done (and the threads that
    end within seconds have ended); an interrupt here kills those evaluations first."""
    queue = list(reversed(todo))
    errors: list[BaseException] = []

    def worker() -> None:
        while not ctx.stop.is_set():
            with ctx.lock:
                if not queue:
                    return
                item = queue.pop()
            try:
                run_trajectory(ctx, *item)
            except BaseException as e:  # a bug, or the model never answered: stop the others
                with ctx.lock:
                    errors.append(e)
                ctx.stop.set()
                return

    threads = [threading.Thread(target=worker, name=f"trajectory-{i}", daemon=True)
               for i in range(min(jobs, len(todo)))]  # fmt: skip
    for t in threads:
        t.start()
    try:
        while not ctx.stop.is_set() and any(t.is_alive() for t in threads):
            time.sleep(0.05)
    except BaseException:  # Ctrl-C or SIGTERM, raised in this (the main) thread
        ctx.stop.set()
        ctx.abort.set()
        _drain(ctx, threads, kill=True)
        raise
    _drain(ctx, threads, kill=False)
    deadline = time.monotonic() + 5.0  # calls cut short by the breaker end now; a hung request is left
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if errors:
        raise errors[0]


def _drain(ctx: _Run, threads: list[threading.Thread], *, kill: bool, seconds: float = 30.0) -> None:
    """Wait (at most `seconds`) until no thread is inside an evaluation; with `kill`, kill the evaluation
    children meanwhile (the evaluator's `kill_running` where it has one: a Ray pool cancels its tasks).
    Threads waiting for the model are not waited for: their trajectories have no outcome, so `resume`
    continues them."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if kill:
            from kb_agent.evaluator.runner import kill_live_children

            getattr(ctx.evaluator, "kill_running", kill_live_children)()
        with ctx.lock:
            busy = ctx.evaluating
        if not busy or not any(t.is_alive() for t in threads):
            return
        time.sleep(0.05)


def _ending(ctx: _Run) -> str:
    """The status of a run whose trajectories all ran: `incomplete` when one is left to resume (no
    outcome, interrupted, or the model unavailable), `finished_with_errors` when one ended in a model
    error, else `finished`."""
    outcomes = {t["outcome"] for t in ctx.store.trajectories(ctx.run_id)}
    if outcomes & {None, "interrupted", "model_unavailable"}:
        return "incomplete"
    if outcomes & {"model_error", "error"}:
        return "finished_with_errors"
    return "finished"


@contextlib.contextmanager
def _evaluating(ctx: _Run):
    """Count this thread as inside an evaluation (what an interrupt waits for), and drop a result whose
    child an interrupt killed (`_Stopped`: the reply stays stored, `resume` evaluates it again)."""
    with ctx.lock:
        ctx.evaluating += 1
    try:
        yield
    finally:
        with ctx.lock:
            ctx.evaluating -= 1
    if ctx.abort.is_set():
        raise _Stopped()


def run_trajectory(ctx: _Run, traj_id: int, problem: Problem, sample: int) -> str:
    """Run (or continue) one trajectory and return its outcome, which is stored whatever happens."""
    outcome = "error"
    try:
        if ctx.config.forked_from:
            from kb_agent.agent.fork import copy_prefix

            copy_prefix(ctx.store, ctx.config, traj_id, problem, sample)
        outcome = _strategy(ctx.config.strategy)(ctx, traj_id, problem, sample)
        if outcome == "model_unavailable" and getattr(ctx.model, "down", None) is not None:
            _model_down(ctx, ctx.model.down)  # a strategy's call met the client's open breaker
        _retime_best(ctx, traj_id, problem)
    except _Stopped:
        outcome = "model_unavailable" if ctx.down else "interrupted"
    except KeyboardInterrupt:
        outcome = "interrupted"
        raise
    except ModelUnavailable as e:
        outcome = e.outcome
        if outcome != "model_unavailable":
            raise
        _model_down(ctx, e)
    finally:
        ctx.store.finish_trajectory(traj_id, outcome)
        log.info("%s sample %d: %s", problem.key, sample, outcome)
        if ctx.on_trajectory is not None:
            reason = ctx.down if outcome == "model_unavailable" else None
            retimed = [t["retimed_speedup"] for t in ctx.store.turns(traj_id)
                       if t.get("retimed_status") == "correct" and t.get("retimed_speedup") is not None]  # fmt: skip
            end = TrajectoryEnd(
                ctx.run_id, traj_id, problem.key, sample, outcome, reason, max(retimed, default=None)
            )
            with ctx.lock:
                ctx.on_trajectory(end)
    return outcome


def _model_down(ctx: _Run, error: BaseException) -> None:
    """Stop asking the model in this run (module docstring): `ctx.down` keeps the first reason."""
    with ctx.lock:
        first = ctx.down is None
        if first:
            ctx.down = str(error)
    if first:
        log.info("run %s: the model is down, so no trajectory asks it again: %s", ctx.run_id, error)
    ctx.stop.set()


def _strategy(name: str) -> Callable[[_Run, int, Problem, int], str]:
    """The function that runs one trajectory: `_turns` below for "linear", else `agent.strategies`
    (imported here, since those build on this module)."""
    if name == "linear":
        return _turns
    from kb_agent.agent.strategies import STRATEGIES as SEARCHES

    return SEARCHES[name]


def _retime_best(ctx: _Run, traj_id: int, problem: Problem) -> None:
    """Re-time the trajectory's best correct turn in a fresh process, once, and store the figure beside
    the first (`Store.record_retime`), also in the turns that reused its result. Evaluators without a
    `retime` method (fakes) are left alone."""
    retime = getattr(ctx.evaluator, "retime", None)
    if not ctx.config.retime_best or retime is None:
        return
    correct = [t for t in ctx.store.turns(traj_id) if t["status"] == "correct" and t["speedup"] is not None]
    if not correct:
        return
    best = max(correct, key=lambda t: t["speedup"])
    if best.get("retimed_status") is None:  # not re-timed before a stop
        with _evaluating(ctx):
            result = retime(problem, best["code"])
        # the turns that got the winner's result again (`EvalResult.reused`: the same code, the same
        # figure) are the same measurement, so they count with its re-timed figure too
        for t in correct:
            if t["code"] == best["code"] and t["speedup"] == best["speedup"]:
                ctx.store.record_retime(t["id"], result)


def _turns(ctx: _Run, traj_id: int, problem: Problem, sample: int) -> str:
    cfg, store = ctx.config, ctx.store
    stored = store.turns(traj_id)
    done = _evaluated_prefix(stored)
    history = _history(stored, done) or initial_messages(
        problem, cfg.backend, cfg.gpu_name or "an NVIDIA GPU", cfg.arch or "unknown", cfg.precision
    )
    tokens = sum((t["tokens_in"] or 0) + (t["tokens_out"] or 0) for t in stored)
    by_idx = {t["idx"]: t for t in stored}

    for idx in range(len(done) + 1, cfg.turns + 1):
        row = by_idx.get(idx)
        if row is not None and row["response"] is not None:  # answered before a stop: evaluate, don't re-ask
            turn_id, reply = row["id"], _reply_from_row(row)
        else:
            if ctx.stop.is_set():
                raise _Stopped()
            if cfg.token_budget is not None and tokens >= cfg.token_budget:
                return "token_budget"
            if cfg.cost_budget_usd is not None and ctx.cost_usd >= cfg.cost_budget_usd:
                return "cost_budget"
            sent = _context(history, cfg.context)
            turn_id = store.start_turn(traj_id, idx, sent)
            try:
                reply = ctx.model.complete(sent)
            except LLMError as e:
                outcome = "model_unavailable" if getattr(e, "transient", False) else "model_error"
                log.warning("%s sample %d turn %d: %s: %s", problem.key, sample, idx, outcome, e)
                store.record_evaluation(
                    turn_id, code=None, status="model_error", eval_result=None, feedback=None
                )
                if outcome == "model_unavailable" and (isinstance(e, EndpointDown) or ctx.replies == 0):
                    _model_down(ctx, e)  # every other call would meet it too: resumable, incomplete
                elif ctx.replies == 0:  # refused before one reply in this run: the run fails here
                    raise ModelUnavailable(f"no reply from the model, so the run stops: {e}") from e
                return outcome
            with ctx.lock:
                ctx.replies += 1
                ctx.cost_usd += reply.cost_usd or 0.0
            store.record_response(
                turn_id,
                reply.text,
                tokens_in=reply.tokens_in,
                tokens_out=reply.tokens_out,
                cost_usd=reply.cost_usd,
                latency_s=reply.latency_s,
                model_answered=reply.model,
                finish_reason=reply.finish_reason,
                extra=reply.extra,
            )
            tokens += (reply.tokens_in or 0) + (reply.tokens_out or 0)

        code = extract_code(reply.text)
        with _evaluating(ctx):
            result = ctx.evaluator.evaluate(problem, code) if code is not None else None
        feedback = feedback_for(result, no_code=result is None, truncated=reply.finish_reason == "length",
                                recipe=cfg.feedback, repeated=sent_before(result, code, history))  # fmt: skip
        status = str(result.status) if result is not None else "no_code"
        store.record_evaluation(
            turn_id,
            code=code,
            status=status,
            eval_result=result.to_dict() if result is not None else None,
            feedback=feedback,
        )
        _record_hardware(ctx, result)
        history += [{"role": "assistant", "content": reply.text}, {"role": "user", "content": feedback}]
        if ctx.on_turn is not None:
            speedup = result.speedup if result is not None and result.correct else None
            event = TurnEvent(run_id=ctx.run_id, trajectory_id=traj_id, problem=problem.key, sample=sample,
                              idx=idx, status=status, speedup=speedup, tokens_in=reply.tokens_in,
                              tokens_out=reply.tokens_out, cost_usd=reply.cost_usd, result=result)  # fmt: skip
            with ctx.lock:  # one callback at a time
                ctx.on_turn(event)
    return "turn_budget"


# -- helpers ----------------------------------------------------------------------------------------------
def sent_before(result: EvalResult | None, code: str | None, history: list[dict]) -> bool:
    """Whether `result` was reused (`EvalResult.reused`) for code one of `history`'s replies already held:
    the pool reuses results across trajectories, so a result can be reused for code this conversation
    never sent (another sample's, a sibling node's)."""
    if result is None or result.reused is None or code is None:
        return False
    return any(m["role"] == "assistant" and extract_code(m["content"]) == code for m in history)


def _evaluated_prefix(stored: list[dict]) -> list[dict]:
    """The leading turns that are finished (evaluated, or no code); a model-error turn is not."""
    done = []
    for t in stored:
        if t["status"] is None or t["status"] == "model_error" or t["response"] is None:
            break
        done.append(t)
    return done


def _history(stored: list[dict], done: list[dict]) -> list[dict]:
    """The whole conversation rebuilt from stored turns: the first turn's system and task messages
    (as sent then), then each finished turn's reply and feedback. Empty when nothing was stored."""
    if not stored:
        return []
    history = [dict(m) for m in stored[0]["messages"][:2]]
    for t in done:
        history += [
            {"role": "assistant", "content": t["response"]},
            {"role": "user", "content": t["feedback"] or ""},
        ]
    return history


def _context(history: list[dict], context: str) -> list[dict]:
    """What the model is sent: all of `history`; for "last" the first two messages and the last
    exchange; for "summary" all of it with each earlier reply (all but the last) cut to its code."""
    if context == "last" and len(history) > 4:
        return history[:2] + history[-2:]
    if context == "summary" and len(history) > 4:
        return history[:2] + [_code_only(m) for m in history[2:-2]] + history[-2:]
    return list(history)


SUMMARY_NO_CODE = "(an earlier reply without a code block; its text is left out)"


def _code_only(message: dict) -> dict:
    """An assistant message reduced to its candidate module in one python block; others unchanged."""
    if message["role"] != "assistant":
        return dict(message)
    code = extract_code(message["content"])
    return {"role": "assistant", "content": f"```python\n{code}\n```" if code else SUMMARY_NO_CODE}


def _reply_from_row(row: dict) -> LLMReply:
    return LLMReply(
        text=row["response"],
        tokens_in=row["tokens_in"],
        tokens_out=row["tokens_out"],
        cost_usd=row["cost_usd"],
        latency_s=row["latency_s"],
        model=row["model_answered"],
        finish_reason=row["finish_reason"],
        extra=row.get("llm_json") or {},
    )


def _record_hardware(ctx: _Run, result: EvalResult | None) -> None:
    if result is None or not result.hardware.gpu_name:
        return
    with ctx.lock:
        if not ctx.hardware_recorded:
            ctx.store.set_run_hardware(ctx.run_id, dataclasses.asdict(result.hardware))
            ctx.hardware_recorded = True


def _llm_settings(model: LLM) -> dict[str, Any]:
    """The model's settings for the run record, without its API key."""
    config = getattr(model, "config", None)
    settings = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else {}
    settings.pop("api_key", None)
    return {"name": model.name, "class": type(model).__name__, **settings}


def _detect_target(config: SolveConfig) -> dict[str, str]:
    """The GPU name and compute capability for the task prompt, from torch.cuda (imported here only)."""
    try:
        import torch

        if config.device.startswith("cuda") and torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return {
                "gpu_name": config.gpu_name or torch.cuda.get_device_name(),
                "arch": config.arch or f"{major}.{minor}",
            }
    except Exception as e:  # no torch, or a broken CUDA setup: the prompt says less
        log.warning("could not detect the GPU (%s); the task prompt will not name it", e)
    return {"gpu_name": config.gpu_name or "an NVIDIA GPU", "arch": config.arch or "unknown"}


__all__ = [
    "CONTEXTS",
    "OnStart",
    "OnTrajectory",
    "OnTurn",
    "STRATEGIES",
    "SolveConfig",
    "TrajectoryEnd",
    "TurnEvent",
    "resume",
    "run_trajectory",
    "solve",
]
