"""The `kb-agent` command line. Thin: each command parses options and calls a library function.

Heavy imports (torch, triton, litellm) happen inside the commands that need them, so `--help` and the
`problems` commands answer quickly.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from kb_agent.agent import __version__
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="Agentic multi-turn kernel optimisation around KernelBench.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
problems_app = typer.Typer(help="List, show and check KernelBench problems.", no_args_is_help=True)
app.add_typer(problems_app, name="problems")

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

DatasetOpt = Annotated[
    str | None,
    typer.Option(
        "--dataset",
        envvar="KB_DATASET",
        help="Local KernelBench copy (level_N parquet files or a KernelBench checkout). Default: the Hub.",
    ),
]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, so it unwinds like Ctrl-C (exit status 143, not 130)."""


def _raise_terminated(*_) -> None:
    raise Terminated()


@contextlib.contextmanager
def _interruptible(hint: str = ""):
    """Run a command body so that Ctrl-C and a plain `kill` (SIGTERM, as `timeout` and job schedulers
    send) unwind it: evaluation children are killed, what is logged stays logged, and one line says
    so (exit 130, or 143 for SIGTERM) instead of an abrupt exit that leaves a child unwatched."""
    import signal
    import threading

    main_thread = threading.current_thread() is threading.main_thread()  # handlers live there only
    if main_thread:
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    except KeyboardInterrupt as e:
        terminated = isinstance(e, Terminated)
        err.print(("terminated" if terminated else "interrupted") + hint, highlight=False)
        raise typer.Exit(143 if terminated else 130) from None
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _kill_children_until_idle(pool, seconds: float = 10.0) -> None:
    """Kill the evaluation children of `pool`'s threads until its threads are done (a thread may be
    starting a child as we kill the others)."""
    import time

    from kb_agent.evaluator.runner import kill_live_children

    deadline = time.monotonic() + seconds
    while True:
        kill_live_children()
        if not any(t.is_alive() for t in getattr(pool, "_threads", ())) or time.monotonic() > deadline:
            return
        time.sleep(0.05)


LimitsOpt = Annotated[
    str | None,
    typer.Option(
        "--stage-limits",
        help="Per-stage limits in seconds, e.g. build=600,timing=120 (stages: start, build, correctness, timing).",
    ),
]


def _limits(text: str | None):
    from kb_agent.evaluator.settings import StageLimits

    try:
        return StageLimits.parse(text) if text else StageLimits()
    except ValueError as e:
        raise UsageError(f"--stage-limits: {e}") from None


DbOpt = Annotated[
    str | None,
    typer.Option("--db", envvar="KB_DB", help="Trajectory store (SQLite). Default: runs/kb.sqlite."),
]


class UsageError(Exception):
    """Bad input from the user; the CLI prints the message on one line and exits with code 2."""


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    raise typer.Exit(code)


def require_cuda(device: str, hint: str) -> None:
    """UsageError (one line) when `device` is a CUDA device and this machine has none; `hint` says what to do."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"no CUDA device here; {hint}")


def _expected_errors() -> tuple[type[Exception], ...]:
    from kb_agent.agent.report import ReportError
    from kb_agent.agent.store import StoreError
    from kb_agent.problems import ProblemError

    errors: tuple[type[Exception], ...] = (ProblemError, UsageError, StoreError, ReportError)
    if "kb_agent.agent.llm" in sys.modules:  # only commands that talk to a model import it
        errors += (sys.modules["kb_agent.agent.llm"].LLMError,)
    return errors


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"kb-agent {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    pass


@problems_app.command("list")
def problems_list(
    level: Annotated[str | None, typer.Option("--level", "-l", help="A level (1-4) or 'toy'.")] = None,
    dataset: DatasetOpt = None,
) -> None:
    """List problems as a table: level, id, name."""
    from kb_agent.problems import available_levels, resolve

    specs = [level] if level is not None else [*map(str, available_levels(dataset)), "toy"]
    table = Table("level", "id", "name")
    n = 0
    for spec in specs:
        for p in resolve(spec, dataset):
            table.add_row("toy" if p.level == 0 else str(p.level), str(p.problem_id), p.name)
            n += 1
    out.print(table)
    out.print(f"{n} problems", highlight=False)


@problems_app.command("show")
def problems_show(
    spec: Annotated[str, typer.Argument(help="One problem: 2/40, toy/relu or a path.")],
    dataset: DatasetOpt = None,
) -> None:
    """Print a problem's reference source (highlighted on a terminal, plain when piped)."""
    from kb_agent.problems import resolve_one

    p = resolve_one(spec, dataset)
    if out.is_terminal:
        from rich.syntax import Syntax

        out.rule(f"{p.key}  {p.name}")
        out.print(Syntax(p.code, "python", line_numbers=False))
    else:
        sys.stdout.write(p.code if p.code.endswith("\n") else p.code + "\n")


@problems_app.command("check")
def problems_check(
    spec: Annotated[
        str,
        typer.Argument(
            help="Problems to check: 2/66, a level, 1/1-10,95, 1/37,2/9-12, toy, a path or a folder."
        ),
    ],
    device: Annotated[str, typer.Option(help="cuda (default) or cpu.")] = "cuda",
    precision: Annotated[str, typer.Option(help="fp32, fp16 or bf16.")] = "fp32",
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object per problem.")] = False,
    jobs: Annotated[
        int, typer.Option(min=1, max=32, help="Problems checked at once, each in its own child.")
    ] = 1,
    stage_limits: LimitsOpt = None,
    db: DbOpt = None,
    dataset: DatasetOpt = None,
) -> None:
    """Flag degenerate references: nondeterministic, with NaN in their output, passed by a zero or
    constant output at the tolerance, or failing under the evaluator's input handling. Results are
    stored for `report`."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    from kb_agent.agent.store import Store
    from kb_agent.evaluator import EvalSettings
    from kb_agent.evaluator.runner import check_problem
    from kb_agent.problems import resolve

    try:
        settings = EvalSettings(device=device, precision=precision, limits=_limits(stage_limits))
    except ValueError as e:
        raise UsageError(str(e)) from None
    require_cuda(settings.device, "run on a GPU machine, or pass --device cpu")
    problems = resolve(spec, dataset)
    store = Store(db)
    table = Table("problem", "name", "status", "flags", "s")
    results: dict[str, dict] = {}

    def finish(p, c: dict) -> None:
        results[p.key] = c
        if c["status"] in ("ok", "flagged"):  # a check that could not run must not replace a finding
            store.record_problem_check(c)
        if json_out:
            sys.stdout.write(json.dumps(c) + "\n")
            sys.stdout.flush()

    oom = []  # out of memory beside other jobs: checked again alone at the end
    pool = ThreadPoolExecutor(max_workers=jobs)  # each check is its own child process
    with _interruptible("; the checks finished so far are stored"):
        try:
            for p, c in zip(problems, pool.map(lambda p: check_problem(p, settings), problems), strict=True):
                if jobs > 1 and c["status"] == "error" and c["message"].startswith("out of memory"):
                    oom.append(p)
                else:
                    finish(p, c)
            for p in oom:
                finish(p, check_problem(p, settings))
        except BaseException:  # Ctrl-C or SIGTERM: no check is left running, none queued starts
            pool.shutdown(wait=False, cancel_futures=True)
            _kill_children_until_idle(pool)
            raise
    pool.shutdown()
    counts: dict[str, int] = {}
    for p in problems:
        c = results[p.key]
        counts[c["status"]] = counts.get(c["status"], 0) + 1
        flags = ", ".join(c["flags"]) or ("-" if c["status"] in ("ok", "flagged") else c["message"][:120])
        if c.get("reference_fails"):
            flags += ": " + c["reference_fails"].splitlines()[0][:100]
        table.add_row(p.key, p.name, c["status"], flags, f"{c['seconds']:.1f}")
    if not json_out:
        out.print(table)
        noun = "problem" if len(problems) == 1 else "problems"
        out.print(f"{len(problems)} {noun}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))


# ---------------------------------------------------------------- the store: report, runs

runs_app = typer.Typer(
    help="List the runs in the trajectory store and show one turn by turn.", no_args_is_help=True
)
app.add_typer(runs_app, name="runs")


def _print_blocks(renderables: list, text: str) -> None:
    """Rich renderables on a terminal, the plain-text rendering when piped."""
    if out.is_terminal:
        for r in renderables:
            out.print(r)
    else:
        sys.stdout.write(text)


@app.command("report")
def report_cmd(
    runs: Annotated[
        list[str] | None, typer.Argument(help="Run ids or names. Default: the latest run.")
    ] = None,
    db: DbOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    by_turn: Annotated[
        bool, typer.Option("--by-turn", help="Add fast_p of the best turn up to k, per k.")
    ] = False,
) -> None:
    """Best-of-trajectory fast_p per run, with denominators, level and GPU."""
    import json

    from kb_agent.agent import report
    from kb_agent.agent.store import Store

    with Store(db, create=False) as store:
        rep = report.build_report(store, runs, by_turn=by_turn)
    if as_json:
        sys.stdout.write(json.dumps(rep, indent=2) + "\n")
    else:
        _print_blocks(report.report_renderables(rep), report.render_report_text(rep))


@runs_app.command("list")
def runs_list(db: DbOpt = None) -> None:
    """List the runs: id, name, created, model, problems, status (running, finished, interrupted,
    failed, or killed: its process on this machine is gone without a word; `solve --resume RUN`
    continues it)."""
    from kb_agent.agent import report
    from kb_agent.agent.store import Store

    with Store(db, create=False) as store:
        rows = report.list_runs(store)
    _print_blocks([report.runs_renderable(rows)], report.render_runs_text(rows))


@runs_app.command("show")
def runs_show(
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    problem: Annotated[
        str | None, typer.Option("--problem", "-p", help="Only this problem: 2/40, 2, toy/relu.")
    ] = None,
    sample: Annotated[int | None, typer.Option("--sample", help="Only this sample of each problem.")] = None,
    code: Annotated[int | None, typer.Option("--code", help="Print the code extracted at turn N.")] = None,
    db: DbOpt = None,
) -> None:
    """Show a run turn by turn (status, speedup, tokens, cost), or one turn's extracted code."""
    from kb_agent.agent import report
    from kb_agent.agent.store import Store

    with Store(db, create=False) as store:
        if code is not None:
            src = report.turn_code(store, run, code, problem, sample)
            sys.stdout.write(src if src.endswith("\n") else src + "\n")
            return
        shown = report.show_run(store, run, problem, sample)
    _print_blocks(report.show_renderables(shown), report.render_show_text(shown))


StrictOpt = Annotated[
    bool,
    typer.Option(
        "--strict/--no-strict",
        help="Strict checks against reward hacks (rejected status) beside KernelBench's rules.",
    ),
]
SandboxOpt = Annotated[
    bool,
    typer.Option(
        "--sandbox/--no-sandbox",
        help="In strict mode, confine the evaluation with Landlock where Linux has it (no writes outside its folders, no TCP).",
    ),
]


@app.command("eval")
def eval_cmd(
    candidate: Annotated[Path, typer.Argument(help="A Python module defining ModelNew.", show_default=False)],
    problem: Annotated[str, typer.Option("--problem", "-p", help="The reference: 2/40, toy/relu or a path.")],
    backend: Annotated[str, typer.Option(help="auto, cuda or triton.")] = "auto",
    device: Annotated[
        str, typer.Option(help="cuda (default) or cpu (Triton under the interpreter).")
    ] = "cuda",
    precision: Annotated[str, typer.Option(help="fp32, fp16 or bf16.")] = "fp32",
    baseline: Annotated[
        str | None, typer.Option(help="'compile': also time torch.compile of the reference.")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the EvalResult as one JSON object.")
    ] = False,
    strict: StrictOpt = True,
    sandbox: SandboxOpt = True,
    stage_limits: LimitsOpt = None,
    dataset: DatasetOpt = None,
) -> None:
    """Build, check and time one candidate against its reference in an isolated child process.

    The exit code is 0 whenever the evaluation ran, whatever its verdict; 2 for bad usage.
    """
    from kb_agent.problems import resolve_one

    if not candidate.is_file():
        raise UsageError(f"no such candidate file: {str(candidate)!r}")
    if baseline not in (None, "compile"):
        raise UsageError(f"unknown --baseline {baseline!r}; the only baseline is 'compile'")
    from kb_agent.evaluator import EvalSettings, evaluate

    try:
        settings = EvalSettings(backend=backend, device=device, precision=precision, strict=strict, sandbox=sandbox,
                                baseline_compile=baseline == "compile", limits=_limits(stage_limits))  # fmt: skip
    except ValueError as e:
        raise UsageError(str(e)) from None
    if settings.baseline_compile and settings.device == "cpu":
        raise UsageError("--baseline compile times torch.compile on the GPU; drop it with --device cpu")
    require_cuda(settings.device, "pass --device cpu (Triton candidates run under the interpreter)")
    try:
        source = candidate.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(
            f"{str(candidate)!r} is not UTF-8 text; save the candidate as a UTF-8 .py file"
        ) from None
    with _interruptible():
        result = evaluate(resolve_one(problem, dataset), source, settings)
    if json_out:
        sys.stdout.write(result.to_json() + "\n")
    else:
        from kb_agent.agent.render import eval_summary

        out.print(eval_summary(result))


@app.command("solve")
def solve_cmd(
    problem: Annotated[
        str | None,
        typer.Option("--problem", "-p", help="2/40, a level, 1/1-10,95, 1/37,2/9-12, toy/relu or a path."),
    ] = None,
    turns: Annotated[int, typer.Option(help="K: turns (model calls) per trajectory.")] = 5,
    model: Annotated[
        str | None,
        typer.Option(help="A litellm model string: openai/…, anthropic/…, ollama/…, hosted_vllm/…."),
    ] = None,
    api_base: Annotated[str | None, typer.Option(help="Base URL of an OpenAI-compatible server.")] = None,
    backend: Annotated[str, typer.Option(help="cuda (load_inline) or triton.")] = "cuda",
    device: Annotated[
        str, typer.Option(help="cuda, or cpu for dry runs (Triton under the interpreter).")
    ] = "cuda",
    precision: Annotated[str, typer.Option(help="fp32, fp16 or bf16.")] = "fp32",
    temperature: Annotated[
        float | None, typer.Option(help="Sampling temperature (provider default if unset).")
    ] = None,
    max_tokens: Annotated[int, typer.Option(help="Most completion tokens per reply.")] = 8192,
    reasoning_effort: Annotated[
        str | None, typer.Option(help="Passed through to reasoning models (low, medium, high).")
    ] = None,
    samples: Annotated[int, typer.Option(help="Independent trajectories per problem.")] = 1,
    context: Annotated[
        str, typer.Option(help="full (whole conversation) or last (first prompt + last turn).")
    ] = "full",
    token_budget: Annotated[int | None, typer.Option(help="Most tokens per trajectory.")] = None,
    cost_budget: Annotated[float | None, typer.Option(help="Most US dollars for the whole run.")] = None,
    run_name: Annotated[str | None, typer.Option(help="A unique, readable name for the run.")] = None,
    resume_run: Annotated[
        str | None, typer.Option("--resume", help="Continue this run (id or name) where it stopped.")
    ] = None,
    strict: StrictOpt = True,
    sandbox: SandboxOpt = True,
    stage_limits: LimitsOpt = None,
    db: DbOpt = None,
    dataset: DatasetOpt = None,
) -> None:
    """The main job: K turns of problem -> LLM -> kernel -> evaluation -> feedback, every turn logged."""
    from kb_agent.agent.llm import LiteLLMModel, LLMConfig
    from kb_agent.agent.loop import SolveConfig, resume, solve
    from kb_agent.agent.progress import TurnPrinter
    from kb_agent.agent.store import Store
    from kb_agent.evaluator import EvalSettings, LocalEvaluator
    from kb_agent.problems import resolve

    store = Store(db)
    if resume_run:
        run = store.get_run(resume_run)
        config = SolveConfig.from_dict(run["config"] or {})
        llm = dict(run["config"].get("llm") or {})
        llm_config = LLMConfig(**{k: v for k, v in llm.items() if k in LLMConfig.__dataclass_fields__})
        if model:
            llm_config.model = model
        if api_base:
            llm_config.api_base = api_base
        problems_todo = None
    else:
        if not problem or not model:
            raise UsageError("solve needs --problem and --model (or --resume RUN)")
        if temperature is not None and not 0 <= temperature <= 2:
            raise UsageError(f"--temperature {temperature} is outside 0..2")
        if max_tokens < 1:
            raise UsageError(f"--max-tokens must be 1 or more, got {max_tokens}")
        if reasoning_effort is not None and reasoning_effort not in ("minimal", "low", "medium", "high"):
            raise UsageError(f"--reasoning-effort {reasoning_effort!r}: choose minimal, low, medium or high")
        try:
            config = SolveConfig(turns=turns, context=context, samples=samples, backend=backend,
                                 precision=precision, device=device, strict=strict, sandbox=sandbox,
                                 stage_limits=stage_limits,
                                 token_budget=token_budget,
                                 cost_budget_usd=cost_budget, run_name=run_name)  # fmt: skip
        except ValueError as e:
            raise UsageError(str(e)) from None
        llm_config = LLMConfig(model=model, api_base=api_base, temperature=temperature, max_tokens=max_tokens,
                               reasoning_effort=reasoning_effort)  # fmt: skip
        problems_todo = resolve(problem, dataset)
    try:
        settings = EvalSettings(backend=config.backend, device=config.device, precision=config.precision,
                                strict=config.strict, sandbox=config.sandbox,
                                limits=_limits(config.stage_limits))  # fmt: skip
    except ValueError as e:
        raise UsageError(str(e)) from None
    require_cuda(settings.device, "run on a GPU machine, or pass --device cpu --backend triton")
    lm = LiteLLMModel(llm_config)  # raises MissingKeyError (one line) before any request
    evaluator = LocalEvaluator(settings)
    # Ctrl-C or a plain `kill` ends the run cleanly: the trajectory in flight is recorded as interrupted
    hint = "; `kb-agent runs list` shows the run, `kb-agent solve --resume RUN` continues it"
    with _interruptible(hint), TurnPrinter(out, total_turns=config.turns) as printer:
        if resume_run:
            run_id = resume(resume_run, lm, evaluator, store, on_turn=printer)
        else:
            printer.expect(len(problems_todo) * config.samples)
            run_id = solve(problems_todo, config, lm, evaluator, store, on_turn=printer)
    out.print(f"run {run_id} finished; `kb-agent report {run_id}` for fast_p", highlight=False)


def main() -> None:
    """Console-script entry point: run the app, turning expected errors into one line and exit code 2."""
    try:
        app()
    except SystemExit:  # how every command ends: nothing to look up (and no import for a late signal to hit)
        raise
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception as e:
        if not isinstance(e, _expected_errors()):
            raise
        err.print(f"[bold red]error:[/] {e}", highlight=False)
        sys.exit(2)


__all__ = ["app", "main", "Path"]
