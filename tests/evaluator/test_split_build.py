"""A split evaluation (`EvalSettings.split_build`): a build child without the GPU, then the run child.

On the CPU: a compile error ends in the build child with the one-child status and message; a correct
candidate gets the one-child verdict through both; a C++ `load_inline` build happens in the build child
and is a cache hit in the run child (slow); each child runs on its slot's CPUs, the build child with no
GPU visible; an interrupt while a job waits for its run slot starts no run child (a signal during either
child: tests/evaluator/test_interrupt.py). When to split (`build_plan`), and the GPU's architecture as
the harness reads it (`hardware.gpu_arch`, from a fake nvidia-smi). On the GPU:
`test_a_cuda_candidate_is_built_in_the_build_child_and_cached_in_the_run_child`.
"""

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from kb_agent.evaluator import EvalResult, EvalSettings, Status, hardware
from kb_agent.evaluator.hardware import GpuArch
from kb_agent.evaluator.runner import (
    BuildPhase,
    build_plan,
    evaluate,
    evaluate_build,
    evaluate_run,
    kill_live_children,
)
from kb_agent.evaluator.slots import Slot
from kb_agent.problems import resolve_one

CANDIDATES = Path(__file__).resolve().parent.parent / "candidates"
RELU = resolve_one("toy/relu")
# a candidate that says where it runs, and ends the evaluation with a compile error where it sees no GPU
# (the build child), so that the build child's output is the result's
WHERE = """
import os

import torch.nn as nn
from kb_agent.evaluator.build import BuildError

FAIL_IN_BUILD_CHILD = False
print("cores", sorted(os.sched_getaffinity(0)), "visible", repr(os.environ.get("CUDA_VISIBLE_DEVICES")))
if os.environ.get("CUDA_VISIBLE_DEVICES") == "" and FAIL_IN_BUILD_CHILD:
    raise BuildError("stop here", ["where.cu(1): error: stopped in the build child"], "")


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
"""


def source(name: str) -> str:
    return (CANDIDATES / f"{name}.py").read_text()


def both(src: str, **settings) -> tuple[EvalResult, EvalResult]:
    """The candidate evaluated by one child, then split in two."""
    settings = {
        "device": "cpu",
        "timed_trials": 10,
        "strict_timed_trials": 5,
        **settings,
    }  # verdicts, not figures
    one = evaluate(RELU, src, EvalSettings(split_build=False, **settings))
    two = evaluate(RELU, src, EvalSettings(split_build=True, **settings))
    return one, two


def checks(r: EvalResult) -> dict:
    return {k: v["passed"] for k, v in ((r.strict or {}).get("checks") or {}).items()}


@pytest.mark.parametrize("name", ["syntax_error", "cpp_bad_cflag"])
def test_a_compile_error_ends_in_the_build_child_with_the_one_child_status_and_message(name):
    one, two = both(source(name))
    assert one.status == two.status == Status.COMPILE_ERROR, two.message
    assert two.message == one.message and two.compile.errors == one.compile.errors
    assert checks(two) == checks(one) and two.strict["parity_status"] == "compile_error"
    assert "run_setup" not in two.stages and set(two.stages) >= {"setup", "build", "total"}  # no run child
    assert two.hardware.torch == one.hardware.torch and two.hardware.device == "cpu"


def test_a_correct_triton_candidate_gets_the_one_child_verdict_through_both_children(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    one, two = both(source("triton_relu"))
    assert one.status == two.status == Status.CORRECT, two.message
    assert two.message == one.message and checks(two) == checks(one)
    assert [t.passed for t in two.correctness.results] == [t.passed for t in one.correctness.results]
    assert two.compile.ok and two.backend == one.backend == "triton" and two.speedup is not None
    assert {"setup", "build", "run_setup", "run_load", "correctness", "timing"} <= set(two.stages)
    assert "build_wait" not in two.stages  # no pool: nothing waited for
    assert two.stages["total"] == pytest.approx(sum(two.stages[k] for k in ("setup", "build", "run_setup",
                                                "run_load", "correctness", "timing")), abs=1.0)  # fmt: skip
    assert not list(tmp_path.glob("kb-eval-*"))  # both work directories removed


@pytest.mark.slow
def test_the_two_phases_apart_give_evaluates_verdict_and_stages(tmp_path, monkeypatch):
    # what an executor that sends the build and the run to two processes of one machine does (Ray's):
    # evaluate_build, its BuildPhase through JSON, then evaluate_run
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    settings = EvalSettings(device="cpu", timed_trials=10, strict_timed_trials=5, split_build=True)
    whole = evaluate(RELU, source("triton_relu"), settings)
    built = evaluate_build(RELU, source("triton_relu"), settings)
    assert built is not None and not built.ended and not built.workdir  # its builds are in the cache
    assert not list(tmp_path.glob("kb-eval-*"))  # nothing left should the run phase never come
    again = BuildPhase.from_dict(json.loads(json.dumps(built.to_dict())))
    two = evaluate_run(RELU, source("triton_relu"), settings, again)
    assert two.status == whole.status == Status.CORRECT, two.message
    assert checks(two) == checks(whole) and set(two.stages) == set(whole.stages)
    assert [b["child"] for b in two.compile.builds] == [b["child"] for b in whole.compile.builds]
    assert two.stages["total"] >= built.seconds
    assert not list(tmp_path.glob("kb-eval-*"))  # both work directories removed
    ended = evaluate_build(RELU, source("syntax_error"), settings)
    assert ended.ended and ended.result.status == Status.COMPILE_ERROR and not ended.workdir
    assert evaluate_build(RELU, source("triton_relu"), EvalSettings(device="cpu")) is None  # not split
    # builds in a work directory that dies with the build's process: never split apart (found by a new user)
    assert (
        evaluate_build(RELU, source("triton_relu"), dataclasses.replace(settings, reuse_builds=False)) is None
    )
    # the run phase of an ended build gives its result, a copy, and leaves no directory
    first = evaluate_run(RELU, source("syntax_error"), settings, ended)
    assert first.status == Status.COMPILE_ERROR and first is not ended.result
    assert not list(tmp_path.glob("kb-eval-*"))
    # and twice on one BuildPhase: two results, the first untouched by the second
    second = evaluate_run(RELU, source("triton_relu"), settings, BuildPhase.from_dict(built.to_dict()))
    assert second is not two and two.stages["total"] != second.stages["total"]


def test_a_runtime_error_is_the_run_childs_verdict():
    one, two = both(source("raises"))
    assert one.status == two.status == Status.RUNTIME_ERROR and two.message == one.message


def test_the_build_child_sees_no_gpu_and_each_child_runs_on_its_slots_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    build_cpus, run_cpus = (cpus[-1],), (cpus[0],)

    class Pinned:
        @contextlib.contextmanager
        def build(self):
            yield Slot("cpu", build_cpus)

        @contextlib.contextmanager
        def run(self):
            yield Slot("cpu", run_cpus)

    settings = EvalSettings(device="cpu", split_build=True, strict=False)
    r = evaluate(RELU, WHERE, settings, Pinned())
    assert r.status == Status.CORRECT, r.message
    assert f"cores {list(run_cpus)} visible" in r.stdout and "visible ''" not in r.stdout  # the run child
    assert r.stages["build_wait"] >= 0 and r.stages["run_wait"] >= 0
    r = evaluate(
        RELU, WHERE.replace("FAIL_IN_BUILD_CHILD = False", "FAIL_IN_BUILD_CHILD = True"), settings, Pinned()
    )
    assert r.status == Status.COMPILE_ERROR and "stopped in the build child" in r.message
    assert f"cores {list(build_cpus)} visible ''" in r.stdout  # the build child: its CPUs, no GPU


def test_an_interrupt_while_waiting_for_the_run_slot_starts_no_run_child():
    started = []

    class Interrupted:
        @contextlib.contextmanager
        def build(self):
            yield Slot("cpu")

        @contextlib.contextmanager
        def run(self):
            kill_live_children()  # what the loop's Ctrl-C does while this job waits for the GPU
            started.append(True)
            yield Slot("cpu")

    r = evaluate(RELU, source("triton_relu"), EvalSettings(device="cpu", split_build=True), Interrupted())
    assert started and r.status == Status.RUNTIME_ERROR and "before its run child started" in r.message
    assert "run_setup" not in r.stages and "correctness" not in r.stages


def test_when_an_evaluation_is_split(tmp_path, monkeypatch):
    cuda, triton = source("cuda_relu"), source("triton_relu")
    h200 = GpuArch("9.0", "9.0a", "NVIDIA H200", "580.1")
    monkeypatch.setattr(hardware, "gpu_arch", lambda device: h200)
    gpu = EvalSettings(device="cuda")
    plan = build_plan(gpu, cuda, tmp_path)
    assert plan["job"] == {"arch": "9.0", "env": {"CUDA_VISIBLE_DEVICES": "", "TORCH_CUDA_ARCH_LIST": "9.0a"}}
    assert plan["gpu"] == h200
    assert build_plan(gpu, triton, tmp_path) is None  # nothing to build before the first launch
    assert build_plan(EvalSettings(device="cpu"), cuda, tmp_path) is None  # no GPU to keep free
    assert build_plan(EvalSettings(device="cpu", split_build=True), triton, tmp_path)["job"]["arch"] == "9.0"
    assert build_plan(EvalSettings(device="cuda", split_build=False), cuda, tmp_path) is None
    (tmp_path / "relu_ext_0123").mkdir()
    (tmp_path / "relu_ext_0123" / "relu_ext_0123.so").write_bytes(b"")
    assert build_plan(gpu, cuda, tmp_path) is None  # built before: the run child finds it cached
    monkeypatch.setattr(hardware, "gpu_arch", lambda device: None)
    assert (
        build_plan(EvalSettings(device="cuda", split_build=True), cuda, tmp_path / "x") is None
    )  # unknown GPU


NVIDIA_SMI = """#!/bin/sh
cat <<'EOF'
GPU-aaaa-1111, 00000000:1B:00.0, NVIDIA H200, 9.0, 580.1
GPU-bbbb-2222, 00000000:2C:00.0, {second}, {cap}, 580.1
EOF
"""


@pytest.mark.parametrize(
    ("second", "cap", "visible", "order", "device", "expected"),
    [
        ("NVIDIA H200", "9.0", None, None, "cuda", ("9.0", "9.0a", "NVIDIA H200")),  # alike: any is right
        ("NVIDIA A100", "8.0", None, None, "cuda", None),  # unlike, and any of them may be the slot's
        ("NVIDIA A100", "8.0", None, None, "cuda:1", None),  # CUDA numbers fastest first: unknown here
        ("NVIDIA A100", "8.0", None, "PCI_BUS_ID", "cuda:1", ("8.0", "8.0", "NVIDIA A100")),
        ("NVIDIA A100", "8.0", "GPU-bbbb", None, "cuda", ("8.0", "8.0", "NVIDIA A100")),  # by UUID
        ("NVIDIA A100", "8.0", "1,0", "PCI_BUS_ID", "cuda:1", ("9.0", "9.0a", "NVIDIA H200")),
    ],
)
def test_the_gpus_architecture_is_read_from_nvidia_smi(
    tmp_path, monkeypatch, second, cap, visible, order, device, expected
):
    (tmp_path / "nvidia-smi").write_text(NVIDIA_SMI.format(second=second, cap=cap))
    (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    for var, value in (("CUDA_VISIBLE_DEVICES", visible), ("CUDA_DEVICE_ORDER", order)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    monkeypatch.setattr(hardware, "_from_probe_child", lambda index: None)  # the fallback, not tested here
    hardware._gpu_arch.cache_clear()
    arch = hardware.gpu_arch(device)
    hardware._gpu_arch.cache_clear()
    assert (arch and (arch.compute_capability, arch.arch_list, arch.name)) == expected


def test_the_harness_reads_the_architecture_without_importing_torch():
    code = "import sys; import kb_agent.evaluator.runner, kb_agent.evaluator.hardware; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


CPP_RELU_LOOP = (Path(__file__).resolve().parent.parent / "candidates" / "cpp_relu.py").read_text()


@pytest.mark.slow  # one g++ build of torch/extension.h (1-2 minutes on 2 cores)
def test_a_cpp_extension_is_built_in_the_build_child_and_a_cache_hit_in_the_run_child(tmp_path, monkeypatch):
    monkeypatch.setenv("KB_BUILD_DIR", str(tmp_path / "build-cache"))  # a cold build
    r = evaluate(RELU, CPP_RELU_LOOP, EvalSettings(device="cpu", split_build=True))
    assert r.status == Status.CORRECT, r.message
    built, loaded = r.compile.builds
    assert (built["child"], built["cached"], loaded["child"], loaded["cached"]) == (
        "build",
        False,
        "run",
        True,
    )
    assert built["name"] == loaded["name"] == "relu_loop_cpp"
    assert r.stages["build"] > built["seconds"] > 10 * loaded["seconds"]  # the build was the build child's
    assert r.stages["extension_builds"] == pytest.approx(built["seconds"] + loaded["seconds"])


@pytest.mark.gpu
def test_a_cuda_candidate_is_built_in_the_build_child_and_cached_in_the_run_child(tmp_path, monkeypatch):
    from kb_agent.evaluator.pool import EvalPool

    monkeypatch.setenv("KB_BUILD_DIR", str(tmp_path / "build-cache"))  # a cold build

    r = EvalPool(EvalSettings(device="cuda")).evaluate(RELU, source("cuda_relu"))  # split by default
    assert r.status == Status.CORRECT, r.message
    assert [(b["child"], b["cached"]) for b in r.compile.builds] == [("build", False), ("run", True)]
    assert r.stages["run_load"] < 0.25 * r.stages["build"]  # the run child only loaded the build
    arch = hardware.gpu_arch("cuda")
    assert arch is not None and arch.compute_capability == r.hardware.compute_capability
    assert arch.arch_list == r.hardware.arch_list
    print(
        f"\ncuda_relu split: stages { ({k: round(v, 2) for k, v in r.stages.items()}) }, builds {r.compile.builds}"
    )
