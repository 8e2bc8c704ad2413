"""`kb-agent baseline`: the reference timed eager and under torch.compile in the evaluator's isolated
child, cached in the store per (reference SHA-256, GPU, precision, torch version, mode)."""

import io
import json
import os
import textwrap
import threading
import time

import pytest
import torch
from kb_agent.agent.baseline import baseline_settings, local_torch_version, run_baselines
from kb_agent.agent.cli import app
from kb_agent.agent.report import build_report, render_report_text
from kb_agent.agent.store import Store
from kb_agent.agent.store.baselines import find_baselines
from kb_agent.evaluator import EvalSettings
from kb_agent.evaluator.runner import time_baseline, warm_baseline
from kb_agent.problems import Problem, resolve, resolve_one
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
    def time_fn(p, settings, mode, cache_dir=None):
        calls.append((p.key, settings.strict, mode))
        return {"key": p.key, "problem_key": p.key, "level": p.level, "problem_id": p.problem_id, "name": p.name,
                "code_sha256": p.code_sha256, "device": settings.device, "precision": settings.precision,
                "gpu_name": None, "torch": torch.__version__, "compile_mode": mode, "status": status,
                "message": "ok" if status == "ok" else "the reference failed", "eager_ms": 2.0,
                "compile_ms": 1.0 if status == "ok" else None, "compile_s": 3.0, "compile_error": None}  # fmt: skip

    return time_fn


def test_the_cache_is_found_again_when_torch_reports_another_version_than_its_package(store, monkeypatch):
    # on the H200, torch's PyPI wheel says 2.11.0 in its metadata and 2.11.0+cu130 in torch.__version__,
    # which the child reports and the cache stores: looked up by the metadata's, no baseline was ever hit
    monkeypatch.setattr(torch, "__version__", torch.__version__ + ".local-build")
    relu, calls = resolve_one("toy/relu"), []
    run_baselines([relu], CPU, store=store, time_fn=fake_timer(calls))
    again = run_baselines([relu], CPU, store=store, time_fn=fake_timer(calls))
    assert again[0]["cached"] and len(calls) == 1
    assert local_torch_version() == torch.__version__


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


@pytest.mark.slow  # 7 s: a child per problem (the default run's 3-minute budget)
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


class Phases:
    """Fake warm-up and timing functions that record when each runs: a warm-up takes 50 ms and waits
    at a barrier for a second one (so two run at once or the test fails); a timing asserts that no
    warm-up runs beside it nor another timing. The warm-up's compile takes 9 s, the timing's 3 s."""

    def __init__(self, parties=2, warm_status=None):
        self.lock, self.barrier = threading.Lock(), threading.Barrier(parties, timeout=5)
        self.warm_running = self.timing_running = self.most_warm = 0
        self.warmed, self.timed, self.cache_dirs = [], [], []
        self.warm_status = warm_status or {}  # key -> a status, "raise" or "oom once"

    def warm_fn(self, p, settings, mode, cache_dir=None, compile_threads=None):
        assert compile_threads >= 1
        with self.lock:
            self.warmed.append(p.key)
            self.warm_running += 1
            self.most_warm = max(self.most_warm, self.warm_running)
        try:
            status = self.warm_status.get(p.key, "ok")
            if status != "oom once":
                self.barrier.wait()  # two warm-ups at once (one out of memory is alone when it runs again)
            time.sleep(0.05)
            if status == "raise":
                raise OSError("no room for a work folder")
            if status == "oom once":
                if self.warmed.count(p.key) == 1:
                    return {"key": p.key, "status": "error", "message": "out of memory beside the others"}
                status = "ok"
            return {"key": p.key, "status": status, "message": status, "compile_s": 9.0, "seconds": 10.0,
                    "compile_cache": {"fxgraph_miss": 1}}  # fmt: skip
        finally:
            with self.lock:
                self.warm_running -= 1

    def time_fn(self, p, settings, mode, cache_dir=None):
        with self.lock:
            assert self.warm_running == 0 and self.timing_running == 0
            self.timing_running += 1
            self.timed.append(p.key)
            self.cache_dirs.append(cache_dir)
        assert cache_dir is None or os.path.isdir(cache_dir)
        time.sleep(0.01)
        with self.lock:
            self.timing_running -= 1
        return fake_timer([])(p, settings, mode)


def test_jobs_warm_up_concurrently_then_time_alone_with_the_cold_compile_seconds(store):
    toy = resolve("toy")[:4]
    ph = Phases()
    out = run_baselines(toy, CPU, store=store, jobs=2, time_fn=ph.time_fn, warm_fn=ph.warm_fn)
    assert ph.most_warm == 2 and sorted(ph.warmed) == sorted(p.key for p in toy)
    assert ph.timed == [p.key for p in toy]  # one at a time, in order, after every warm-up
    (cache,) = set(ph.cache_dirs)  # one folder shared by the job, removed at its end
    assert cache is not None and not os.path.exists(cache)
    for r in out:
        assert (r["compile_s"], r["compile_s_from"], r["warm_compile_s"]) == (9.0, "warmup", 3.0)
        assert r["warmup"]["status"] == "ok" and r["warmup"]["compile_cache"] == {"fxgraph_miss": 1}
    stored = {r["problem_key"]: r for r in find_baselines(store)}
    assert {k: r["compile_s"] for k, r in stored.items()} == dict.fromkeys((p.key for p in toy), 9.0)
    assert stored[toy[0].key]["record"]["compile_s_from"] == "warmup"


def test_jobs_2_gives_the_statuses_and_record_shape_of_jobs_1(store):
    toy = resolve("toy")[:2]
    one = run_baselines(toy, CPU, store=store, time_fn=Phases().time_fn)
    shape_one = [sorted(r["record"]) for r in find_baselines(store)]
    ph = Phases()
    two = run_baselines(toy, CPU, store=store, force=True, jobs=2, time_fn=ph.time_fn, warm_fn=ph.warm_fn)
    assert [r["status"] for r in one] == [r["status"] for r in two] == ["ok", "ok"]
    assert [sorted(r) for r in one] == [sorted(r) for r in two]
    assert [sorted(r["record"]) for r in find_baselines(store)] == shape_one
    # jobs 1: no warm-up, no shared folder, the timing child's compile seconds (as before --jobs)
    assert [(r["compile_s"], r["compile_s_from"], r["warmup"]) for r in one] == [(3.0, "timing", None)] * 2


def test_a_failed_warm_up_leaves_its_problem_to_compile_cold_in_the_timing_phase(store):
    toy = resolve("toy")[:4]
    statuses = {toy[0].key: "error", toy[1].key: "raise", toy[2].key: "compile_failed"}
    ph = Phases(warm_status=statuses)
    out = run_baselines(toy, CPU, store=store, jobs=2, time_fn=ph.time_fn, warm_fn=ph.warm_fn)
    assert ph.timed == [p.key for p in toy] and [r["status"] for r in out] == ["ok"] * 4
    assert [r["compile_s_from"] for r in out] == ["timing", "timing", "timing", "warmup"]
    assert [r["compile_s"] for r in out] == [3.0, 3.0, 3.0, 9.0]
    assert out[1]["warmup"]["status"] == "error" and "no room" in out[1]["warmup"]["message"]


def test_a_warm_up_out_of_memory_beside_others_compiles_again_alone_before_any_timing(store):
    toy = resolve("toy")[:3]
    ph = Phases(warm_status={toy[0].key: "oom once"})
    out = run_baselines(toy, CPU, store=store, jobs=2, time_fn=ph.time_fn, warm_fn=ph.warm_fn)
    assert ph.warmed.count(toy[0].key) == 2 and ph.warmed[-1] == toy[0].key
    assert out[0]["compile_s_from"] == "warmup" and ph.timed == [p.key for p in toy]


def test_cached_problems_are_skipped_in_both_phases(store):
    toy = resolve("toy")[:3]
    run_baselines(toy[:1], CPU, store=store, time_fn=Phases().time_fn)
    ph = Phases()
    out = run_baselines(toy, CPU, store=store, jobs=2, time_fn=ph.time_fn, warm_fn=ph.warm_fn)
    assert toy[0].key not in ph.warmed and toy[0].key not in ph.timed
    assert [r["cached"] for r in out] == [True, False, False]
    ph = Phases()
    run_baselines(toy, CPU, store=store, jobs=2, time_fn=ph.time_fn, warm_fn=ph.warm_fn)
    assert ph.warmed == ph.timed == []  # all cached: no warm-up, no cache folder
    with pytest.raises(ValueError, match="jobs"):
        run_baselines(toy, CPU, store=store, jobs=0, time_fn=ph.time_fn, warm_fn=ph.warm_fn)


def test_cli_baseline_jobs_warms_up_first(store, monkeypatch):
    import kb_agent.evaluator.runner as evaluator_runner

    ph = Phases()
    monkeypatch.setattr(evaluator_runner, "warm_baseline", ph.warm_fn)
    monkeypatch.setattr(evaluator_runner, "time_baseline", ph.time_fn)
    r = runner.invoke(app, ["baseline", "toy/relu,vector_add", "--device", "cpu", "--jobs", "2", "--json"])
    assert r.exit_code == 0, r.output
    lines = [json.loads(line) for line in r.output.splitlines()]
    assert [(x["key"], x["compile_s"], x["compile_s_from"]) for x in lines] == [
        ("toy/relu", 9.0, "warmup"),
        ("toy/vector_add", 9.0, "warmup"),
    ]
    assert ph.most_warm == 2
    r = runner.invoke(app, ["baseline", "toy/relu", "--device", "cpu", "--jobs", "0"])
    assert r.exit_code == 2


@pytest.mark.slow  # 4.4 s: a reference child (the default run's 3-minute budget)
def test_a_warm_up_child_compiles_with_the_shared_cache_folder(tmp_path):
    # the reference reads, in its child, the variables and config the shared cache and the warm-up need
    expect = {k: str(tmp_path / sub) for k, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                                                     ("TRITON_CACHE_DIR", "triton"))}  # fmt: skip
    same = Problem(0, 1, "same", textwrap.dedent(f"""
        import os
        import torch
        class Model(torch.nn.Module):
            def forward(self, x):
                return x
        def get_inputs():
            import torch._inductor.config as inductor_config
            seen = {{k: os.environ.get(k) for k in {sorted(expect)!r}}}
            assert seen == {expect!r}, seen
            assert inductor_config.fx_graph_cache, "the FX graph cache is off"
            assert inductor_config.compile_threads == 1, inductor_config.compile_threads
            return [torch.randn(4)]
        def get_init_inputs():
            return []
    """), "test")  # fmt: skip
    r = warm_baseline(same, baseline_settings(CPU), cache_dir=tmp_path, compile_threads=1)
    assert r["status"] == "ok", r["message"]
    assert 0 <= r["compile_s"] < r["seconds"] and r["compile_cache"]["fxgraph_hit"] == 0
    assert r["seconds"] == pytest.approx(sum(r["stages"].values()), abs=0.01)  # where the child's time went
    assert r["child_start"]["method"] in ("fork", "spawn") and r["child_start"]["seconds"] >= 0


@pytest.mark.slow  # real torch.compile (inductor's C++ backend): about 2 minutes on two cores
def test_jobs_2_on_the_cpu_compiles_cold_in_the_warm_up_and_from_its_cache_in_the_timing(store):
    relu, add = resolve_one("toy/relu"), resolve_one("toy/vector_add")
    (one,) = run_baselines([relu], CPU, store=store)
    two = run_baselines([relu, add], CPU, store=store, force=True, jobs=2)
    assert one["status"] == two[0]["status"] == two[1]["status"] == "ok" and sorted(one) == sorted(two[0])
    assert one["compile_s_from"] == "timing" and one["compile_cache"]["fxgraph_miss"] >= 1
    for r in two:
        assert r["compile_s_from"] == "warmup" and r["compile_s"] == r["warmup"]["compile_s"] > 0
        assert r["warmup"]["compile_cache"]["fxgraph_miss"] >= 1  # cold: the folder was empty
        assert r["compile_cache"]["fxgraph_hit"] >= 1 and r["compile_cache"]["fxgraph_miss"] == 0
        assert 0 < r["warm_compile_s"] and r["eager_ms"] > 0 and r["compile_ms"] > 0


def test_the_baselines_table_prints_a_slow_compiled_speedup_with_two_significant_digits():
    # torch.compile's call overhead on a tiny CPU problem: eager 0.0031 ms, compiled 0.068 ms read 0.05x,
    # and a slower one 0.00x
    from kb_agent.agent.cli import _baselines_table
    from rich.console import Console

    rows = [{"status": "ok", "eager_ms": 0.0031, "compile_ms": 0.068, "compile_s": 14.0, "cached": False}]
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(_baselines_table([resolve_one("toy/relu")], rows))
    assert "0.046x" in console.export_text()
