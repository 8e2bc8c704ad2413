"""The CLI as people expect it: flags take no value, `-h` everywhere, required options starred, defaults
shown, arguments in capitals; `--resume` refuses what it cannot apply; every `kb-agent` command in the
README parses against the real CLI (so the docs cannot drift)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from kb_agent.agent.cli import DEFAULT_DB, DEFAULT_LIMITS, app
from kb_agent.evaluator.settings import StageLimits
from typer.core import TyperGroup
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
WIDE = {"COLUMNS": "250"}


def _commands(group=None, path=()):
    """(path, click command) for every command and group of the app."""
    group = group or typer.main.get_command(app)
    yield path, group
    for name, cmd in group.commands.items():
        if isinstance(cmd, TyperGroup):
            yield from _commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


COMMANDS = [path for path, _ in _commands()]


def test_every_command_is_listed():
    assert {" ".join(p) for p in COMMANDS} >= {"", "problems list", "problems check", "eval", "solve", "report", "runs show"}  # fmt: skip


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "kb-agent")
def test_dash_h_is_help_and_flags_show_no_value(path):
    short = runner.invoke(app, [*path, "-h"], env=WIDE)
    long = runner.invoke(app, [*path, "--help"], env=WIDE)
    assert short.exit_code == 0 and short.output == long.output
    assert "<bool>" not in short.output
    assert "{" not in short.output.split("\n", 3)[1]  # the usage line


@pytest.mark.parametrize("path", [("solve",), ("fork",), ("problems", "check")], ids=" ".join)
def test_the_executor_help_keeps_the_ray_extra(path):
    """Rich markup read `[ray]` in `pip install "kb-agent[ray]"` as a tag and dropped it (a new user's
    `solve --help` said `pip install "kb-agent")`)."""
    out = " ".join(runner.invoke(app, [*path, "--help"], env=WIDE).output.split())
    assert 'pip install "kb-agent[ray]"' in out, out


def test_runs_list_help_names_every_run_status():
    """It named five of the seven (a run the model failed listed as `incomplete`, a status its help
    never mentioned)."""
    from kb_agent.agent.store import RUN_STATUSES

    out = " ".join(runner.invoke(app, ["runs", "list", "--help"], env=WIDE).output.split())
    assert all(status in out for status in (*RUN_STATUSES, "killed")), out


def test_usage_names_arguments_in_capitals():
    def usage(command: str) -> str:
        return runner.invoke(app, [command, "-h"], env=WIDE, prog_name="kb-agent").output

    assert "Usage: kb-agent eval [OPTIONS] CANDIDATE " in usage("eval")
    assert "Usage: kb-agent report [OPTIONS] [RUNS]... " in usage("report")
    missing = runner.invoke(app, ["eval", "-p", "toy/relu"], env=WIDE)
    assert missing.exit_code == 2 and "Missing argument 'CANDIDATE'" in missing.output


def test_a_flag_takes_no_value():
    r = runner.invoke(app, ["problems", "check", "toy", "--json=true"], env=WIDE)
    assert r.exit_code == 2 and "does not take a value" in r.output


def test_required_options_are_starred_and_defaults_shown():
    ev = runner.invoke(app, ["eval", "-h"], env=WIDE).output
    assert re.search(r"\*\s+--problem\s+-p", ev) and "[required]" in ev
    solve = runner.invoke(app, ["solve", "-h"], env=WIDE).output
    assert solve.count("Required, unless --resume") == 2  # --problem and --model
    for text in (ev, solve, runner.invoke(app, ["problems", "check", "-h"], env=WIDE).output):
        assert f"[default: {DEFAULT_LIMITS}]" in text
    assert (
        f"[default: {DEFAULT_DB}]" in solve
        and "[default: (5; a built-in scripted/NAME model: as many as it has replies)]" in solve
        and "[default: strict]" in solve
    )


def test_the_shown_defaults_are_the_library_defaults():
    from kb_agent.agent.store import DEFAULT_DB as STORE_DEFAULT

    assert StageLimits.parse(DEFAULT_LIMITS) == StageLimits()
    assert Path(DEFAULT_DB) == STORE_DEFAULT


def _kb(*args: str, cwd=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "kb_agent.agent.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd)


def test_resume_refuses_options_it_cannot_apply_in_one_line(tmp_path):
    r = _kb(
        "solve", "--resume", "some-run", "--turns", "7", "--no-strict", "--db", str(tmp_path / "kb.sqlite")
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "drop --turns, --no-strict" in r.stderr
    assert not (tmp_path / "kb.sqlite").exists()  # refused before anything was opened
    # what it can apply goes through to the run lookup
    r = _kb(
        "solve",
        "--resume",
        "some-run",
        "--api-base",
        "http://127.0.0.1:9/v1",
        "--db",
        str(tmp_path / "kb.sqlite"),
    )
    assert r.returncode == 2 and "no run 'some-run'" in r.stderr, r.stderr


def test_expected_errors_share_one_base_and_end_as_one_line(tmp_path):
    from kb_agent.agent.llm import LLMError
    from kb_agent.agent.report import ReportError
    from kb_agent.agent.store import StoreError
    from kb_agent.problems import ProblemError
    from kb_agent.problems.errors import KBAgentError, UsageError

    for cls in (LLMError, ReportError, StoreError, ProblemError, UsageError):
        assert issubclass(cls, KBAgentError)
    r = _kb("solve", "--problem", "toy/relu", "--model", "scripted/nope", "--device", "cpu", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr == "error: unknown scripted model scripted/nope; built in: scripted/demo\n"
    assert r.stdout == ""  # no progress bar (nor its blank line) for a run that never started
    assert not (tmp_path / "runs").exists()  # refused before the store was made


# -- the README's commands ------------------------------------------------------------------------------
def readme_commands(text: str) -> list[tuple[str, bool]]:
    """Every `kb-agent ...` command in the README, each with whether it must be complete: lines of
    fenced blocks (a `$ ` prompt, comments and `\\` continuations allowed) must; an inline code span
    may name a command alone (`kb-agent problems check` in prose), but what it passes must parse."""
    found = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("kb-agent"):
                found.append((line, True))
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    found += [(m, False) for m in re.findall(r"`([^`\n]+)`", prose) if m.startswith("kb-agent ")]
    return found


def parse(command: str, complete: bool = True):
    """Parse `command` against the real CLI without running it (click's make_context checks the
    options, their values and the required ones; no command runs). A command named alone passes when
    not `complete`. Raises AssertionError with click's message when it fails."""
    argv = shlex.split(command, comments=True)
    assert argv[0] == "kb-agent"
    cmd, argv, path = typer.main.get_command(app), argv[1:], ["kb-agent"]
    while isinstance(cmd, TyperGroup) and (argv or complete):
        assert argv and argv[0] in cmd.commands, f"{command!r}: no command {argv[:1]} under {' '.join(path)}"
        path.append(argv[0])
        cmd, argv = cmd.commands[argv[0]], argv[1:]
    if argv or complete:
        try:
            return cmd.make_context(" ".join(path), argv)
        except Exception as e:  # click's UsageError, MissingParameter, BadParameter, ...
            message = e.format_message() if hasattr(e, "format_message") else str(e)
            raise AssertionError(f"{command!r}: {message}") from None


def test_readme_commands_parse():
    commands = readme_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(commands) >= 10 and ("kb-agent solve --problem toy/relu --turns 3 --model scripted/demo --device cpu", True) in commands  # fmt: skip
    for command, complete in commands:
        parse(command, complete)


def test_the_readme_check_catches_drift():
    with pytest.raises(AssertionError, match="No such option: --turn"):
        parse("kb-agent solve --problem 2/40 --turn 5 --model x")
    with pytest.raises(AssertionError, match="Missing option '--problem'"):
        parse("kb-agent eval my_kernel.py")  # --problem is required
    with pytest.raises(AssertionError, match="Missing argument 'SPEC'"):
        parse("kb-agent problems check")  # complete, as in a fenced block
    parse("kb-agent problems check", complete=False)  # a command named in prose
    with pytest.raises(AssertionError, match="No such option: --jobz"):
        parse("kb-agent problems check 1 --jobz 4", complete=False)
    with pytest.raises(AssertionError, match="no command"):
        parse("kb-agent problem list", complete=False)
    text = "```bash\n$ kb-agent report \\\n  --by-turn   # note\n```\nthen `kb-agent runs list`."
    assert readme_commands(text) == [
        ("kb-agent report    --by-turn   # note", True),
        ("kb-agent runs list", False),
    ]


@pytest.mark.slow  # a whole solve
def test_no_retime_reaches_the_stored_config(tmp_path):
    from kb_agent.agent.store import Store

    db = tmp_path / "kb.sqlite"
    args = ["solve", "--problem", "toy/relu", "--turns", "1", "--model", "scripted/demo", "--device", "cpu"]
    r = runner.invoke(app, [*args, "--no-retime", "--db", str(db)], env=WIDE)
    assert r.exit_code == 0, r.output
    with Store(db) as store:
        assert store.latest_run()["config"]["retime_best"] is False


def test_a_piped_table_keeps_whole_problem_names(kb_dataset):
    """Piped into a file or `less`, rich cut tables at 80 columns: `baseline`'s names read `1_Squa…`.
    Without a terminal (and no COLUMNS) a table is as wide as its contents."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    got = subprocess.run([sys.executable, "-m", "kb_agent.agent.cli", "problems", "list", "--level", "1"],
                         capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert got.returncode == 0, got.stderr
    long_name = (
        "75_conv_transposed_2D_asymmetric_input_asymmetric_kernel_strided__grouped____padded____dilated__"
    )
    assert long_name in got.stdout and "…" not in got.stdout


@pytest.mark.parametrize("option", ["--samples", "--n", "--width", "--branch"])
def test_an_absurd_fan_out_is_refused_before_anything_is_stored(tmp_path, option):
    # found by a new user: --n 10**23 ended in OverflowError's traceback, --n 1000 sent 1000 requests
    # at once, and --samples 10**23 stored trajectories for minutes before the first model call
    db = tmp_path / "kb.sqlite"
    r = runner.invoke(app, ["solve", "--problem", "toy/relu", "--model", "scripted/demo", "--device", "cpu",
                            option, str(10**23), "--db", str(db)], env=WIDE)  # fmt: skip
    assert r.exit_code == 2 and f"Invalid value for '{option}'" in r.output and "Traceback" not in r.output
    assert re.search(r"less than or equal to (10000|256)|not in the range", r.output)
    assert not db.exists()


def test_help_paragraphs_flow_to_the_terminal_not_to_the_docstring_lines():
    # found by a new user: `kb-agent --help` broke report's summary mid-sentence where its docstring wraps
    r = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert "per problem (best of its samples) and per trajectory" in r.output
    for path, cmd in _commands():
        for paragraph in (cmd.help or "").split("\n\n"):
            assert "\n" not in paragraph, (path, paragraph)


def test_a_file_where_a_folder_must_go_is_named_and_a_folder_is_no_candidate(tmp_path, kb_dataset):
    # found by a new user: these said "File exists" (of a path that did not exist) and "no such
    # candidate file" (of a folder)
    (tmp_path / "run.csv").write_text("a,b\n")
    r = runner.invoke(app, ["solve", "-p", "toy/relu", "--model", "scripted/demo", "--device", "cpu",
                            "--db", str(tmp_path / "run.csv" / "kb.sqlite")], env=WIDE)  # fmt: skip
    assert f"({tmp_path / 'run.csv'} is a file, not a folder); choose another --db" in str(r.exception)
    r = runner.invoke(app, ["eval", str(tmp_path), "-p", "toy/relu", "--device", "cpu"], env=WIDE)
    assert "is a folder; give the candidate's .py file" in str(r.exception)
