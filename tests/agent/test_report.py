import json
import os
import subprocess
import sys

import pytest
from kb_agent.agent.cli import app
from kb_agent.agent.report import ReportError, build_report, render_report_text, show_run, turn_code
from kb_agent.agent.store import Store, StoreError
from kb_agent.problems import Problem
from kb_agent.problems.errors import UsageError
from typer.testing import CliRunner

runner = CliRunner()


def problem(pid):
    return Problem(1, pid, f"{pid}_Op", "import torch\n", "hub:ScalingIntelligence/KernelBench")


def add_run(store, name, scripts, *, gpu="NVIDIA H100", precision="fp32", outcome="turn_budget", level=1):
    """One run; `scripts` holds, per problem, a list of (status, speedup) per turn, or (status, speedup,
    EvalResult dict) where the stored result matters (strict mode's record, a profile)."""
    rid = store.create_run(name, {"turns": 3}, "openai/gpt-4o", "cuda", precision, {"kb-agent": "0"})
    if gpu:
        store.set_run_hardware(rid, {"gpu_name": gpu})
    for pid, script in enumerate(scripts, start=1):
        p = Problem(level, pid, f"{pid}_Op", "import torch\n", "test")
        tid = store.create_trajectory(rid, p, 0)
        for i, (status, speedup, *stored) in enumerate(script, start=1):
            u = store.start_turn(tid, i, [{"role": "user", "content": "go"}])
            store.record_response(u, "reply", tokens_in=1000, tokens_out=200, cost_usd=0.02, latency_s=1.0)
            code = None if status == "no_code" else f"# problem {pid} turn {i}\nclass ModelNew: ...\n"
            er = (
                stored[0]
                if stored
                else None
                if status == "no_code"
                else {"status": status, "speedup": speedup}
            )
            store.record_evaluation(u, code=code, status=status, eval_result=er, feedback="")
        if outcome:
            store.finish_trajectory(tid, outcome)
    store.set_run_status(rid, "finished")
    return rid


# problem 1 reaches 1.6x at turn 3; problem 2 is correct at exactly 1.0x; problem 3 never compiles
SCRIPTS = [
    [("incorrect", None), ("correct", 0.9), ("correct", 1.6)],
    [("correct", 1.0), ("no_code", None)],
    [("compile_error", None), ("compile_error", None), ("compile_error", None)],
]


@pytest.fixture
def store(tmp_path):
    s = Store(os.environ["KB_DB"])
    yield s
    s.close()


def fast(section, p):
    (f,) = [f for f in section["fast_p"] if f["p"] == p]
    return f


def test_report_figures_by_hand(store):
    add_run(store, "a", SCRIPTS)
    rep = build_report(store, None, by_turn=True)
    json.dumps(rep)  # serialisable
    (s,) = rep["runs"]
    assert s["run"]["name"] == "a" and s["run"]["gpu"] == "NVIDIA H100" and s["level"] == "1"
    assert (s["problems"], s["trajectories"], s["turns"], s["max_turn"]) == (3, 3, 8, 3)
    f0 = fast(s, 0.0)
    assert {k: v for k, v in f0.items() if k != "ci95"} == {
        "p": 0.0, "numerator": 2, "denominator": 3, "value": pytest.approx(2 / 3)
    }  # fmt: skip
    assert f0["ci95"][0] <= f0["value"] <= f0["ci95"][1]  # a bootstrap interval over the 3 problems
    assert (fast(s, 1.0)["numerator"], fast(s, 1.5)["numerator"], fast(s, 2.0)["numerator"]) == (1, 1, 0)
    assert [r["k"] for r in s["by_turn"]] == [1, 2, 3]
    assert [r["fast_p"][3]["numerator"] for r in s["by_turn"]] == [0, 0, 1]  # fast_1.0 by turn
    assert s["tokens_in"] == {"total": 8000, "per_problem": pytest.approx(8000 / 3)}
    assert s["cost_usd"]["total"] == pytest.approx(0.16)
    assert s["outcomes"] == {"turn_budget": 3}
    assert s["statuses"] == {"compile_error": 3, "correct": 3, "incorrect": 1, "no_code": 1}


def test_text_report_prints_denominator_level_and_gpu(store):
    add_run(store, "a", SCRIPTS)
    text = render_report_text(build_report(store, ["a"], by_turn=True))
    # strict, KernelBench rules, then their intervals
    assert row(text, "fast_1.0")[:5] == ["fast_1.0", "0.333", "(1/3)", "0.333", "(1/3)"]
    assert row(text, "fast_0.0")[:5] == ["fast_0.0", "0.667", "(2/3)", "0.667", "(2/3)"]
    assert len(row(text, "fast_0.0")) == 9 and row(text, "fast_0.0")[5].startswith("[")
    assert "level: 1" in text and "GPU: NVIDIA H100" in text
    assert "0.333 (1/3)" in text.split("fast_p by turn k")[1]
    # no strict record in these results: the report says both columns follow KernelBench's rules
    assert "strict mode: off (parity mode)" in text


def row(text, first, after=None):
    """The words of the first line of `text` (after the line holding `after`) that starts with `first`."""
    if after is not None:
        text = text.split(after, 1)[1]
    return next(line.split() for line in text.splitlines() if line.strip().startswith(first))


def test_unknown_gpu_is_said_so(store):
    add_run(store, "nogpu", SCRIPTS[:1], gpu=None)
    assert "GPU: unknown" in render_report_text(build_report(store, ["nogpu"], False))


def test_a_cpu_dry_run_names_no_gpu(store):
    rid = store.create_run("dry", {"turns": 1, "device": "cpu"}, "openai/scripted", "triton", "fp32")
    store.create_trajectory(rid, problem(1), 0)
    assert "GPU: none (CPU)" in render_report_text(build_report(store, ["dry"], False))


def test_unfinished_and_unstarted_trajectories(store):
    rid = add_run(store, "cut", SCRIPTS[:1], outcome=None)
    store.create_trajectory(rid, problem(9), 0)  # created, never started
    (s,) = build_report(store, ["cut"], False)["runs"]
    assert (s["trajectories"], s["not_started"], s["outcomes"]) == (1, 1, {"unfinished": 1})
    assert fast(s, 1.0)["denominator"] == 1


def test_a_turn_killed_before_its_reply_is_no_model_call(store):
    # a run killed (SIGKILL) while its model call was in flight leaves a turn with no reply and no
    # status: SQL's NULL logic made its model_call NULL, and every report of the run raised TypeError
    rid = add_run(store, "killed", SCRIPTS[:1], outcome=None)
    tid = store.create_trajectory(rid, problem(2), 0)
    store.start_turn(tid, 1, [{"role": "user", "content": "go"}])
    (s,) = build_report(store, ["killed"], False)["runs"]
    assert s["trajectories"] == 2 and fast(s, 0.0)["denominator"] == 2
    assert [t["model_call"] for t in store.turn_summaries(rid) if t["trajectory_id"] == tid] == [0]
    assert "model calls: 3" in render_report_text(build_report(store, ["killed"], False))


def test_several_runs_get_their_own_sections_and_a_comparison(store):
    add_run(store, "a", SCRIPTS)
    add_run(store, "b", SCRIPTS[:2], level=2)
    rep = build_report(store, ["a", "b", "a"], False)
    assert [s["run"]["name"] for s in rep["runs"]] == ["a", "b"]
    assert [fast(s, 0.0)["denominator"] for s in rep["runs"]] == [3, 2]
    text = render_report_text(rep)
    assert "comparison (GPU: NVIDIA H100, precision: fp32)" in text


@pytest.mark.parametrize("kw", [{"gpu": "NVIDIA A100"}, {"precision": "bf16"}, {"gpu": None}])
def test_report_refuses_to_pool_mixed_gpus_or_precisions(store, kw):
    add_run(store, "a", SCRIPTS)
    add_run(store, "b", SCRIPTS, **kw)
    with pytest.raises(ReportError) as e:
        build_report(store, ["a", "b"], False)
    assert "\n" not in str(e.value) and "one at a time" in str(e.value)
    build_report(store, ["b"], False)  # alone it is fine


def test_report_latest_run_by_default(store):
    add_run(store, "first", SCRIPTS)
    add_run(store, "second", SCRIPTS[:1])
    assert build_report(store)["runs"][0]["run"]["name"] == "second"


def test_show_run_and_turn_code(store):
    add_run(store, "a", SCRIPTS)
    shown = show_run(store, "a", problem="1/1")
    (t,) = shown["trajectories"]
    assert (t["problem_key"], t["best_turn"], t["best_speedup"]) == ("1/1", 3, 1.6)
    assert [x["status"] for x in t["turns"]] == ["incorrect", "correct", "correct"]
    assert len(show_run(store, "a", problem="1")["trajectories"]) == 3
    assert turn_code(store, "a", 3, problem="1_Op") == "# problem 1 turn 3\nclass ModelNew: ...\n"
    with pytest.raises(ReportError, match="needs one trajectory"):
        turn_code(store, "a", 1)
    with pytest.raises(ReportError, match="no extracted code"):
        turn_code(store, "a", 2, problem="1/2")
    with pytest.raises(ReportError, match="its turns are 1-2"):
        turn_code(store, "a", 7, problem="1/2")
    with pytest.raises(ReportError, match="its problems: 1/1, 1/2, 1/3"):
        show_run(store, "a", problem="4/1")


def test_runs_show_names_the_best_turn_of_an_unfinished_trajectory(store):
    add_run(store, "cut2", SCRIPTS[:1], outcome=None)  # interrupted after turn 3: no best stored yet
    r = runner.invoke(app, ["runs", "show", "cut2"])
    assert r.exit_code == 0, r.output
    assert "best 1.60x at turn 3" in r.output and "no correct turn" not in r.output


def test_a_running_run_whose_process_is_gone_reads_as_killed(store):
    rid = add_run(store, "k", SCRIPTS[:1])
    store.set_run_status(rid, "running")  # this process owns it: alive
    assert store.get_run("k")["status"] == "running"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    store.db.execute("UPDATE runs SET pid = ? WHERE id = ?", [gone.pid, rid])
    assert store.get_run("k")["status"] == "killed"
    assert [r["status"] for r in store.list_runs()] == ["killed"]
    assert "killed" in runner.invoke(app, ["runs", "list"]).output
    store.db.execute("UPDATE runs SET host = 'another-machine' WHERE id = ?", [rid])
    assert store.get_run("k")["status"] == "running"  # cannot tell from here


def test_resume_refuses_a_run_still_running_in_another_process(store):
    from kb_agent.agent.loop import resume

    rid = add_run(store, "live", SCRIPTS[:1], outcome=None)
    store.set_run_status(rid, "running")
    store.db.execute("UPDATE runs SET pid = ? WHERE id = ?", [os.getppid(), rid])  # alive, not us
    with pytest.raises(StoreError, match="still running .* stop it before resuming"):
        resume("live", model=None, evaluator=None, store=store)


# ---------------------------------------------------------------- the CLI


def test_cli_report_plain_when_piped(store):
    add_run(store, "a", SCRIPTS)
    r = runner.invoke(app, ["report", "--by-turn"])
    assert r.exit_code == 0, r.output
    assert row(r.output, "fast_1.0")[1:3] == ["0.333", "(1/3)"] and "GPU: NVIDIA H100" in r.output
    assert "fast_p by turn k (best correct turn up to k), strict:" in r.output


def test_cli_report_json_and_db_option(store, tmp_path):
    add_run(store, "a", SCRIPTS)
    r = runner.invoke(app, ["report", "a", "--json", "--db", os.environ["KB_DB"]], env={"KB_DB": ""})
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["runs"][0]["fast_p"][3]["numerator"] == 1


def test_cli_report_paired_refuses_the_options_it_would_ignore(store, tmp_path):
    # `report A B --paired --plot DIR` printed the comparison and wrote no figure, without a word
    add_run(store, "a", SCRIPTS)
    add_run(store, "b", SCRIPTS)
    r = runner.invoke(app, ["report", "a", "b", "--paired", "--plot", str(tmp_path / "figs"), "--by-turn"])
    assert isinstance(r.exception, UsageError) and not (tmp_path / "figs").exists()
    assert "drop --by-turn, --plot" in str(r.exception)
    r = runner.invoke(app, ["report", "a", "b", "--paired", "--bootstrap", "50"])
    assert r.exit_code == 0, r.output
    assert "paired: A = a, B = b" in r.output


def test_cli_runs_list_and_show(store):
    rid = add_run(store, "a", SCRIPTS)
    r = runner.invoke(app, ["runs", "list"])
    assert r.exit_code == 0, r.output
    header, row = r.output.splitlines()
    assert header.split() == ["id", "name", "created", "model", "problems", "status"]
    assert row.split()[:2] == [rid, "a"] and row.split()[-2:] == ["3", "finished"]
    r = runner.invoke(app, ["runs", "show", "a", "--problem", "1/1"])
    assert r.exit_code == 0, r.output
    assert "best 1.60x at turn 3" in r.output and "1.60x" in r.output
    assert "$0.0200" in r.output


def test_cli_runs_show_code_prints_the_extracted_code(store):
    add_run(store, "a", SCRIPTS)
    r = runner.invoke(app, ["runs", "show", "a", "--problem", "1/1", "--code", "2"])
    assert r.exit_code == 0, r.output
    assert r.output == "# problem 1 turn 2\nclass ModelNew: ...\n"


def test_cli_errors_are_store_and_report_errors(store):
    r = runner.invoke(app, ["report", "nope"])
    assert isinstance(r.exception, StoreError)
    add_run(store, "a", SCRIPTS)
    add_run(store, "b", SCRIPTS, precision="fp16")
    r = runner.invoke(app, ["report", "a", "b"])
    assert isinstance(r.exception, ReportError)


def _kb_agent(*args, env_db):
    env = {**os.environ, "KB_DB": str(env_db)}
    code = "from agent.cli import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)


def test_cli_unknown_run_is_one_line_and_exit_2(store):
    add_run(store, "a", SCRIPTS[:1])
    r = _kb_agent("runs", "show", "nope", env_db=store.path)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: no run 'nope'") and "kb-agent runs list" in line


def test_cli_missing_database_is_exit_2_and_creates_nothing(tmp_path):
    missing = tmp_path / "none" / "kb.sqlite"
    r = _kb_agent("report", env_db=missing)
    assert r.returncode == 2 and "no kb-agent store" in r.stderr
    assert not missing.parent.exists()


# ---------------------------------------------------------------- strict mode and KernelBench's rules


def strict_eval(status, parity, speedup=None, failed=(), library=None):
    """An EvalResult dict as strict mode stores it: the checks, KernelBench's verdict, a GPU profile."""
    checks = {"static": {"passed": True, "detail": ""}}
    checks.update({name: {"passed": False, "detail": f"{name} failed"} for name in failed})
    profile = None if library is None else {"kernels": [], "total_us": 40.0, "custom_share": 1.0 - library}
    return {"status": status, "speedup": speedup, "profile": profile,
            "strict": {"enabled": True, "parity_status": parity, "checks": checks}}  # fmt: skip


def turn_(status, speedup=None, parity=None, failed=(), library=None):
    return (status, speedup, strict_eval(status, parity or status, speedup, failed, library))


# problem 1: an honest 1.1x (library share 10%), then a cuBLAS GEMM with a fused epilogue at 1.8x that
#   strict mode rejected (KernelBench: correct, library share 98%)
# problem 2: only a 2.5x rejected on two checks (KernelBench: correct, library share 60%)
# problem 3: a compile error, then a correct 0.7x written all in custom kernels (library share 0%)
# problem 4: rejected for side effects and incorrect under KernelBench's rules too
STRICT_SCRIPTS = [
    [
        turn_("correct", 1.1, library=0.1),
        turn_("rejected", 1.8, "correct", ["custom_kernels_do_the_work"], 0.98),
    ],
    [turn_("rejected", 2.5, "correct", ["speed_of_light", "custom_kernels_do_the_work"], 0.6)],
    [turn_("compile_error"), turn_("correct", 0.7, library=0.0)],
    [turn_("rejected", None, "incorrect", ["side_effects"])],
]


def fast_kb(section, p):
    (f,) = [f for f in section["fast_p_kernelbench"] if f["p"] == p]
    return f


def test_strict_and_kernelbench_fast_p_side_by_side_with_the_same_denominators(store):
    add_run(store, "s", STRICT_SCRIPTS)
    (s,) = build_report(store, ["s"], by_turn=True)["runs"]
    strict = [(fast(s, p)["numerator"], fast(s, p)["denominator"]) for p in (0.0, 1.0, 1.5, 2.0)]
    kb = [(fast_kb(s, p)["numerator"], fast_kb(s, p)["denominator"]) for p in (0.0, 1.0, 1.5, 2.0)]
    assert strict == [(2, 4), (1, 4), (0, 4), (0, 4)]
    assert kb == [(3, 4), (2, 4), (2, 4), (1, 4)]
    # the same for every threshold and for every k of the by-turn table
    assert {f["denominator"] for f in s["fast_p"] + s["fast_p_kernelbench"]} == {4}
    (k1, k2) = s["by_turn"]
    assert (k1["fast_p"][3]["numerator"], k1["fast_p_kernelbench"][3]["numerator"]) == (1, 2)  # fast_1.0
    assert (k2["fast_p"][6]["numerator"], k2["fast_p_kernelbench"][6]["numerator"]) == (0, 1)  # fast_2.0
    assert {f["denominator"] for r in s["by_turn"] for f in r["fast_p"] + r["fast_p_kernelbench"]} == {4}

    text = render_report_text(build_report(store, ["s"], by_turn=True))
    assert row(text, "strict", after="the same for both rules);")[:3] == ["strict", "KernelBench", "rules"]
    assert row(text, "fast_1.5")[:5] == ["fast_1.5", "0.000", "(0/4)", "0.500", "(2/4)"]
    assert row(text, "1", after="up to k), strict:")[7:9] == ["0.250", "(1/4)"]  # fast_1.0 at k = 1
    assert row(text, "1", after="up to k), KernelBench rules:")[7:9] == ["0.500", "(2/4)"]


def test_rejections_per_check_and_what_they_cost(store):
    add_run(store, "s", STRICT_SCRIPTS)
    (s,) = build_report(store, ["s"])["runs"]
    assert s["strict"] == {
        "evaluated_turns": 6,
        "strict_turns": 6,
        "rejected_turns": 3,
        "rejected_correct_under_kernelbench": 2,
        "rejections_by_check": {"custom_kernels_do_the_work": 2, "side_effects": 1, "speed_of_light": 1},
    }
    text = render_report_text(build_report(store, ["s"]))
    assert "strict mode: on; 3 turn(s) rejected, 2 of them correct under KernelBench's rules" in text
    assert (
        "rejections per check (a turn can fail several): custom_kernels_do_the_work 2, side_effects 1, speed_of_light 1"
        in text
    )


def test_library_share_of_the_best_turns_is_reported_as_data(store):
    add_run(store, "s", STRICT_SCRIPTS)
    (s,) = build_report(store, ["s"])["runs"]
    # strict's best turns: problem 1 turn 1 (10%), problem 3 turn 2 (0%); KernelBench's: 98%, 60%, 0%
    assert s["library_share"]["strict"] == {
        "n": 2,
        "median": pytest.approx(0.05),
        "min": 0.0,
        "max": pytest.approx(0.1),
    }
    assert s["library_share"]["kernelbench"] == {
        "n": 3,
        "median": pytest.approx(0.6),
        "min": 0.0,
        "max": pytest.approx(0.98),
    }
    text = render_report_text(build_report(store, ["s"]))
    assert (
        "best turns: strict median 5% of 2 (range 0%-10%); KernelBench rules median 60% of 3 (range 0%-98%)"
        in text
    )


def test_runs_show_gives_each_turn_both_verdicts_its_library_share_and_failed_checks(store):
    add_run(store, "s", STRICT_SCRIPTS)
    shown = show_run(store, "s", problem="1/1")
    (t,) = shown["trajectories"]
    assert t["best_kernelbench"] == {"turn": 2, "speedup": 1.8, "library_share": pytest.approx(0.98)}
    r = runner.invoke(app, ["runs", "show", "s", "--problem", "1/1"])
    assert r.exit_code == 0, r.output
    assert "best 1.10x at turn 1 (KernelBench rules: 1.80x at turn 2, library share 98%)" in r.output
    assert row(r.output, "turn")[:5] == ["turn", "status", "KernelBench", "speedup", "library"]
    assert row(r.output, "2 ") == ["2", "rejected", "correct", "1.80x", "98%", "-", "1,000", "200", "$0.0200", "1.0",
                                   "custom_kernels_do_the_work"]  # fmt: skip
    r = runner.invoke(app, ["runs", "show", "s", "--problem", "1/2"])
    assert "no correct turn (KernelBench rules: 2.50x at turn 1, library share 60%)" in r.output


def test_cli_report_by_turn_shows_both_rules(store):
    add_run(store, "s", STRICT_SCRIPTS)
    r = runner.invoke(app, ["report", "--by-turn"])
    assert r.exit_code == 0, r.output
    assert row(r.output, "fast_1.0")[1:5] == ["0.250", "(1/4)", "0.500", "(2/4)"]
    assert "fast_p by turn k (best correct turn up to k), strict:" in r.output
    assert "fast_p by turn k (best correct turn up to k), KernelBench rules:" in r.output
    rep = json.loads(runner.invoke(app, ["report", "--by-turn", "--json"]).output)
    assert rep["runs"][0]["by_turn"][0]["fast_p_kernelbench"][3]["numerator"] == 2


def test_comparison_of_runs_has_both_rules(store):
    add_run(store, "s", STRICT_SCRIPTS)
    add_run(store, "a", SCRIPTS)
    text = render_report_text(build_report(store, ["s", "a"]))
    comparison = text.split("comparison (GPU")[1]
    assert row(comparison, "fast_1.0") == ["fast_1.0", "strict", "0.250", "(1/4)", "0.333", "(1/3)"]
    assert row(comparison, "fast_1.0", after="fast_1.0  strict") == [
        "fast_1.0", "KernelBench", "rules", "0.500", "(2/4)", "0.333", "(1/3)"]  # fmt: skip


def test_a_run_partly_in_strict_mode_says_how_many_turns_were_judged(store):
    add_run(store, "mixed", [[turn_("correct", 1.2)], [("correct", 1.3)]])
    text = render_report_text(build_report(store, ["mixed"]))
    assert "strict mode: on for 1 of 2 evaluated turns; no turn rejected" in text
    assert "rejections per check" not in text
    assert "best turns: strict not measured (no GPU profile); KernelBench rules not measured" in text


def test_runs_show_takes_every_spec_form_solve_takes(store, kb_dataset):
    # found by a new user: `runs show RUN -p toy/1_relu` and `-p 0` (the toy level) were refused,
    # though `solve --problem` takes both
    from kb_agent.agent.llm import ScriptedModel
    from kb_agent.agent.loop import SolveConfig, solve
    from kb_agent.evaluator.fake import ScriptedEvaluator, canned
    from kb_agent.problems import resolve

    config = SolveConfig(turns=1, backend="triton", device="cpu", gpu_name="x", arch="9.0", run_name="toys")
    solve(resolve("toy/relu") + resolve("toy/vector_add"), config, ScriptedModel(["```python\nclass ModelNew: pass\n```"] * 2),
          ScriptedEvaluator([canned("correct")] * 2), store)  # fmt: skip
    for spec, keys in (
        ("toy/1_relu", ["toy/relu"]),
        ("toy/relu", ["toy/relu"]),
        ("0", ["toy/relu", "toy/vector_add"]),
    ):
        assert [t["problem_key"] for t in show_run(store, "toys", problem=spec)["trajectories"]] == keys
    with pytest.raises(ReportError, match="has no problem 'toy/3'"):
        show_run(store, "toys", problem="toy/3")
