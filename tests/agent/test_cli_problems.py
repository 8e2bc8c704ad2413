import subprocess
import sys

from kb_agent.agent.cli import app
from typer.testing import CliRunner

runner = CliRunner()
CLI = [sys.executable, "-m", "kb_agent.agent.cli"]  # main(), as the console script runs it


def test_version_matches_package_metadata():
    from importlib.metadata import version

    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"kb-agent {version('kb-agent')}"


def test_problems_show_prints_reference_plain_when_piped(kb_dataset):
    r = runner.invoke(app, ["problems", "show", "2/40"])
    assert r.exit_code == 0
    assert r.output.startswith("import torch")
    assert "class Model(nn.Module)" in r.output


def test_problems_list_level_1_lists_100(kb_dataset):
    r = runner.invoke(app, ["problems", "list", "--level", "1"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    assert "100 problems" in r.output and "19_ReLU" in r.output


def test_bad_spec_is_one_line_and_exit_2(kb_dataset):
    # through the real console script, so main()'s error handling is what is tested
    r = subprocess.run(
        [*CLI, "problems", "show", "5/1"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["error: level 5 does not exist; levels: 1, 2, 3, 4 (and toy)"]


def test_help_does_not_import_heavy_modules():
    code = (
        "import sys; sys.argv=['kb-agent','--help']\n"
        "from kb_agent.agent.cli import main\n"
        "try: main()\n"
        "except SystemExit: pass\n"
        "heavy = [m for m in ('torch', 'triton', 'litellm', 'datasets') if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "HEAVY []" in r.stdout


def test_solve_rejects_bad_sampling_options_in_one_line(tmp_path):
    for args, words in (
        (["--temperature", "-5"], "--temperature"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--reasoning-effort", "extreme"], "choose minimal, low, medium or high"),
    ):
        r = subprocess.run(
            [*CLI, "solve", "--problem", "toy/relu",
             "--model", "openai/x", "--device", "cpu", "--backend", "triton", "--db", str(tmp_path / "kb.sqlite"),
             *args],
            capture_output=True, text=True,
        )  # fmt: skip
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_stage_limits_parse_and_bad_values_are_one_line_errors(tmp_path):
    import pytest
    from kb_agent.evaluator.settings import StageLimits

    lim = StageLimits.parse("build=600, timing=1.5")
    assert (lim.build_s, lim.timing_s, lim.correctness_s) == (600.0, 1.5, StageLimits().correctness_s)
    assert StageLimits.parse("setup=9").start_s == 9.0  # the name results use for the start stage
    for bad in ("bild=3", "build=abc", "timing=0", "build=-1", "start=inf", "build=5,build=6", "correctness"):
        with pytest.raises(ValueError):
            StageLimits.parse(bad)
    cand = tmp_path / "c.py"
    cand.write_text("class ModelNew: ...\n")
    for args in (
        ["eval", str(cand), "-p", "toy/relu", "--device", "cpu"],
        ["problems", "check", "toy", "--device", "cpu"],
    ):
        cmd = [*CLI, *args, "--stage-limits", "bild=3"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "unknown stage 'bild'" in r.stderr
    cmd = [*CLI, "eval", str(cand), "-p", "toy/relu"]
    r = subprocess.run([*cmd, "--device", "cpu", "--baseline", "compile"], capture_output=True, text=True)
    assert r.returncode == 2 and "--baseline compile times torch.compile on the GPU" in r.stderr, r.stderr
