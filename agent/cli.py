"""The `kb-agent` command line. Thin: each command parses options and calls one library function
(`agent.job` for solve, `agent.checks` for problems check, `agent.report` for reports, `agent.baseline`
for baselines), which Python
callers and tests use the same way.

Conventions: booleans are flags (`--json`, `--no-strict`), `-h` is `--help` everywhere, required
options carry a star, every default is shown, arguments are named in capitals (`CANDIDATE`). Heavy
imports (torch, triton, litellm) happen inside the commands that need them, so `--help` and the
`problems` commands answer quickly. Expected errors (`KBAgentError`) end as one line and exit code 2.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from kb_agent.agent import __version__
from kb_agent.evaluator.settings import StageLimits
from kb_agent.problems.errors import KBAgentError, UsageError, os_reason
from rich.console import Console
from rich.table import Table
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption


def _conventional(params: list) -> list:
    """Flags show no value type (typer's rich help prints `<bool>` after `--json`, which takes no
    value); arguments are named in capitals, as usage lines name them."""
    for p in params:
        if isinstance(p, TyperOption) and (p.is_flag or p.count) and p.metavar is None:
            p.metavar = ""
        elif isinstance(p, TyperArgument) and p.metavar is None:
            p.metavar = p.name.upper()
    return params


def _reflowed(text: str | None) -> str | None:
    """`text` with each paragraph's lines joined: a docstring's line breaks are where its source wraps,
    and rich's help keeps them (`report`'s summary broke mid-sentence at any terminal width)."""
    if not text:
        return text
    paragraphs = re.split(r"\n\s*\n", text.strip())
    return "\n\n".join(" ".join(line.strip() for line in par.splitlines()) for par in paragraphs)


class _Command(TyperCommand):
    """A command whose help follows the conventions above; its usage line reads
    `kb-agent eval [OPTIONS] CANDIDATE`, optional arguments in brackets, repeatable ones with `...`;
    its help's paragraphs are reflowed to the terminal (`_reflowed`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.help = _reflowed(self.help)

    def get_params(self, ctx):
        return _conventional(super().get_params(ctx))

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for p in self.get_params(ctx):
            if isinstance(p, TyperArgument):
                piece = p.metavar if p.required else f"[{p.metavar}]"
                pieces.append(piece + ("..." if p.nargs != 1 else ""))
            else:
                pieces.extend(p.get_usage_pieces(ctx))
        return pieces


class _Group(TyperGroup):
    def get_params(self, ctx):
        return _conventional(super().get_params(ctx))


app = typer.Typer(
    cls=_Group,
    help="Agentic multi-turn kernel optimisation around KernelBench.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # subcommands inherit it
)
problems_app = typer.Typer(
    cls=_Group, help="List, show and check KernelBench problems.", no_args_is_help=True
)
app.add_typer(problems_app, name="problems")

# Piped or redirected (a log, `| less`, a notebook's cell), rich would cut every table at 80 columns and
# shorten problem names to "1_Squa…"; there, tables are as wide as their contents (COLUMNS still wins).
PIPED_WIDTH = 240
out = Console(soft_wrap=True, width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else PIPED_WIDTH)
err = Console(stderr=True, soft_wrap=True)

DatasetOpt = Annotated[
    str | None,
    typer.Option(
        "--dataset",
        envvar="KB_DATASET",
        help="A folder holding a local KernelBench copy (level_N parquet files, or a KernelBench checkout).",
        show_default="the Hugging Face Hub",
    ),
]
DEFAULT_DB = "runs/kb.sqlite"  # agent.store.DEFAULT_DB, spelled out so that --help does not import sqlite
DbOpt = Annotated[
    str,
    typer.Option(
        "--db",
        envvar="KB_DB",
        help="The trajectory store (an SQLite file; a relative path is relative to the working directory).",
    ),
]


def _limits_text(limits: StageLimits) -> str:
    return ", ".join(f"{name[:-2]}={getattr(limits, name):g}" for name in StageLimits.__dataclass_fields__)


DEFAULT_LIMITS = _limits_text(StageLimits())
LimitsOpt = Annotated[
    str,
    typer.Option(
        "--stage-limits",
        help="Per-stage wall-clock limits of each evaluation in seconds; stages not named keep the default "
        "(e.g. build=600,timing=120).",
    ),
]
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
PrecisionOpt = Annotated[str, typer.Option(help="fp32, fp16 or bf16.")]
EXECUTORS = ("local", "ray")
MAX_SAMPLES = 10_000  # --samples: every trajectory is stored before the first model call
MAX_FANOUT = 256  # --n, --width, --branch: a round's model calls go out at once, one thread each
ExecutorOpt = Annotated[
    str,
    typer.Option(
        "--executor",
        help="Where evaluations run: local (child processes here) or ray (Ray tasks, one GPU each; "
        'pip install "kb-agent\\[ray]").',  # \\[: rich markup would read [ray] as a tag and drop it
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        metavar="ADDR",
        help="With --executor ray: a running cluster's head (host:port), or auto for one started here "
        "with `ray start`.",
        show_default="a local Ray instance, started and stopped by this command",
    ),
]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, so it unwinds like Ctrl-C (exit status 143, not 130)."""


def _raise_terminated(*_) -> None:
    raise Terminated()


@contextlib.contextmanager
def _interruptible(hint: str | Callable[[], str] = ""):
    """Run a command body so that Ctrl-C and a plain `kill` (SIGTERM, as `timeout` and job schedulers
    send) unwind it: evaluation children are killed, what is logged stays logged, and one line says
    so (exit 130, or 143 for SIGTERM) instead of an abrupt exit that leaves a child unwatched. `hint`
    ends that line; a callable is asked then (what is stored by the time of the interrupt)."""
    import signal
    import threading

    main_thread = threading.current_thread() is threading.main_thread()  # handlers live there only
    if main_thread:
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    except KeyboardInterrupt as e:
        terminated = isinstance(e, Terminated)
        err.print(("terminated" if terminated else "interrupted") + (hint() if callable(hint) else hint),
                  highlight=False)  # fmt: skip
        raise typer.Exit(143 if terminated else 130) from None
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def _space_checked(db: str | Path, hint: str | Callable[[], str] = ""):
    """A full disk in the block (SQLite's `database or disk is full`, OSError ENOSPC) as one line: where,
    the space free there, then `hint` (what was stored, how to go on), instead of a traceback (seen by a
    new user: 70 lines, and the resume that finished the run was left unsaid)."""
    try:
        yield
    except Exception as e:
        from kb_agent.agent.store import StoreError
        from kb_agent.agent.store.space import disk_full, full_line

        if not disk_full(e):
            raise
        try:
            tail = hint() if callable(hint) else hint
        except Exception:  # the store cannot be read either: the run is still there to resume
            tail = "; `kb-agent runs list` shows the runs, `kb-agent solve --resume RUN` continues one"
        raise StoreError(full_line(e, db) + tail) from None


def _settings(**kwargs: Any):
    """`EvalSettings(**kwargs)` with `limits` parsed from the --stage-limits text; UsageError (one line)
    for a bad value."""
    from kb_agent.evaluator import EvalSettings

    try:
        limits = StageLimits.parse(kwargs.pop("limits"))
    except ValueError as e:
        raise UsageError(f"--stage-limits: {e}") from None
    try:
        return EvalSettings(limits=limits, **kwargs)
    except ValueError as e:
        raise UsageError(str(e)) from None


@contextlib.contextmanager
def _ray(executor: str, ray_address: str | None):
    """None for `--executor local`; for ray the `RayExecutor` (connected, or a local instance started),
    closed on the way out. UsageError for an unknown executor or `--ray-address` without ray;
    `RayExecutorError` (one line) when Ray is missing or no cluster answers."""
    if executor not in EXECUTORS:
        raise UsageError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    if ray_address is not None and not ray_address.strip():
        # an empty value (an unset shell variable) would start a local instance instead of the cluster
        raise UsageError("--ray-address is empty; give HOST:PORT (or auto), or leave it out for a local Ray")
    if executor == "local":
        if ray_address:
            raise UsageError("--ray-address needs --executor ray")
        yield None
        return
    from kb_agent.evaluator.ray_executor import RayExecutor

    with RayExecutor(ray_address) as cluster:
        yield cluster


def require_cuda(device: str, hint: str) -> None:
    """UsageError (one line) when `device` is a CUDA device and this machine has none; `hint` says what to do."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"no CUDA device here; {hint}")


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


@problems_app.command("list", cls=_Command)
def problems_list(
    level: Annotated[
        str | None,
        typer.Option(
            "--level", "-l", help="A level (1-4), 'toy', or any problem spec: 1/1-10.", show_default="all"
        ),
    ] = None,
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
    out.print(f"{n} problem{'' if n == 1 else 's'}", highlight=False)


@problems_app.command("show", cls=_Command)
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


@problems_app.command("check", cls=_Command)
def problems_check(
    spec: Annotated[
        str,
        typer.Argument(
            help="Problems to check: 2/66, a level, 1/1-10,95, 1/37,2/9-12, toy, a path or a folder."
        ),
    ],
    device: Annotated[str, typer.Option(help="cuda or cpu.")] = "cuda",
    precision: PrecisionOpt = "fp32",
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object per problem.")] = False,
    jobs: Annotated[
        int, typer.Option(min=1, max=32, help="Problems checked at once, each in its own child.")
    ] = 1,
    stage_limits: LimitsOpt = DEFAULT_LIMITS,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    db: DbOpt = DEFAULT_DB,
    dataset: DatasetOpt = None,
) -> None:
    """Flag degenerate references: nondeterministic, carrying state between calls, with NaN in their
    output, passed (wholly or mostly) by a zero, constant or cached output at this precision's tolerance
    or only at a looser one (`_loose`), or failing under the evaluator's input handling; a problem that
    cannot be checked here is `unchecked` with the reason. Results are stored for `report`."""
    import json

    from kb_agent.agent.checks import check_problems
    from kb_agent.agent.store import Store
    from kb_agent.problems import resolve

    settings = _settings(device=device, precision=precision, limits=stage_limits)
    if executor == "local":  # on Ray the cluster's GPUs count (RayExecutor.checker)
        require_cuda(settings.device, "run on a GPU machine, or pass --device cpu")
    problems = resolve(spec, dataset)

    def print_json(_, c: dict) -> None:
        sys.stdout.write(json.dumps(c) + "\n")
        sys.stdout.flush()

    stored = "; the checks finished so far are stored"
    with _ray(executor, ray_address) as cluster, Store(db) as store:
        check = cluster.checker(jobs, settings.device) if cluster else None
        with _space_checked(db, stored), _interruptible(stored):
            results = check_problems(problems, settings, jobs=jobs, store=store,
                                     on_result=print_json if json_out else None, check=check)  # fmt: skip
    if not json_out:
        out.print(_checks_table(problems, results))
        counts: dict[str, int] = {}
        for c in results:
            counts[c["status"]] = counts.get(c["status"], 0) + 1
        noun = "problem" if len(problems) == 1 else "problems"
        out.print(f"{len(problems)} {noun}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))


def _checks_table(problems: list, results: list[dict]) -> Table:
    table = Table("problem", "name", "status", "flags", "s")
    for p, c in zip(problems, results, strict=True):
        flags = ", ".join(c["flags"]) or ("-" if c["status"] in ("ok", "flagged") else c["message"][:120])
        if c.get("reference_fails"):
            flags += ": " + c["reference_fails"].splitlines()[0][:100]
        table.add_row(p.key, p.name, c["status"], flags, f"{c['seconds']:.1f}")
    return table


# ---------------------------------------------------------------- the store: report, runs

runs_app = typer.Typer(
    cls=_Group, help="List the runs in the trajectory store and show one turn by turn.", no_args_is_help=True
)
app.add_typer(runs_app, name="runs")


def _print_blocks(renderables: list, text: str) -> None:
    """Rich renderables on a terminal, the plain-text rendering when piped."""
    if out.is_terminal:
        for r in renderables:
            out.print(r)
    else:
        sys.stdout.write(text)


@app.command("report", cls=_Command)
def report_cmd(
    runs: Annotated[
        list[str] | None, typer.Argument(help="Run ids or names. Default: the latest run.")
    ] = None,
    db: DbOpt = DEFAULT_DB,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    by_turn: Annotated[
        bool,
        typer.Option(
            "--by-turn", help="Add fast_p of the best turn up to k, per k, and the status mix per turn."
        ),
    ] = False,
    by_budget: Annotated[
        bool,
        typer.Option(
            "--by-budget",
            help="Add fast_p against cumulative tokens, dollars and GPU-seconds per trajectory.",
        ),
    ] = False,
    per_problem: Annotated[bool, typer.Option("--per-problem", help="Add one row per problem.")] = False,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            metavar="DIR",
            help="Also write PNG figures (by turn, by budget, status mix, speedups) to DIR (created with "
            "missing folders on the way).",
            show_default=False,
        ),
    ] = None,
    bootstrap: Annotated[
        int,
        typer.Option(
            min=0, help="Bootstrap resamples of the problems for the 95% intervals (0: no intervals; seeded)."
        ),
    ] = 1000,
    compile_mode: Annotated[
        str, typer.Option(help="The torch.compile baseline to compare with: default or max-autotune.")
    ] = "default",
    exclude_degenerate: Annotated[
        bool,
        typer.Option(
            "--exclude-degenerate",
            help="Add fast_p without the problems `problems check` flagged degenerate.",
        ),
    ] = False,
    paired: Annotated[
        bool,
        typer.Option(
            "--paired",
            help="Compare two runs problem by problem: the fast_p difference with a bootstrap interval "
            "and a sign test.",
        ),
    ] = False,
) -> None:
    """fast_p per run with denominators, 95% intervals, level and GPU: per problem (best of its samples)
    and per trajectory, fast_p@k, against eager and torch.compile baselines; optionally by turn, by
    budget, per problem, and as plots."""
    import json

    from kb_agent.agent import report
    from kb_agent.agent.store import Store

    if paired:
        from kb_agent.agent.report.paired import paired_report, render_paired_text

        if not runs or len(runs) != 2:
            raise UsageError("--paired compares two runs: kb-agent report RUN_A RUN_B --paired")
        unused = [name for name, given in (("--by-turn", by_turn), ("--by-budget", by_budget),
                                           ("--per-problem", per_problem), ("--plot", plot is not None),
                                           ("--exclude-degenerate", exclude_degenerate),
                                           ("--compile-mode", compile_mode != "default")) if given]  # fmt: skip
        if unused:
            raise UsageError(
                f"--paired prints the paired comparison alone; drop {', '.join(unused)}, or run "
                "`kb-agent report RUN_A RUN_B` with it for each run's figures"
            )
        with Store(db, for_reading=True) as store:
            r = paired_report(store, runs[0], runs[1], resamples=bootstrap)
        sys.stdout.write(json.dumps(r, indent=2) + "\n" if as_json else render_paired_text(r))
        return
    with Store(db, for_reading=True) as store:
        rep = report.build_report(store, runs, by_turn=by_turn or plot is not None,
                                  by_budget=by_budget or plot is not None, resamples=bootstrap,
                                  compile_mode=compile_mode, exclude_degenerate=exclude_degenerate)  # fmt: skip
    if plot is not None:
        from kb_agent.agent.report.plots import write_plots

        try:
            paths = write_plots(rep, plot)
        except OSError as e:
            raise UsageError(
                f"cannot write plots to {str(plot)!r} ({os_reason(e, Path(plot) / 'fast_p_by_turn.png')}); pass another --plot DIR"
            ) from None
        err.print(f"wrote {len(paths)} plots to {plot}: " + ", ".join(p.name for p in paths), highlight=False)
    shown = {**rep, "runs": [{**s, "by_turn": s["by_turn"] if by_turn else None,
                              "by_budget": s["by_budget"] if by_budget else None} for s in rep["runs"]]}  # fmt: skip
    if as_json:
        sys.stdout.write(json.dumps(shown, indent=2) + "\n")
    else:
        _print_blocks(
            report.report_renderables(shown, per_problem), report.render_report_text(shown, per_problem)
        )


@app.command("baseline", cls=_Command)
def baseline_cmd(
    spec: Annotated[
        str,
        typer.Argument(
            help="Problems to time: 2/66, a level, 1/1-10,95, 1/37,2/9-12, toy, a path or a folder."
        ),
    ],
    device: Annotated[str, typer.Option(help="cuda, cuda:N or cpu.")] = "cuda",
    precision: PrecisionOpt = "fp32",
    mode: Annotated[
        str, typer.Option(help="torch.compile mode: default (inductor) or max-autotune.")
    ] = "default",
    force: Annotated[
        bool, typer.Option("--force", help="Time again problems the store already has a baseline for.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object per problem.")] = False,
    jobs: Annotated[
        int,
        typer.Option(
            min=1,
            max=32,
            help="Warm-up compilations at once before the timings (into one cache the timings then "
            "compile from; compile s stays the cold compile's). 1: none, each timing compiles cold.",
        ),
    ] = 1,
    stage_limits: LimitsOpt = DEFAULT_LIMITS,
    db: DbOpt = DEFAULT_DB,
    dataset: DatasetOpt = None,
) -> None:
    """Time each reference eager and under torch.compile on this device (the evaluator's protocol, in an
    isolated child, one problem at a time; with --jobs N, N warm-up children first compile the problems
    at once, and the timings, which start when they have all ended, compile from their cache), cached in
    the store per reference, GPU, precision, torch version and mode; `report` compares runs of the same
    GPU, precision and torch with them."""
    import json

    from kb_agent.agent.baseline import run_baselines
    from kb_agent.agent.store import Store
    from kb_agent.agent.store.baselines import COMPILE_MODES
    from kb_agent.problems import resolve

    if mode not in COMPILE_MODES:
        raise UsageError(f"unknown --mode {mode!r}; choose one of {', '.join(COMPILE_MODES)}")
    settings = _settings(device=device, precision=precision, limits=stage_limits, strict=False)
    require_cuda(settings.device, "run on a GPU machine, or pass --device cpu")
    problems = resolve(spec, dataset)

    def print_json(_, r: dict) -> None:
        sys.stdout.write(json.dumps(r) + "\n")
        sys.stdout.flush()

    stored = "; the baselines timed so far are stored"
    with _space_checked(db, stored), Store(db) as store, _interruptible(stored):
        results = run_baselines(problems, settings, store=store, compile_mode=mode, force=force, jobs=jobs,
                                on_result=print_json if json_out else None)  # fmt: skip
    if not json_out:
        out.print(_baselines_table(problems, results))


def _baselines_table(problems: list, results: list[dict]) -> Table:
    from kb_agent.agent.report.text import fmt_speedup

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x:.4g}"

    table = Table(
        "problem", "name", "eager ms", "compiled ms", "compiled speedup", "compile s", "status", "cached"
    )
    for p, r in zip(problems, results, strict=True):
        eager, comp = r.get("eager_ms"), r.get("compile_ms")
        status = (
            r["status"]
            if r["status"] == "ok"
            else f"{r['status']}: {(r.get('message') or '').splitlines()[0][:100]}"
        )
        table.add_row(p.key, p.name, ms(eager), ms(comp), fmt_speedup(eager / comp) if eager and comp else "-",
                      "-" if r.get("compile_s") is None else f"{r['compile_s']:.1f}", status,
                      "yes" if r.get("cached") else "no")  # fmt: skip
    return table


@runs_app.command("list", cls=_Command)
def runs_list(db: DbOpt = DEFAULT_DB) -> None:
    """List the runs: id, name, created, model, problems, status (running, finished,
    finished_with_errors, incomplete, interrupted, failed, or killed: its process on this machine is
    gone without a word; `solve --resume RUN` continues it)."""
    from kb_agent.agent import report
    from kb_agent.agent.store import Store

    with Store(db, for_reading=True) as store:
        rows = report.list_runs(store)
    _print_blocks([report.runs_renderable(rows)], report.render_runs_text(rows))


@runs_app.command("show", cls=_Command)
def runs_show(
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    problem: Annotated[
        str | None, typer.Option("--problem", "-p", help="Only this problem: 2/40, 2, toy/relu.")
    ] = None,
    sample: Annotated[int | None, typer.Option("--sample", help="Only this sample of each problem.")] = None,
    code: Annotated[int | None, typer.Option("--code", help="Print the code extracted at turn N.")] = None,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Show a run turn by turn (status, speedup, tokens, cost), or one turn's extracted code."""
    from kb_agent.agent import report
    from kb_agent.agent.store import Store

    with Store(db, for_reading=True) as store:
        if code is not None:
            src = report.turn_code(store, run, code, problem, sample)
            sys.stdout.write(src if src.endswith("\n") else src + "\n")
            return
        shown = report.show_run(store, run, problem, sample)
    _print_blocks(report.show_renderables(shown), report.render_show_text(shown))


@app.command("export", cls=_Command)
def export_cmd(
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            help="jsonl, parquet or csv; must match --output's suffix (.jsonl, .parquet, .csv).",
            show_default="from --output's suffix, else jsonl",
        ),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="The file to write (missing folders are created); - for stdout (jsonl, csv).",
            show_default="RUN-NAME.FORMAT beside the store",
        ),
    ] = None,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Write a run's turns as a table, one row per turn (problem, sample, turn, parent, both verdicts,
    speedups, tokens, cost, reply, code, feedback, evaluation)."""
    from kb_agent.agent.export import export_run
    from kb_agent.agent.store import Store

    with Store(db, for_reading=True) as store:
        try:
            path = export_run(store, run, fmt, output)
        except OSError as e:  # the output path: a missing or unwritable folder, a file where a folder goes
            raise UsageError(
                f"cannot write {output or 'the export'}: {os_reason(e, output)}; choose another --output"
            ) from None
    if path is not None:
        err.print(f"wrote {path}", highlight=False)


@app.command("view", cls=_Command)
def view_cmd(
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="The HTML file to write (missing folders are created).",
            show_default="RUN-NAME.html beside the store",
        ),
    ] = None,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Write a run as one self-contained HTML page: a problems x turns grid coloured by status; a cell
    opens the reply, the code diff against the previous turn, the feedback and the evaluation."""
    from kb_agent.agent.store import Store
    from kb_agent.agent.viewer import write_view

    with Store(db, for_reading=True) as store:
        try:
            path = write_view(store, run, output)
        except OSError as e:
            raise UsageError(
                f"cannot write {output or 'the page'}: {os_reason(e, output)}; choose another --output"
            ) from None
    out.print(f"wrote {path}", highlight=False)


@app.command("rescore", cls=_Command)
def rescore_cmd(
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    force: Annotated[
        bool, typer.Option("--force", help="Evaluate again turns already rescored under this evaluator.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Evaluate every stored turn's code again under the current evaluator, with the run's settings;
    store the results beside the old ones and print the verdicts and fast_p figures that changed."""
    import json

    from kb_agent.agent.rescore import render_rescore_text, rescore
    from kb_agent.agent.store import Store

    def progress(turn: dict, status: str) -> None:
        err.print(f"{turn['problem_key']} sample {turn['sample']} turn {turn['idx']}: {status} "
                  f"(was {turn['status']})", highlight=False)  # fmt: skip

    stored = "; the turns rescored so far are stored"
    with _space_checked(db, stored), Store(db, create=False) as store, _interruptible(stored):
        rep = rescore(store, run, force=force, on_rescored=None if as_json else progress)
    sys.stdout.write(json.dumps(rep, indent=2) + "\n" if as_json else render_rescore_text(rep))


@app.command("eval", cls=_Command)
def eval_cmd(
    candidate: Annotated[Path, typer.Argument(help="A Python module defining ModelNew.", show_default=False)],
    problem: Annotated[str, typer.Option("--problem", "-p", help="The reference: 2/40, toy/relu or a path.")],
    backend: Annotated[str, typer.Option(help="auto, cuda or triton.")] = "auto",
    device: Annotated[
        str, typer.Option(help="cuda, or cpu (Triton candidates under the interpreter).")
    ] = "cuda",
    precision: PrecisionOpt = "fp32",
    baseline: Annotated[
        str | None, typer.Option(help="'compile': also time torch.compile of the reference.")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the EvalResult as one JSON object.")
    ] = False,
    strict: StrictOpt = True,
    sandbox: SandboxOpt = True,
    stage_limits: LimitsOpt = DEFAULT_LIMITS,
    dataset: DatasetOpt = None,
) -> None:
    """Build, check and time one candidate against its reference in an isolated child process.

    The exit code is 0 whenever the evaluation ran, whatever its verdict; 2 for bad usage.
    """
    from kb_agent.problems import resolve_one

    if candidate.is_dir():
        raise UsageError(f"{str(candidate)!r} is a folder; give the candidate's .py file")
    if not candidate.is_file():
        raise UsageError(f"no such candidate file: {str(candidate)!r}")
    if baseline not in (None, "compile"):
        raise UsageError(f"unknown --baseline {baseline!r}; the only baseline is 'compile'")
    from kb_agent.evaluator import evaluate

    settings = _settings(backend=backend, device=device, precision=precision, strict=strict, sandbox=sandbox,
                         baseline_compile=baseline == "compile", limits=stage_limits)  # fmt: skip
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


# the options `solve --resume RUN` applies; any other one given beside it is refused (`_refuse_beside_resume`)
RESUME_APPLIES = ("resume_run", "api_base", "db", "dataset", "jobs", "rpm", "tpm", "executor", "ray_address")


@app.command("solve", cls=_Command)
def solve_cmd(
    ctx: typer.Context,
    problem: Annotated[
        str | None,
        typer.Option(
            "--problem",
            "-p",
            help="2/40, a level, 1/1-10,95, 1/37,2/9-12, toy/relu or a path. Required, unless --resume.",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="scripted/demo (built in: no key, no server), or a litellm model string: openai/…, "
            "anthropic/…, ollama/…, hosted_vllm/…. Required, unless --resume.",
            show_default=False,
        ),
    ] = None,
    turns: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="K: turns per trajectory (rounds for best-of-n and beam, steps for tree).",
            show_default="5; a built-in scripted/NAME model: as many as it has replies",
        ),
    ] = None,
    api_base: Annotated[
        str | None,
        typer.Option(help="Base URL of an OpenAI-compatible server.", show_default="the provider's"),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            help="cuda (load_inline) or triton: the kernels the model is asked for.",
            show_default="cuda; triton with --device cpu",
        ),
    ] = None,
    device: Annotated[
        str, typer.Option(help="cuda, or cpu for dry runs (Triton under the interpreter).")
    ] = "cuda",
    precision: PrecisionOpt = "fp32",
    temperature: Annotated[
        float | None, typer.Option(min=0, max=2, help="Sampling temperature.", show_default="the provider's")
    ] = None,
    max_tokens: Annotated[int, typer.Option(min=1, help="Most completion tokens per reply.")] = 8192,
    reasoning_effort: Annotated[
        str | None,
        typer.Option(help="minimal, low, medium or high, for reasoning models.", show_default="not sent"),
    ] = None,
    samples: Annotated[
        int, typer.Option(min=1, max=MAX_SAMPLES, help="Independent trajectories per problem.")
    ] = 1,
    context: Annotated[
        str,
        typer.Option(
            help="full (whole conversation), last (first prompt + last turn) or summary (earlier replies cut "
            "to their code, feedback kept)."
        ),
    ] = "full",
    context_window: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="The model's input window in tokens; the oldest turns are dropped to fit it.",
            show_default="litellm's figure, else 32768",
        ),
    ] = None,
    token_budget: Annotated[
        int | None, typer.Option(min=1, help="Most tokens per trajectory.", show_default="no limit")
    ] = None,
    cost_budget: Annotated[
        float | None, typer.Option(min=0, help="Most US dollars for the whole run.", show_default="no limit")
    ] = None,
    run_name: Annotated[
        str | None,
        typer.Option(
            help="A unique, readable name for the run (no whitespace around it, no control characters, not shaped like a run id).",
            show_default="from the model and the time",
        ),
    ] = None,
    resume_run: Annotated[
        str | None,
        typer.Option(
            "--resume",
            metavar="RUN",
            help="Continue this run (id or name) where it stopped, with its stored settings; only --api-base, "
            "--jobs, --rpm, --tpm, --executor, --ray-address, --db and --dataset may be given beside it.",
            show_default=False,
        ),
    ] = None,
    strict: StrictOpt = True,
    sandbox: SandboxOpt = True,
    retime: Annotated[
        bool,
        typer.Option(
            "--retime/--no-retime",
            help="When a trajectory ends, re-time its best correct turn in a fresh process (the winner's "
            "curse); fast_p uses the re-timed speedup.",
        ),
    ] = True,
    reuse: Annotated[
        bool,
        typer.Option(
            "--reuse/--no-reuse",
            help="A turn whose code repeats an earlier turn's of the run gets that verdict again instead of "
            "a second evaluation (a timeout or runtime error is evaluated again).",
        ),
    ] = True,
    stage_limits: LimitsOpt = DEFAULT_LIMITS,
    feedback: Annotated[
        str, typer.Option(help="Feedback recipe: minimal, standard, full, or a comma list of components.")
    ] = "standard",
    rpm: Annotated[
        int | None,
        typer.Option(
            min=1, help="Most model requests per minute (retries included).", show_default="no limit"
        ),
    ] = None,
    tpm: Annotated[
        int | None,
        typer.Option(
            min=1, help="Most model tokens (prompt + completion) per minute.", show_default="no limit"
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Trajectories in flight at once; their evaluations share one slot per GPU (per core with "
            "--device cpu), so timing never shares a GPU.",
            show_default="twice the slots, at most the trajectories",
        ),
    ] = None,
    strategy: Annotated[
        str, typer.Option(help="linear, best-of-n (--n), beam (--width, --branch) or tree (--seed).")
    ] = "linear",
    n: Annotated[
        int,
        typer.Option("--n", min=1, max=MAX_FANOUT, help="best-of-n: completions per turn (asked at once)."),
    ] = 4,
    width: Annotated[
        int, typer.Option(min=1, max=MAX_FANOUT, help="beam: kernels kept after each round.")
    ] = 2,
    branch: Annotated[
        int, typer.Option(min=1, max=MAX_FANOUT, help="beam: children of each kept kernel per round.")
    ] = 2,
    seed: Annotated[int, typer.Option(help="tree: seeds the draw of the kernel each step refines.")] = 0,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    db: DbOpt = DEFAULT_DB,
    dataset: DatasetOpt = None,
) -> None:
    """The main job: K turns of problem -> LLM -> kernel -> evaluation -> feedback, every turn logged.

    Exit code 0 when the run finished; 3 when it ended `incomplete` (the model was unavailable for some
    trajectories: `--resume RUN` retries them) or `finished_with_errors` (the provider refused some
    requests); 130/143 when interrupted; 2 for bad usage, or a full disk (one line: where, the
    space free there, and `--resume RUN`)."""
    import dataclasses
    from functools import partial

    from kb_agent.agent import job
    from kb_agent.agent.llm import LLMConfig
    from kb_agent.agent.loop import SolveConfig

    if resume_run:
        _refuse_beside_resume(ctx)
        run = partial(job.resume_run, resume_run, store=db, api_base=api_base, jobs=jobs, rpm=rpm, tpm=tpm)
        with _ray(executor, ray_address) as cluster:
            _run_and_report(partial(run, pool=cluster.pool if cluster else None), db, resuming=resume_run)
        return
    else:
        if not problem or not model:
            raise UsageError("solve needs --problem and --model (or --resume RUN)")
        if run_name is not None:  # before the evaluator starts; the store refuses another run's id later
            from kb_agent.agent.store import check_run_name

            check_run_name(run_name)
        turns = turns or default_turns(model)
        try:
            config = SolveConfig(turns=turns, context=context, samples=samples, precision=precision, device=device,
                                 backend=backend or ("triton" if device == "cpu" else "cuda"),
                                 strict=strict, sandbox=sandbox, retime_best=retime, reuse_results=reuse,
                                 stage_limits=stage_limits,
                                 token_budget=token_budget, cost_budget_usd=cost_budget, run_name=run_name,
                                 feedback=feedback, strategy=strategy, n=n, width=width, branch=branch,
                                 seed=seed)  # fmt: skip
            llm = LLMConfig(model=model, api_base=api_base, temperature=temperature, max_tokens=max_tokens,
                            reasoning_effort=reasoning_effort, rpm=rpm, tpm=tpm,
                            context_window=context_window)  # fmt: skip
        except ValueError as e:
            raise UsageError(str(e)) from None
    # Ctrl-C or a plain `kill` ends the run cleanly: the trajectory in flight is recorded as interrupted
    with _ray(executor, ray_address) as cluster:
        if cluster and config.device.startswith("cuda"):  # the task prompt names the cluster's GPU
            config = dataclasses.replace(config, **cluster.gpu_target())
        run = partial(job.start, problem, config, llm, dataset=dataset, store=db, jobs=jobs,
                      pool=cluster.pool if cluster else None)  # fmt: skip
        _run_and_report(run, db)


@app.command("fork", cls=_Command)
def fork_cmd(
    run: Annotated[str, typer.Argument(help="The run to fork (id or name); a linear one.")],
    turn: Annotated[
        int,
        typer.Option(
            "--turn", min=1, help="K: turns 1..K-1 are copied, turn K on runs with the new settings."
        ),
    ],
    model: Annotated[
        str | None, typer.Option(help="Another model from turn K.", show_default="the run's")
    ] = None,
    feedback: Annotated[
        str | None, typer.Option(help="Another feedback recipe from turn K.", show_default="the run's")
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(min=0, max=2, help="Another temperature.", show_default="the run's")
    ] = None,
    context: Annotated[
        str | None,
        typer.Option(help="Another context policy: full, last or summary.", show_default="the run's"),
    ] = None,
    run_name: Annotated[
        str | None,
        typer.Option(help="A unique name for the new run.", show_default="from the model and the time"),
    ] = None,
    api_base: Annotated[
        str | None, typer.Option(help="Base URL of an OpenAI-compatible server.", show_default="the run's")
    ] = None,
    jobs: Annotated[int | None, typer.Option(min=1, help="Trajectories in flight at once.")] = None,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """A new run whose trajectories copy turns 1..K-1 of RUN exactly (no model call, no evaluation) and
    continue from turn K with the settings given; `solve --resume NEW` continues it if it stops. Exit
    codes as solve's."""
    from functools import partial

    from kb_agent.agent import job
    from kb_agent.agent.store import check_run_name

    if run_name is not None:
        check_run_name(run_name)
    run_fork = partial(job.fork, run, turn, model=model, feedback=feedback, temperature=temperature,
                       context=context, run_name=run_name, store=db, api_base=api_base, jobs=jobs)  # fmt: skip
    with _ray(executor, ray_address) as cluster:
        _run_and_report(partial(run_fork, pool=cluster.pool if cluster else None), db)


def default_turns(model: str) -> int:
    """`solve`'s turns when `--turns` is not given: 5, or for a built-in scripted model (`scripted/demo`)
    its number of replies, so its run ends when the script does rather than with a model error for a turn
    it has no reply for (seen by a new user: scripted/demo's 3 replies under the default 5 turns ended
    `finished_with_errors`, blaming the provider). An unknown scripted name is refused later, as before."""
    from kb_agent.agent.llm import SCRIPTED_PREFIX, LLMError, scripted_model

    if model.startswith(SCRIPTED_PREFIX):
        try:
            return len(scripted_model(model).replies)
        except LLMError:
            pass
    return 5


def _run_and_report(run: Any, db: Path, resuming: str | None = None) -> None:
    """Run `run` (a partial of `job.start`, `job.resume_run` or `job.fork`; `resuming`: the run ref
    `job.resume_run` was given) with progress; exit as solve says."""
    from functools import partial

    from kb_agent.agent import job
    from kb_agent.agent.progress import TurnPrinter

    hint = partial(_interrupted_hint, db, resuming)
    with _space_checked(db, hint), _interruptible(hint), TurnPrinter(out) as printer:
        run_id = run(on_turn=printer, on_start=printer.start, on_trajectory=printer.trajectory_done,
                     on_evaluator=printer.watch)  # fmt: skip
    status = job.run_status(run_id, store=db)
    at = _db_flag(db)
    if status == "finished":
        out.print(f"run {run_id} finished; `kb-agent report {run_id}{at}` for fast_p", highlight=False)
        return
    left = {"incomplete": "the model was unavailable for some trajectories; "
                          f"`kb-agent solve --resume {run_id}{at}` retries them",
            "finished_with_errors": "the provider refused some requests (model_error); "
                                    f"`kb-agent runs show {run_id}{at}` shows which"}  # fmt: skip
    if status == "incomplete" and printer.model_down:  # the model is down: it says where and why
        left[status] = f"{printer.model_down}; `kb-agent solve --resume {run_id}{at}` continues it"
    err.print(f"run {run_id} {status}: {left.get(status, status)}", highlight=False, markup=False)
    raise typer.Exit(3)


def _db_flag(db: str | Path) -> str:
    """` --db DB` for a hint that names a command, when `db` is not the store that command opens by
    itself (KB_DB, else DEFAULT_DB); else "" (seen by a new user: a hint after `--db /tmp/k.sqlite`
    pointed at runs/kb.sqlite)."""
    return "" if str(db) == os.environ.get("KB_DB", DEFAULT_DB) else f" --db {shlex.quote(str(db))}"


def _interrupted_hint(db: str | Path, resuming: str | None) -> str:
    """The end of the line an interrupted solve, resume or fork prints: the run by name when it exists
    (`resuming`, else the run this process created), else that nothing was stored (seen by a new user:
    Ctrl-C while the evaluator started pointed to `solve --resume RUN` for a run never created)."""
    from kb_agent.agent.store import Store
    from kb_agent.agent.store.liveness import this_process

    db, name = Path(db), resuming  # a str from the command line (a new user's Ctrl-C: AttributeError)
    if name is None and db.exists():
        with Store(db, create=False) as store:
            me = this_process()
            mine = [r for r in store.list_runs() if r.get("pid") == me["pid"] and r.get("host") == me["host"]]
        name = mine[-1]["name"] if mine else None
    if name is None:
        return "; no run was created and nothing is stored: run the command again"
    at = _db_flag(db)
    return (
        f"; `kb-agent runs show {name}{at}` shows the run, `kb-agent solve --resume {name}{at}` continues it"
    )


def _refuse_beside_resume(ctx: typer.Context) -> None:
    """UsageError naming the options given on the command line that `--resume` cannot apply: a run keeps
    the settings it started with (its trajectories are compared with one another)."""
    given = []
    for p in ctx.command.params:
        source = ctx.get_parameter_source(p.name)
        if p.name not in RESUME_APPLIES and source is not None and source.name == "COMMANDLINE":
            value = ctx.params.get(p.name)
            given.append(p.secondary_opts[0] if value is False and p.secondary_opts else p.opts[0])
    if given:
        raise UsageError(
            f"--resume continues a run with the settings it started with; drop {', '.join(given)} "
            "(or start a new run to change them)"
        )


def main() -> None:
    """Console-script entry point: run the app, turning expected errors (`KBAgentError`) into one line
    and their exit code (2)."""
    try:
        app()
    except SystemExit:  # how every command ends: nothing to look up (and no import for a late signal to hit)
        raise
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except KBAgentError as e:
        from rich.markup import escape

        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()


__all__ = ["app", "main"]
