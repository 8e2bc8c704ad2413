"""`kb-agent baseline`: the reference timed eager and under torch.compile in the evaluator's isolated
child, cached in the store per (reference SHA-256, GPU, precision, torch version, mode)."""

import os
import textwrap

import pytest
from kb_agent.agent.baseline import baseline_settings, local_torch_version, run_baselines
from kb_agent.agent.cli import app
from kb_agent.agent.report import build_report, render_report_text
from kb_agent.agent.store import Store
from kb_agent.agent.store.baselines import find_baselines
from kb_agent.evaluator import EvalSettings
from kb_agent.evaluator.runner import time_baseline
from kb_agent.problems import Problem, resolve_one
from kb_agent.problems.errors import UsageError
from typer.testing import CliRunner

runner = CliRunner()
CPU = EvalSettings(device="cpu")


@pytest.fixture
def store():
    s = Store(os.environ["KB_DB"])
    yield s
    s.close()


def fake_timer(calls, status="ok"):
    def time_fn(p, settings, mode):
        calls.append((p.key, settings.strict, mode))
        return {"key": p.key, "problem_key": p.key, "level": p.level, "problem_id": p.problem_id, "name": p.name,
                "code_sha256": p.code_sha256, "device": settings.device, "precision": settings.precision,
                "gpu_name": None, "torch": local_torch_version(), "compile_mode": mode, "status": status,
                "message": "ok" if status == "ok" else "the reference failed", "eager_ms": 2.0,
                "compile_ms": 1.0 if status == "ok" else None, "compile_s": 3.0, "compile_error": None}  # fmt: skip

    return time_fn


def test_baselines_are_cached_per_reference_and_mode_and_failures_are_not_stored(store):
    relu, add = resolve_one("toy/relu"), resolve_one("toy/vector_add")
    calls = []
    first = run_baselines([relu, add], CPU, store=store, time_fn=fake_timer(calls))
    assert [r["cached"] for r in first] == [False, False] and len(calls) == 2
    assert calls[0][1] is False  # strict mode (and its sandbox) off: only the reference runs
    again = run_baselines([relu, add], CPU, store=store, time_fn=fake_timer(calls))
    assert [r["cached"] for r in again] == [True, True] and len(calls) == 2 and again[0]["compile_ms"] == 1.0
    run_baselines([relu], CPU, store=store, compile_mode="max-autotune", time_fn=fake_timer(calls))
    run_baselines([relu], CPU, store=store, force=True, time_fn=fake_timer(calls))
    assert len(calls) == 4 and {r["compile_mode"] for r in find_baselines(store)} == {
        "default",
        "max-autotune",
    }
    assert {r["gpu"] for r in find_baselines(store)} == {"cpu"}
    # a reference whose source changed is another baseline
    changed = Problem(0, 1, "relu", relu.code + "\n# edited\n", "test")
    run_baselines([changed], CPU, store=store, time_fn=fake_timer(calls))
    assert len(calls) == 5
    # a measurement that reached no figure is returned, not stored: the next call tries again
    broken = Problem(0, 9, "broken", "raise SystemExit\n", "test")
    (r,) = run_baselines([broken], CPU, store=store, time_fn=fake_timer(calls, status="error"))
    assert r["status"] == "error" and not find_baselines(store, code_sha256=broken.code_sha256)
    with pytest.raises(UsageError, match="compile mode"):
        run_baselines([relu], CPU, store=store, compile_mode="fast", time_fn=fake_timer(calls))


def test_baseline_settings_keep_the_protocol_and_drop_the_candidate_watchers():
    s = baseline_settings(EvalSettings(device="cpu", timed_trials=7, warmup=2))
    assert (s.strict, s.sandbox, s.profile, s.timed_trials, s.warmup) == (False, False, False, 7, 2)


def test_a_reference_that_fails_is_an_error_in_its_child_not_a_crash(tmp_path):
    bad = Problem(0, 9, "bad", textwrap.dedent("""
        import torch
        class Model(torch.nn.Module):
            def forward(self, x):
                raise RuntimeError("reference broke")
        def get_inputs():
            return [torch.randn(4)]
        def get_init_inputs():
            return []
    """), "test")  # fmt: skip
    r = time_baseline(bad, baseline_settings(CPU))
    assert r["status"] == "error" and "reference broke" in r["message"]
    assert r["eager_ms"] is None and r["compile_ms"] is None and r["torch"] and r["gpu_name"] is None


def test_cli_baseline_refuses_an_unknown_mode_and_a_missing_gpu():
    r = runner.invoke(app, ["baseline", "toy/relu", "--device", "cpu", "--mode", "fastest"])
    assert isinstance(r.exception, UsageError) and "unknown --mode 'fastest'" in str(r.exception)
    import torch

    if not torch.cuda.is_available():
        r = runner.invoke(app, ["baseline", "toy/relu"])
        assert isinstance(r.exception, UsageError) and "pass --device cpu" in str(r.exception)


@pytest.mark.slow  # a real torch.compile (inductor's C++ backend): about a minute on two cores
def test_cli_baseline_on_the_cpu_and_a_report_against_torch_compile(store):
    r = runner.invoke(app, ["baseline", "toy/relu", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    (row,) = find_baselines(store)
    assert row["status"] == "ok" and row["gpu"] == "cpu" and row["eager_ms"] > 0 and row["compile_ms"] > 0
    assert row["torch"] == local_torch_version() and row["method"] == "cpu_perf_counter"
    again = runner.invoke(app, ["baseline", "toy/relu", "--device", "cpu"])
    assert again.exit_code == 0 and "yes" in again.output  # cached
    # a CPU dry run of the same reference is compared with it
    relu = resolve_one("toy/relu")
    rid = store.create_run("dry", {"device": "cpu"}, "openai/scripted", "triton", "fp32")
    store.set_run_hardware(rid, {"gpu_name": None, "torch": local_torch_version()})
    tid = store.create_trajectory(rid, relu, 0)
    u = store.start_turn(tid, 1, [])
    store.record_response(u, "r")
    store.record_evaluation(u, code="x", status="correct", eval_result={"status": "correct", "speedup": 1.5},
                            feedback="")  # fmt: skip
    (s,) = build_report(store, ["dry"])["runs"]
    ratio = row["compile_ms"] / row["eager_ms"]
    assert s["baselines"]["covered"] == 1
    assert s["baselines"]["geomean_speedup"]["strict"]["compile"]["value"] == pytest.approx(1.5 * ratio)
    assert "fast_p against the baselines" in render_report_text(build_report(store, ["dry"]))
