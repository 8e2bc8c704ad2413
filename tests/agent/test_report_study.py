"""The study figures of `kb-agent report` (issue 17): samples counted per problem and per trajectory,
fast_p@k, intervals, GPU-seconds from the stored stage times, budgets, per level and per problem, the
status mix, baselines from the cache (never another GPU's), and the plots. Stored results are built
in the tests."""

import json
import os

import pytest
from kb_agent.agent.cli import app
from kb_agent.agent.report import ReportError, build_report, render_report_text, render_show_text, show_run
from kb_agent.agent.report.text import budget_labels, fmt_speedup
from kb_agent.agent.store import Store
from kb_agent.agent.store.baselines import find_baselines, record_baseline
from kb_agent.problems import Problem
from kb_agent.problems.errors import UsageError
from typer.testing import CliRunner

runner = CliRunner()
GPU = "NVIDIA H200"


@pytest.fixture
def store():
    s = Store(os.environ["KB_DB"])
    yield s
    s.close()


def stored(status, speedup=None, correctness_s=1.0, timing_s=2.0):
    return {"status": status, "speedup": speedup,
            "stages": {"setup": 5.0, "build": 30.0, "correctness": correctness_s, "timing": timing_s}}  # fmt: skip


def add_run(store, name, problems, *, gpu=GPU, torch="2.13.0", level=1, cost=0.01, levels=None, device=None,
            tokens=lambda pid, i: 1000 * i):  # fmt: skip
    """`problems`: per problem, per sample, a list of (status, speedup) per turn; `device` "cpu": a
    `--device cpu` run (no GPU); `tokens(problem, turn)`: the prompt tokens of a turn."""
    config = {"turns": 3, **({"device": device} if device else {})}
    rid = store.create_run(name, config, "openai/gpt-x", "cuda", "fp32", {"kb-agent": "0", "torch": torch})
    if gpu and device != "cpu":
        store.set_run_hardware(rid, {"gpu_name": gpu, "torch": torch})
    for pid, samples in enumerate(problems, start=1):
        lv = levels[pid - 1] if levels else level
        p = Problem(lv, pid, f"{pid}_Op", f"# reference {pid}\n", "test")
        for sample, script in enumerate(samples):
            tid = store.create_trajectory(rid, p, sample)
            for i, (status, speedup) in enumerate(script, start=1):
                u = store.start_turn(tid, i, [{"role": "user", "content": "go"}])
                store.record_response(
                    u, "reply", tokens_in=tokens(pid, i), tokens_out=100, cost_usd=cost, latency_s=1.0
                )
                store.record_evaluation(
                    u, code="x", status=status, eval_result=stored(status, speedup), feedback=""
                )
            store.finish_trajectory(tid, "turn_budget")
    store.set_run_status(rid, "finished")
    return rid


def fp(fs, p):
    (f,) = [f for f in fs if f["p"] == p]
    return f["numerator"], f["denominator"]


# the example: 2 problems x 3 samples. Problem 1: two samples correct (1.5x, 0.9x); problem 2:
# one sample correct (2.0x at turn 2). Per trajectory that read 3/6; best of 3 per problem it is 2/2.
SAMPLES = [
    [[("correct", 1.5)], [("incorrect", None)], [("compile_error", None), ("correct", 0.9)]],
    [[("incorrect", None), ("correct", 2.0)], [("compile_error", None)], [("runtime_error", None)]],
]


def test_several_samples_count_per_problem_by_default_and_per_trajectory_beside(store):
    add_run(store, "s3", SAMPLES)
    (s,) = build_report(store, ["s3"], by_turn=True)["runs"]
    assert (s["problems"], s["trajectories"], s["samples"]) == (2, 6, {"max": 3, "min": 3})
    assert [fp(s["fast_p"], p) for p in (0.0, 1.0, 1.5)] == [(2, 2), (2, 2), (1, 2)]
    assert [fp(s["per_trajectory"]["fast_p"], p) for p in (0.0, 1.0)] == [(3, 6), (2, 6)]
    assert fp(s["fast_p_kernelbench"], 0.0) == (2, 2)  # both rules, the same denominators
    at = {r["k"]: r["fast_p"][0]["value"] for r in s["fast_p_at_k"]["strict"]}  # fast_0.0 @k
    assert at == {1: pytest.approx(0.5), 2: pytest.approx((1.0 + 2 / 3) / 2), 3: 1.0}  # pass@2: 1, 1 - 1/3
    # by turn, per problem: k = 1 only problem 1 (1.5x); k = 2 both
    assert [fp(r["fast_p"], 0.0) for r in s["by_turn"]] == [(1, 2), (2, 2)]
    text = render_report_text(build_report(store, ["s3"]))
    assert "fast_p per problem: the best of its 3 samples (denominator: problems" in text
    assert "fast_p per trajectory: every sample counted on its own (denominator: trajectories" in text
    assert "fast_p@k over samples (Chen et al. 2021's unbiased estimator" in text
    assert "samples per problem: 3" in text


def test_one_sample_shows_one_table_and_intervals_can_be_turned_off(store):
    add_run(store, "one", [s[:1] for s in SAMPLES])
    (s,) = build_report(store, ["one"], resamples=0)["runs"]
    assert s["per_trajectory"] is None and s["fast_p_at_k"] is None
    assert {f["ci95"] for f in s["fast_p"]} == {None}
    text = render_report_text(build_report(store, ["one"]))
    assert "per trajectory" not in text and "95% CI: bootstrap over problems" in text
    (s,) = build_report(store, ["one"])["runs"]
    lo, hi = s["fast_p"][0]["ci95"]
    assert 0.0 <= lo <= s["fast_p"][0]["value"] <= hi <= 1.0


def test_gpu_seconds_are_the_correctness_and_timing_stages(store):
    add_run(store, "g", [[[("correct", 1.5), ("incorrect", None)]]])
    rid = store.get_run("g")["id"]
    assert [t["gpu_s"] for t in store.turn_summaries(rid)] == [3.0, 3.0]  # 1 + 2; setup and build left out
    (s,) = build_report(store, ["g"], by_budget=True)["runs"]
    assert s["gpu_s"] == {"total": 6.0, "per_problem": 6.0, "device": "GPU"}
    curve = s["by_budget"]["gpu_s"]
    assert [(c["budget"], fp(c["fast_p"], 1.0)) for c in curve] == [(3.0, (1, 1)), (6.0, (1, 1))]
    tokens = s["by_budget"]["tokens"]  # 1100 after turn 1, 1100 + 2100 after turn 2
    assert [c["budget"] for c in tokens] == [1100.0, 3200.0]
    text = render_report_text(build_report(store, ["g"], by_budget=True))
    assert "fast_p against GPU-seconds per trajectory (correctness and timing stages)" in text
    assert "GPU-seconds (correctness and timing stages): 6 total" in text


def test_per_level_per_problem_geomean_and_status_mix(store):
    add_run(
        store,
        "lv",
        [[[("correct", 2.0)]], [[("correct", 0.5)]], [[("compile_error", None)]]],
        levels=[1, 1, 2],
    )
    rep = build_report(store, ["lv"], by_turn=True)
    (s,) = rep["runs"]
    assert [(r["level"], r["problems"], fp(r["fast_p"], 0.0)) for r in s["per_level"]] == [
        ("1", 2, (2, 2)),
        ("2", 1, (0, 1)),
    ]
    assert s["per_level"][0]["geomean_speedup"]["value"] == pytest.approx(1.0)  # sqrt(2 x 0.5)
    g = s["geomean_speedup"]["strict"]["trajectory"]
    assert (g["value"], g["n"], g["of"]) == (pytest.approx(1.0), 2, 3)
    assert [(r["problem"], r["correct_samples"], r["best_speedup"], r["first_correct_turn"]) for r in s["problems_table"]] == [
        ("1/1", 1, 2.0, 1), ("1/2", 1, 0.5, 1), ("2/3", 0, None, None)
    ]  # fmt: skip
    assert s["status_by_turn"] == [
        {"k": 1, "counts": {"correct": 2, "compile_error": 1}, "ended": 0, "trajectories": 3}
    ]
    text = render_report_text(rep, per_problem=True)
    assert (
        "fast_p per level (per problem)" in text and "status mix by turn" in text and "per problem:" in text
    )
    assert "geometric-mean speedup, correct trajectories only: strict 1.00x over 2 of 3 trajectories" in text


def baseline(sha_of, pid, eager, compiled, *, gpu=GPU, torch="2.13.0", mode="default"):
    return {"key": f"1/{pid}", "problem_key": f"1/{pid}", "level": 1, "problem_id": pid, "name": f"{pid}_Op",
            "code_sha256": sha_of(pid), "device": "cuda", "precision": "fp32", "gpu_name": gpu, "torch": torch,
            "compile_mode": mode, "status": "ok" if compiled else "compile_failed", "message": "ok",
            "method": "cuda_event_sync", "eager_ms": eager, "compile_ms": compiled, "compile_s": 20.0,
            "compile_error": None if compiled else "boom"}  # fmt: skip


def sha(pid):
    return Problem(1, pid, f"{pid}_Op", f"# reference {pid}\n", "test").code_sha256


def test_fast_p_against_eager_torch_compile_and_the_faster_never_another_gpus_timings(store):
    # problem 1: 1.5x over eager; torch.compile runs it in half eager's time -> 0.75x against it
    # problem 2: 2.0x over eager; torch.compile slower than eager (1.25x eager ms) -> 2.5x, faster of the two: eager
    # problem 3: 1.2x; torch.compile failed there -> left out against torch.compile, eager for the faster
    add_run(store, "b", [[[("correct", 1.5)]], [[("correct", 2.0)]], [[("correct", 1.2)]]])
    record_baseline(store, baseline(sha, 1, 1.0, 0.5))
    record_baseline(store, baseline(sha, 2, 1.0, 1.25))
    record_baseline(store, baseline(sha, 3, 1.0, None))
    # another GPU, another torch version and the other mode hold figures that would change every number
    for kw in ({"gpu": "NVIDIA A100"}, {"torch": "2.5.0"}, {"mode": "max-autotune"}):
        for pid in (1, 2, 3):
            record_baseline(store, baseline(sha, pid, 1.0, 0.01, **kw))
    assert len(find_baselines(store)) == 12
    (s,) = build_report(store, ["b"])["runs"]
    b = s["baselines"]
    got = (b["gpu"], b["torch"], b["covered"], b["problems"], b["compile_failed"])
    assert got == (GPU, "2.13.0", 3, 3, 1)
    assert [fp(b["fast_p"]["eager"], p) for p in (1.0, 1.5)] == [(3, 3), (1, 3)]
    assert [fp(b["fast_p"]["compile"], p) for p in (0.8, 1.0, 2.0)] == [(1, 2), (1, 2), (1, 2)]  # 0.75x, 2.5x
    assert [fp(b["fast_p"]["best"], p) for p in (0.5, 1.0, 1.5)] == [(3, 3), (2, 3), (1, 3)]  # 0.75, 2.0, 1.2
    assert b["compile_over_eager"]["value"] == pytest.approx((2.0 * 0.8) ** 0.5)
    assert b["geomean_speedup"]["strict"]["compile"]["value"] == pytest.approx((0.75 * 2.5) ** 0.5)
    text = render_report_text(build_report(store, ["b"]))
    assert (
        "fast_p against the baselines (KernelBench rules; strict mode off, per problem; 3 of 3 problems have a baseline on NVIDIA H200"
        in text
    )
    assert "torch.compile failed on 1" in text
    # max-autotune on request: those figures (0.01 ms) and no others
    (s,) = build_report(store, ["b"], compile_mode="max-autotune")["runs"]
    assert fp(s["baselines"]["fast_p"]["compile"], 2.0) == (0, 3)


def test_no_baseline_for_the_runs_gpu_is_said_so(store):
    add_run(store, "nb", [[[("correct", 1.5)]]], gpu="NVIDIA L4")
    record_baseline(store, baseline(sha, 1, 1.0, 0.5))  # an H200 figure: not the run's GPU
    (s,) = build_report(store, ["nb"])["runs"]
    assert s["baselines"]["covered"] == 0
    assert "baselines: none stored for these problems on NVIDIA L4" in render_report_text(
        build_report(store, ["nb"])
    )
    add_run(store, "nogpu", [[[("correct", 1.5)]]], gpu=None)
    assert "baselines: none to compare with (the run's GPU is unknown" in render_report_text(
        build_report(store, ["nogpu"])
    )


def test_report_options_reach_the_report(store):
    add_run(store, "c", SAMPLES)
    r = runner.invoke(app, ["report", "c", "--json", "--bootstrap", "0", "--by-budget"])
    assert r.exit_code == 0, r.output
    (s,) = json.loads(r.output)["runs"]
    assert s["fast_p"][0]["ci95"] is None and set(s["by_budget"]) == {"tokens", "cost_usd", "gpu_s"}
    assert s["by_turn"] is None
    r = runner.invoke(app, ["report", "c", "--per-problem", "--by-budget"])
    assert r.exit_code == 0 and "per problem:" in r.output and "fast_p against tokens" in r.output
    r = runner.invoke(app, ["report", "c", "--compile-mode", "fastest"])
    assert isinstance(r.exception, ReportError) and "unknown compile mode 'fastest'" in str(r.exception)
    from kb_agent.agent import metrics

    assert (
        f"[default: {metrics.BOOTSTRAP_RESAMPLES}]"
        in runner.invoke(app, ["report", "-h"], env={"COLUMNS": "250"}).output
    )


def table_rows(text, title):
    """The rows (cells split on runs of 2+ spaces) of the text table whose title starts with `title`."""
    lines = text.split("\n" + title, 1)[1].splitlines()[2:]  # the rest of the title line, the headers
    rows = []
    for line in lines:
        if not line.startswith("  "):
            break
        rows.append([c.strip() for c in line.strip().split("  ") if c.strip()])
    return rows


# 12 problems, 4 turns each, every trajectory spending a little more than the last: 48 budget steps.
# Problems 1 and 2 are correct at turn 1, problem 5 at turn 2 and problem 7 (1.5x) at turn 3, so fast_p
# changes at steps that six rows spread over the curve miss.
STAGGERED = [[[("correct", 0.05 / pid)] * 4] if pid in (1, 2) else
             [[("incorrect", None), ("correct", 0.0031), ("incorrect", None), ("incorrect", None)]] if pid == 5
             else [[("incorrect", None)] * 2 + [("correct", 1.5)] * 2] if pid == 7
             else [[("compile_error", None)] * 4] for pid in range(1, 13)]  # fmt: skip


def test_the_budget_table_shows_every_step_where_a_fast_p_changes(store):
    add_run(store, "st", STAGGERED, tokens=lambda pid, i: 1000 * i + 37 * pid)
    rep = build_report(store, ["st"], by_budget=True, resamples=0)
    curve = rep["runs"][0]["by_budget"]["tokens"]
    values = [[f["numerator"] for f in c["fast_p"]] for c in curve]
    changes = [i for i in range(1, len(curve)) if values[i] != values[i - 1]]
    assert len(changes) == 3 and 0 not in changes  # the test's premise: fast_p steps up at 3 inner budgets
    text = render_report_text(rep)
    rows = table_rows(text, "fast_p against tokens")
    want = sorted({0, *changes, len(curve) - 1})
    assert [r[0] for r in rows] == [f"{curve[i]['budget']:,.0f}" for i in want]
    assert [r[1] for r in rows] == [f"{values[i][0] / 12:.3f} ({values[i][0]}/12)" for i in want]
    merged = len(curve) - len(want)
    assert f"{merged} budget steps without a change merged into the row above" in text


def test_budget_rows_never_read_the_same_for_different_budgets():
    """Seen on the H200: GPU-seconds 2.61, 2.64 and 2.66 all printed as `2.6`, three rows that looked
    like one budget; decimals are added until neighbours differ, and only as many as needed."""
    assert budget_labels([0.0, 1.3, 2.61, 2.64, 2.66, 17.3]) == ["0", "1.30", "2.61", "2.64", "2.66", "17.30"]
    assert budget_labels([0.0, 1.3, 2.6, 17.3]) == ["0", "1.3", "2.6", "17.3"]
    assert budget_labels([1.0001, 1.0002]) == ["1.0001", "1.0002"]  # three more decimals at most
    assert budget_labels([1_100.0, 3_200.0, 125.4]) == ["1,100", "3,200", "125"]
    assert budget_labels([0.00011, 0.00012], money=True) == ["$0.00011", "$0.00012"]


@pytest.mark.parametrize("cost", [None, 0.0])  # no known price; a scripted or local model's $0
def test_no_dollar_table_or_column_where_no_cost_was_recorded(store, cost):
    add_run(store, "free", SAMPLES, cost=cost)
    text = render_report_text(build_report(store, ["free"], by_budget=True))
    assert "fast_p against tokens" in text and "fast_p against US dollars" not in text
    assert "$0" not in text and text.count("no cost recorded") == 1
    shown = render_show_text(show_run(store, "free"))
    assert "cost" not in shown.splitlines()[3].split() and "$0" not in shown
    assert shown.count("no cost recorded") == 1
    add_run(store, "paid", SAMPLES, cost=0.01)
    text = render_report_text(build_report(store, ["paid"], by_budget=True))
    assert "fast_p against US dollars" in text and "no cost recorded" not in text
    assert "cost" in render_show_text(show_run(store, "paid")).splitlines()[3].split()


def test_a_cpu_run_reports_cpu_seconds_in_the_tables_and_the_json(store):
    add_run(store, "cpu", SAMPLES, device="cpu")
    rep = build_report(store, ["cpu"], by_budget=True)
    text = render_report_text(rep)
    assert "GPU-seconds" not in text and "GPU: none (CPU)" in text
    assert "fast_p against CPU-seconds per trajectory (correctness and timing stages)" in text
    (s,) = rep["runs"]
    assert s["gpu_s"]["device"] == "CPU" and "gpu_s" in s["by_budget"]  # the old key, said what it counts
    add_run(store, "gpu", SAMPLES)
    (s,) = build_report(store, ["gpu"])["runs"]
    assert s["gpu_s"]["device"] == "GPU"


def test_small_speedups_keep_significant_digits(store):
    assert [fmt_speedup(x) for x in (None, 1.6, 0.9, 0.1, 0.05, 0.0031, 0.0008, 0.0)] == [
        "-", "1.60x", "0.90x", "0.10x", "0.050x", "0.0031x", "0.00080x", "0.00x"
    ]  # fmt: skip
    add_run(store, "slow", [[[("correct", 0.0031)]], [[("correct", 0.0008)]]], device="cpu")
    rep = build_report(store, ["slow"])
    text = render_report_text(rep, per_problem=True)
    assert "0.00x" not in text and "0.0031x" in text and "0.00080x" in text
    assert "0.0016x over 2 of 2 trajectories" in text  # the geometric mean
    assert "best 0.0031x at turn 1" in render_show_text(show_run(store, "slow"))


PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # every figure drawn and saved for one run and for three, about 6 s on 2 cores
def test_plots_of_one_run_and_of_several(store, tmp_path):
    add_run(store, "p1", SAMPLES)
    add_run(store, "p2", [s[:2] for s in SAMPLES], cost=None)  # no price known: no dollar curve, said so
    out = tmp_path / "plots"
    r = runner.invoke(app, ["report", "p1", "--plot", str(out)])
    assert r.exit_code == 0, r.output
    names = {"fast_p_by_turn.png", "fast_p_by_budget.png", "status_mix.png", "speedup_distribution.png"}
    assert {p.name for p in out.iterdir()} == names
    assert "fast_p by turn k" not in r.output  # the plot's tables are not printed unless asked
    r = runner.invoke(app, ["report", "p1", "p2", "--plot", str(out)])
    assert r.exit_code == 0, r.output
    assert {p.name for p in out.iterdir()} == names | {"compare_runs.png"}
    for p in out.iterdir():
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 10_000
    blocked = tmp_path / "file"
    blocked.write_text("")
    r = runner.invoke(app, ["report", "p1", "--plot", str(blocked / "sub")])
    assert isinstance(r.exception, UsageError) and "cannot write plots to" in str(r.exception)


@pytest.mark.slow  # a real run: 2 samples x 3 turns evaluated under the Triton interpreter
def test_a_two_sample_run_through_the_fake_model_server_then_report_and_plots(fake_llm, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    replies = sorted((Path(__file__).resolve().parents[2] / "agent" / "scripted" / "demo").glob("*.md"))
    fake_llm.add(*[p.read_text() for p in replies] * 2)
    db = tmp_path / "kb.sqlite"
    cli = [sys.executable, "-m", "kb_agent.agent.cli"]
    solve = [*cli, "solve", "--problem", "toy/relu", "--turns", "3", "--samples", "2", "--model", "openai/scripted",
             "--api-base", fake_llm.openai_base, "--device", "cpu", "--db", str(db), "--run-name", "two", "--no-retime"]  # fmt: skip
    r = subprocess.run(solve, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "plots"
    r = subprocess.run([*cli, "report", "two", "--db", str(db), "--json", "--plot", str(out)], capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    (s,) = json.loads(r.stdout)["runs"]
    assert (s["problems"], s["trajectories"]) == (1, 2)
    assert fp(s["fast_p"], 0.0) == (1, 1) and s["per_trajectory"]["fast_p"][0]["denominator"] == 2
    assert s["gpu_s"]["total"] > 0  # the stored stage times of the evaluations
    # the samples ask at once, so which sample got which reply varies; the mix of all turns does not
    assert sum(sum(r["counts"].values()) for r in s["status_by_turn"]) == 6
    assert (
        s["statuses"] == {"compile_error": 2, "incorrect": 2, "correct": 2}
        or sum(s["statuses"].values()) == 6
    )
    assert len(list(out.glob("*.png"))) == 4
