"""Nsight Compute's pass (evaluator.ncu, issue 15): reading ncu's CSV as the H200 wrote it, the kernel
filter, the one-line endings (no ncu, counters not permitted, the time limit) through a fake `ncu`, the
whole plumbing on the CPU (a fake ncu that runs the worker it wraps), and the real pass on a GPU.

The fixtures in tests/evaluator/data/ are ncu's own output on the H200 (see the README there).
On the H200: `pytest -q -m gpu tests/evaluator/test_ncu.py -s`.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest
from kb_agent.agent.feedback import feedback_for, ncu_summary, needs_ncu, speed_of_light
from kb_agent.evaluator import EvalSettings, Status
from kb_agent.evaluator import ncu as ncu_mod
from kb_agent.evaluator.result import EvalResult, KernelRow, NcuInfo, NcuKernel, ProfileInfo
from kb_agent.problems import resolve_one

DATA = Path(__file__).resolve().parent / "data"
CANDIDATES = Path(__file__).resolve().parent.parent / "candidates"
RAW = (DATA / "ncu_raw.csv").read_text()
DENIED_TEXT = (
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters "
    "on the target device 0. For instructions on enabling permissions and to get more information see "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)


# -- the CSV ------------------------------------------------------------------------------------------
def test_the_raw_page_parses_with_its_units_and_ncus_own_lines_skipped():
    rows, units = ncu_mod.parse_raw_csv(RAW)
    assert [r["ID"] for r in rows] == ["0", "1", "4", "9"]
    assert rows[1]["Kernel Name"] == "relu_k" and rows[1]["Grid Size"] == "(16384, 1, 1)"
    assert units["gpu__time_duration.sum"] == "ns" and units["dram__bytes.sum.per_second"] == "byte/s"
    assert units["launch__shared_mem_per_block_dynamic"] == "byte/block"
    for metrics in ncu_mod.METRICS.values():  # every figure we read is on the page ncu wrote
        assert any(m in rows[1] for m in metrics), metrics
    with pytest.raises(ncu_mod.NcuError):
        ncu_mod.parse_raw_csv("==PROF== Disconnected from process 1\nok 3.0\n")


def test_figures_of_the_triton_relu_and_the_library_kernels_left_out():
    info = ncu_mod.read_raw(RAW)
    assert info.status == "ok" and info.library_skipped == 3  # the RNG kernel, cutlass sgemm, reduce_kernel
    (k,) = info.kernels
    assert k.name == "relu_k" and k.launches == 1 and (k.grid, k.block) == ("(16384, 1, 1)", "(128, 1, 1)")
    assert k.duration_us == pytest.approx(30.912)  # "30,912" ns
    assert (k.memory_pct, k.compute_pct, k.dram_pct) == (73.85, 6.74, 73.85)
    assert k.dram_gbs == pytest.approx(3550.04, abs=0.01)  # "3,550,037,267,080.75" byte/s
    assert (k.l2_hit_pct, k.occupancy_pct, k.theoretical_occupancy_pct) == (50.87, 82.33, 100.0)
    assert (k.registers, k.shared_bytes, k.issue_cycles) == (18, 0, 178.04)
    assert k.stalls == [
        ["long_scoreboard", 154.04],
        ["drain", 16.47],
        ["short_scoreboard", 6.8],
    ]  # not "selected"


def _details(kernel_id: str) -> dict[str, float | None]:
    """The details page's figures of one launch, keyed "Section: Metric Name"."""
    lines = [ln for ln in (DATA / "ncu_details.csv").read_text().splitlines() if ln.startswith('"')]
    return {f"{r['Section Name']}: {r['Metric Name']}": ncu_mod.number(r["Metric Value"])
            for r in csv.DictReader(io.StringIO("\n".join(lines))) if r["ID"] == kernel_id and r["Metric Name"]}  # fmt: skip


def test_the_metric_names_are_those_behind_the_details_pages_figures():
    # the details page (another run of the same script) names each figure in words: the raw metrics we
    # chose must give the same numbers, within run-to-run noise
    d = _details("1")
    sol, mwa, launch, occ = ("GPU Speed Of Light Throughput", "Memory Workload Analysis", "Launch Statistics",
                             "Occupancy")  # fmt: skip
    (k,) = ncu_mod.read_raw(RAW).kernels
    assert k.duration_us * 1e3 == pytest.approx(d[f"{sol}: Duration"], rel=0.05)
    assert k.memory_pct == pytest.approx(d[f"{sol}: Memory Throughput"], abs=2)
    assert k.dram_pct == pytest.approx(d[f"{sol}: DRAM Throughput"], abs=2)
    assert k.compute_pct == pytest.approx(d[f"{sol}: Compute (SM) Throughput"], abs=1)
    assert k.dram_gbs * 1e9 == pytest.approx(d[f"{mwa}: Memory Throughput"], rel=0.05)
    assert k.l2_hit_pct == pytest.approx(d[f"{mwa}: L2 Hit Rate"], abs=2)
    assert k.occupancy_pct == pytest.approx(d[f"{occ}: Achieved Occupancy"], abs=4)
    assert k.theoretical_occupancy_pct == d[f"{occ}: Theoretical Occupancy"]
    assert k.registers == d[f"{launch}: Registers Per Thread"]
    assert (
        k.shared_bytes
        == d[f"{launch}: Static Shared Memory Per Block"] + d[f"{launch}: Dynamic Shared Memory Per Block"]
    )
    assert k.issue_cycles == pytest.approx(
        d["Warp State Statistics: Warp Cycles Per Issued Instruction"], rel=0.05
    )


def test_units_and_numbers():
    assert (
        ncu_mod.number("1,048,576") == 1048576
        and ncu_mod.number("n/a") is None
        and ncu_mod.number("") is None
    )
    assert ncu_mod.scaled("42,304", "ns", "us") == pytest.approx(42.304)
    assert ncu_mod.scaled("42.3", "usecond", "us") == 42.3 and ncu_mod.scaled("1.5", "msecond", "us") == 1500
    assert (
        ncu_mod.scaled("2", "Tbyte/second", "gbs") == 2000
        and ncu_mod.scaled("49,152", "byte/block", "bytes") == 49152
    )
    assert ncu_mod.short_name("void relu_kernel<256>(const float *, float *, int)") == "relu_kernel<256>"
    assert ncu_mod.short_name("ns::k(int)") == "ns::k"


# -- the kernel filter ----------------------------------------------------------------------------------
def test_the_kernels_a_source_defines():
    assert ncu_mod.custom_kernel_names((CANDIDATES / "cuda_relu.py").read_text()) == ["relu_kernel"]
    assert ncu_mod.custom_kernel_names((CANDIDATES / "triton_relu.py").read_text()) == ["relu_kernel"]
    src = (
        "template <int B>\n__global__ void __launch_bounds__(256) tiled(float* x) {}\n"
        'extern "C" __global__ void plain_k(int n) {}\n'
        "@triton.autotune(configs=[], key=['n'])\n@triton.jit\ndef tuned(x_ptr, n):\n    pass\n"
        "@jit(do_not_specialize=['n'])\ndef bare(x_ptr, n):\n    pass\n"
    )
    assert ncu_mod.custom_kernel_names(src) == ["tiled", "plain_k", "tuned", "bare"]
    assert ncu_mod.custom_kernel_names("import torch\n") == []


def test_the_filter_matches_the_demangled_names_of_those_kernels_only():
    pattern = re.compile(ncu_mod.kernel_filter(["relu_k", "tiled"]).removeprefix("regex:"))
    for name in (
        "relu_k",
        "tiled(float *)",
        "void tiled<256>(float *)",
        "ns::tiled(int)",
        "void ns::relu_k<1>(int)",
    ):
        assert pattern.search(name), name
    for name in ("relu_kernel(float *)", "void at::native::vectorized_elementwise_kernel<4>(int)", "untiled(int)",
                 "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)"):  # fmt: skip
        assert not pattern.search(name), name
    opts = ncu_mod.ncu_options(Path("/r/report"), ["relu_k"])
    assert opts[:4] == ["--clock-control", "none", "--target-processes", "all"]
    assert "--profile-from-start" in opts and opts[opts.index("--launch-count") + 1] == str(
        ncu_mod.MAX_LAUNCHES
    )
    assert "--kernel-name" in opts and "--kernel-name" not in ncu_mod.ncu_options(Path("/r/report"), [])


# -- the result and the feedback ------------------------------------------------------------------------
def _correct(ncu: NcuInfo | None) -> EvalResult:
    kernels = [KernelRow("relu_k", 1, 30.9, 30.9, 1.0, True)]
    return EvalResult(Status.CORRECT, speedup=1.02, runtime_ms=0.0309, ref_runtime_ms=0.0315, ncu=ncu,
                      profile=ProfileInfo(kernels=kernels, total_us=30.9, custom_kernel_ran=True, custom_share=1.0))  # fmt: skip


def _measured(n: int = 1) -> NcuInfo:
    info = ncu_mod.read_raw(RAW)
    info.forwards = 1
    k = info.kernels[0]
    info.kernels = [NcuKernel(**{**k.__dict__, "name": f"{k.name}_{i}" if i else k.name}) for i in range(n)]
    return info


def test_the_ncu_part_round_trips_and_old_results_still_load():
    r = _correct(_measured())
    back = EvalResult.from_json(r.to_json())
    assert back.ncu == r.ncu and isinstance(back.ncu.kernels[0], NcuKernel)
    old = r.to_dict()
    del old["ncu"]
    assert EvalResult.from_dict(old).ncu is None


def test_the_rendered_figures_and_their_size():
    text = ncu_summary(_measured())
    print(f"\n{text}\n({len(text)} characters)")
    assert "relu_k (grid 16384x1x1, block 128x1x1): 30.9 us" in text
    assert "DRAM 74% of peak (3550 GB/s), SM throughput 7%, L2 hit rate 51%" in text
    assert "occupancy 82% (theoretical 100%), 18 registers/thread, 0 B shared memory/block" in text
    assert "long_scoreboard 154.0 (waiting on global/local memory), drain 16.5, short_scoreboard 6.8" in text
    sol = speed_of_light(_measured())
    assert "relu_k: memory 74%, compute 7%: memory-bound, below the roof" in sol
    assert len(text) < 520 and len(sol) < 220  # about 130 and 55 tokens at 4 characters a token
    four = ncu_summary(_measured(6))
    assert four.count("\n- ") == 4 and "(... 2 more kernels)" in four and len(four) < 1900


def test_roofline_verdicts():
    from kb_agent.agent.feedback import roofline_verdict

    def v(mem, comp):
        return roofline_verdict(NcuKernel("k", memory_pct=mem, compute_pct=comp))

    assert v(30, 20).startswith("latency-bound") and v(90, 10).startswith("memory-bound, near the roof")
    assert v(70, 10).startswith("memory-bound, below") and v(20, 85).startswith("compute-bound, near")
    assert v(40, 65).startswith("compute-bound, below") and v(None, 3) == "not measured"


@pytest.mark.parametrize(
    "info",
    [
        None,
        NcuInfo(
            status="unavailable", message="Nsight Compute: not run, no `ncu` on this machine (install ...)."
        ),
        ncu_mod.failure(DENIED_TEXT),
        NcuInfo(
            status="timeout",
            message="Nsight Compute: stopped at its 120 s limit (EvalSettings.ncu_s), no figures.",
        ),
    ],
)
def test_without_figures_one_line_says_so_and_the_rest_is_unchanged(info):
    from kb_agent.agent.feedback import NCU_COMPONENTS, parse_recipe

    for recipe in ("full", "standard,ncu", "standard,speed_of_light", "standard,ncu,speed_of_light"):
        text = feedback_for(_correct(info), recipe=recipe)
        base = feedback_for(_correct(info), recipe=parse_recipe(recipe) - NCU_COMPONENTS)
        extra = [ln for ln in text.splitlines() if ln not in base.splitlines()]
        assert len(extra) == 1 and extra[0].startswith("Nsight Compute"), (recipe, extra)
        assert text.replace(extra[0] + "\n\n", "") == base, recipe


def test_with_figures_the_recipe_chooses_the_parts():
    r = _correct(_measured())
    assert "Nsight Compute" not in feedback_for(r) and "Speed of light" not in feedback_for(r)
    both = feedback_for(r, recipe="standard,ncu,speed_of_light")
    assert "Nsight Compute, your kernels" in both and "Speed of light" in both
    assert "Speed of light" not in feedback_for(r, recipe="standard,ncu")
    assert "Nsight Compute, your kernels" not in feedback_for(r, recipe="standard,speed_of_light")


def test_the_recipe_turns_the_pass_on():
    from kb_agent.agent.loop import SolveConfig

    assert needs_ncu("full") and needs_ncu("minimal,speed_of_light") and not needs_ncu("standard")
    assert SolveConfig(feedback="full").eval_settings().ncu
    assert not SolveConfig(feedback="standard").eval_settings().ncu
    assert EvalSettings.from_dict(EvalSettings(ncu=True, ncu_s=30).to_dict()).ncu_s == 30
    with pytest.raises(ValueError, match="ncu_s"):
        EvalSettings(ncu_s=0)


# -- the pass through a fake ncu ------------------------------------------------------------------------
FAKE_NCU = '''#!{python}
"""A stand-in for ncu: KB_FAKE_NCU_MODE = ok (run the wrapped worker, export a report), denied (the real
permission error, no report), none (no kernels profiled), hang. `--import` prints KB_FAKE_NCU_CSV."""
import os, subprocess, sys, time
args = sys.argv[1:]
if "--import" in args:
    sys.stdout.write(open(os.environ["KB_FAKE_NCU_CSV"]).read())
    sys.exit(0)
mode = os.environ.get("KB_FAKE_NCU_MODE", "ok")
log = open(args[args.index("--log-file") + 1], "w") if "--log-file" in args else sys.stdout
report = args[args.index("--export") + 1]
app = args[args.index("-m") - 1:]
print("==WARNING== Note: Running with unmodified GPU clocks.", file=log, flush=True)
if mode == "hang":
    time.sleep(60)
if mode == "denied":
    print({denied!r}, file=log, flush=True)
    sys.exit(1)
print("==PROF== Connected to process 1 (python)", file=log, flush=True)
code = subprocess.run(app, close_fds=False).returncode if mode == "ok" else 0
if mode == "none":
    print("==WARNING== No kernels were profiled.", file=log, flush=True)
else:
    open(report + ".ncu-rep", "wb").write(b"fake")
sys.exit(code)
'''


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    path = tmp_path / "bin" / "ncu"
    path.parent.mkdir()
    path.write_text(FAKE_NCU.format(python=sys.executable, denied=DENIED_TEXT))
    path.chmod(0o755)
    monkeypatch.delenv("KB_NCU", raising=False)
    monkeypatch.setenv("PATH", f"{path.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KB_FAKE_NCU_CSV", str(DATA / "ncu_raw.csv"))
    return path


def _profile(tmp_path, **kw):
    src = (CANDIDATES / "triton_relu.py").read_text()
    settings = EvalSettings(device="cpu", **kw)
    t0 = time.perf_counter()
    info = ncu_mod.profile_candidate(resolve_one("toy/relu"), src, settings, tmp_path / "build")
    return info, time.perf_counter() - t0


def test_no_ncu_is_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("KB_NCU", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu_mod, "FALLBACK_PATHS", ())
    info, _ = _profile(tmp_path)
    assert info.status == "unavailable" and "no `ncu`" in info.message and "\n" not in info.message
    monkeypatch.setenv("KB_NCU", str(tmp_path / "nowhere"))
    assert ncu_mod.find_ncu() is None


def test_counters_not_permitted_is_one_line(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("KB_FAKE_NCU_MODE", "denied")
    info, seconds = _profile(tmp_path)
    assert info.status == "denied" and "ERR_NVGPUCTRPERM" in info.message and "\n" not in info.message
    assert (
        "ncu: ==WARNING==" in info.detail and "ERR_NVGPUCTRPERM" in info.detail
    )  # for people, not the model
    assert info.options[:2] == ["--clock-control", "none"] and seconds < 30


def test_no_kernels_and_the_time_limit(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("KB_FAKE_NCU_MODE", "none")
    info, _ = _profile(tmp_path)
    assert info.status == "no_kernels" and info.message.startswith("Nsight Compute: none of your kernels")
    monkeypatch.setenv("KB_FAKE_NCU_MODE", "hang")
    info, seconds = _profile(tmp_path, ncu_s=2)
    assert info.status == "timeout" and "2 s limit" in info.message and seconds < 25


@pytest.mark.slow
def test_the_whole_pass_runs_the_worker_under_the_wrapper(fake_ncu, tmp_path, monkeypatch):
    # the wrapped worker is ncu's child, not ours (parent pid 0), and reports through the channel it
    # inherited through the wrapper: the forwards it ran come back; the figures are the fixture's
    monkeypatch.setenv("KB_FAKE_NCU_MODE", "ok")
    info, seconds = _profile(tmp_path)
    print(f"\nfake pass: {seconds:.1f} s, {info.status}: {info.message}")
    assert info.status == "ok", f"{info.message}\n{info.detail}"
    assert info.forwards == 1 and info.kernels[0].name == "relu_k" and info.seconds > 0


def test_the_pass_child_finds_the_binding_cache_the_evaluation_used(fake_ncu, tmp_path, monkeypatch):
    # without the cache named in its job, the child built by torch's stock path: another module name,
    # main.cpp and cuda.cu compiled again (36-40 s for 1/19's load_inline ReLU on the H200, not 9-11)
    from kb_agent.evaluator import bindcache, runner
    from kb_agent.evaluator.context import Evaluation

    monkeypatch.setenv("KB_BUILD_DIR", str(tmp_path / "kbbuild"))
    jobs = []
    monkeypatch.setattr(runner, "run_wrapped", lambda wrapper, job, *a: jobs.append(job) or runner.ChildOutcome(
        None, "setup", False, None, 1, "", "", 0))  # fmt: skip
    _profile(tmp_path)
    (job,) = jobs
    ev = Evaluation(job, chan=None)
    assert ev.bind_root == bindcache.cache_dir(runner.default_build_root())


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("ninja") and shutil.which("c++")), reason="needs ninja and c++")
def test_the_pass_loads_the_evaluations_extension_build_and_builds_nothing(fake_ncu, tmp_path, monkeypatch):
    # a C++ load_inline candidate evaluated (its extension built and kept), then profiled through the fake
    # ncu with the same build folder: the child's import is the cached module, on the evaluation's path
    from kb_agent.evaluator import evaluate
    from kb_agent.evaluator.runner import candidate_build_root

    monkeypatch.setenv("KB_BUILD_DIR", str(tmp_path / "kbbuild"))
    monkeypatch.setenv("KB_FAKE_NCU_MODE", "ok")
    settings, problem = EvalSettings(device="cpu"), resolve_one("toy/relu")
    src = (CANDIDATES / "cpp_relu.py").read_text()
    r = evaluate(problem, src, settings)
    assert r.status == Status.CORRECT, r.message
    (built,) = r.compile.builds
    root = candidate_build_root(src)
    modules = {p: p.stat().st_mtime_ns for p in root.rglob("*.so")}
    info = ncu_mod.profile_candidate(problem, src, settings, root)
    assert info.status == "ok", f"{info.message}\n{info.detail}"
    (again,) = info.builds
    print(f"\nevaluation's build {built['seconds']:.1f} s ({built['path']}), the pass's {again['seconds']:.2f} s "
          f"({again['path']}), the pass {info.seconds:.1f} s")  # fmt: skip
    assert again["cached"] and again["path"] == built["path"] != "stock", (built, again)
    assert again.get("binding_key") == built["binding_key"]
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*.so")} == modules  # nothing built or linked
    assert again["seconds"] < built["seconds"] / 4


# -- the real pass --------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cuda_relu", "triton_relu"])
def test_the_real_pass_on_a_relu(kb_dataset, name):
    from kb_agent.evaluator import evaluate

    src = (CANDIDATES / f"{name}.py").read_text()
    r = evaluate(resolve_one("1/19"), src, EvalSettings(ncu=True))
    assert r.status == Status.CORRECT, r.message
    text = feedback_for(r, recipe="full")
    print(f"\n{name}: ncu {r.ncu.status} in {r.stages.get('ncu', 0):.1f} s (evaluation {r.stages['total']:.1f} s), "
          f"{len(text)} characters of feedback\n{ncu_summary(r.ncu)}\n{speed_of_light(r.ncu)}")  # fmt: skip
    assert r.ncu is not None and r.ncu.status == "ok", r.ncu and f"{r.ncu.message}\n{r.ncu.detail}"
    # the pass imports the evaluation's build: cached, on the run child's path (nothing compiled under ncu)
    print("the pass's builds:", r.ncu.builds)
    assert all(b["cached"] for b in r.ncu.builds), r.ncu.builds
    assert [b["path"] for b in r.ncu.builds] == [b["path"] for b in r.compile.builds if b["child"] == "run"]
    (k,) = r.ncu.kernels
    assert k.name.startswith("relu_kernel") and r.ncu.library_skipped == 0 and r.ncu.forwards == 1
    # 1/19 moves 2 x 6.4 GB: about 3 ms at the H200's 4.8 TB/s peak
    assert 1000 < k.duration_us < 20000 and 30 < k.memory_pct <= 100 and k.compute_pct < 60
    assert 500 < k.dram_gbs < 5500  # the H200's HBM3e peaks at 4.8 TB/s
    assert 0 < k.occupancy_pct <= 105 and 0 < k.registers <= 255 and k.stalls
    assert 0 < r.ncu.seconds < 120
