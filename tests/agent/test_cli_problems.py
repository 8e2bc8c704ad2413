import subprocess
import sys

import pytest
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
    r = runner.invoke(
        app, ["problems", "list", "--level", "1/19"], env={"COLUMNS": "200"}
    )  # a spec, as -h says
    assert r.exit_code == 0 and r.output.rstrip().endswith("\n1 problem") and "19_ReLU" in r.output


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
    # `eval --stage-limits start=1e300` ended in OverflowError's traceback (the wait for the child's start)
    assert StageLimits.parse("start=2592000").start_s == 2592000.0
    with pytest.raises(ValueError, match="over 2592000 s"):
        StageLimits.parse("start=1e300")
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


# ---------------------------------------------------------------- degenerate problems (issue 19)

DEGENERATE = __import__("pathlib").Path(__file__).resolve().parent.parent / "problems_degenerate"


@pytest.mark.slow  # 3.2 s (the default run's 3-minute budget)
def test_problems_check_level_4_says_why_it_cannot_be_checked(kb_dataset, tmp_path):
    import json

    from kb_agent.agent.store import Store

    db = tmp_path / "kb.sqlite"
    r = runner.invoke(app, ["problems", "check", "4/7", "--device", "cpu", "--json", "--db", str(db)])
    assert r.exit_code == 0, r.output
    (c,) = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    # transformers is missing here, or installed with nothing cached: either way it fetches gpt2's weights
    assert c["status"] == "unchecked" and c["flags"] == [] and not c["reference_fails"], c
    assert "downloads" in c["unchecked"]["reason"] and "from_pretrained" in c["message"]
    with Store(db) as s:
        (row,) = s.problem_checks()
    assert row["status"] == "unchecked" and "downloads" in row["unchecked_reason"]
    r = runner.invoke(
        app, ["problems", "check", "4/7", "--device", "cpu", "--db", str(db)], env={"COLUMNS": "300"}
    )
    assert "unchecked" in r.output and "from_pretrained" in r.output and "1 unchecked" in r.output


def _run_on(store, problems, speedups):
    """A finished run: one trajectory per problem, one correct turn at each speedup (None: incorrect)."""
    rid = store.create_run("r", {}, "openai/m", "triton", "fp32")
    store.set_run_hardware(rid, {"gpu_name": "NVIDIA H200"})
    for p, speedup in zip(problems, speedups, strict=True):
        tid = store.create_trajectory(rid, p, 0)
        u = store.start_turn(tid, 1, [{"role": "user", "content": "go"}])
        store.record_response(u, "reply")
        status = "incorrect" if speedup is None else "correct"
        store.record_evaluation(u, code="class ModelNew: ...\n", status=status,
                                eval_result={"status": status, "speedup": speedup}, feedback="")  # fmt: skip
        store.finish_trajectory(tid, "turn_budget")
    store.set_run_status(rid, "finished")


def test_report_lists_findings_and_excludes_degenerate_problems_printing_both(tmp_path):
    from kb_agent.agent.store import Store
    from kb_agent.problems import resolve

    db = tmp_path / "kb.sqlite"
    problems = resolve(str(DEGENERATE))[:3]  # 1_signal_fades, 2_mostly_table, 3_mostly_zeros
    with Store(db) as store:
        _run_on(store, problems, [3.0, 1.5, None])
        for p, flags in zip(problems, (["input_independent"], ["zeros_pass_loose"], []), strict=True):
            store.record_problem_check({
                "key": p.key, "level": p.level, "problem_id": p.problem_id, "name": p.name,
                "precision": "fp32", "code_sha256": p.code_sha256, "gpu_name": "NVIDIA H200",
                "status": "flagged" if flags else "ok", "flags": flags, "details": [],
                "findings": [{"flag": f, "atol": 1e-2 if "loose" in f else 1e-4, "rtol": 1e-4, "fraction": 1.0,
                              "threshold": 1.0, "precisions": ["fp16", "bf16"] if "loose" in f else ["fp32"]}
                             for f in flags],
            })  # fmt: skip
    r = runner.invoke(app, ["report", "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert "1_signal_fades input_independent at 0.0001" in r.output
    assert "2_mostly_table zeros_pass_loose at 0.01 (fp16, bf16)" in r.output
    assert "3 of 3 checked" in r.output and "without the" not in r.output
    r = runner.invoke(app, ["report", "--db", str(db), "--exclude-degenerate"])
    assert r.exit_code == 0, r.output
    # both figures: over the 3 problems, and without 1_signal_fades (a `_loose` flag does not count)
    assert "without the 1 degenerate problem(s) (1_signal_fades;" in r.output
    lines = [line.split() for line in r.output.splitlines() if line.strip().startswith("fast_1.0 ")]
    assert [(cells[1], cells[2]) for cells in lines] == [("0.667", "(2/3)"), ("0.500", "(1/2)")], r.output
    r = runner.invoke(app, ["report", "--db", str(db), "--exclude-degenerate", "--json"])
    (s,) = __import__("json").loads(r.output)["runs"]
    assert (
        s["excluding_degenerate"]["excluded"] == ["1_signal_fades"]
        and s["excluding_degenerate"]["problems"] == 2
    )
