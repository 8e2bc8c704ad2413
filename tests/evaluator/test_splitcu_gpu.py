"""The split .cu build on a GPU (run on the H200 machine):

    pytest -q -s -m gpu tests/evaluator/test_splitcu_gpu.py

Each candidate is evaluated with default (strict) settings and KB_SPLIT_CU=1 (the split is off by default
until these pass on a GPU) in a fresh build cache. A KernelBench-style
ReLU builds as a device and a host unit and is correct; one whose split build fails (its wrapper calls a
`__host__ __device__` function that only the device unit has) and one the split does not take (a
template kernel) build whole and are correct; each build's record says which and why. The -s output
gives the build seconds."""

from pathlib import Path

import pytest
from kb_agent.evaluator import EvalSettings, Status, evaluate
from kb_agent.problems import resolve_one

pytestmark = pytest.mark.gpu

CANDIDATES = Path(__file__).resolve().parent.parent / "candidates"
RELU = (CANDIDATES / "cuda_relu.py").read_text()
KERNEL = "__global__ void relu_kernel(const float* x, float* y, int n) {"
# the wrapper calls a host-and-device function that goes to the device unit only: g++ fails on the
# host unit, and the .cu built whole is correct
SPLIT_FAILS = RELU.replace(KERNEL, "__host__ __device__ int blocks_for(int n) { return (n + 255) / 256; }\n\n" + KERNEL).replace(
    "relu_kernel<<<(n + 255) / 256, 256>>>", "relu_kernel<<<blocks_for(n), 256>>>"
)  # fmt: skip
TEMPLATE = RELU.replace(KERNEL, "template <typename T>\n__global__ void relu_kernel(const T* x, T* y, int n) {").replace(
    "relu_kernel<<<", "relu_kernel<float><<<"
)  # fmt: skip


def _evaluate(tmp_path, monkeypatch, source: str, name: str, split: str = "1"):
    monkeypatch.setenv("KB_BUILD_DIR", str(tmp_path / name))
    monkeypatch.setenv("KB_SPLIT_CU", split)
    r = evaluate(resolve_one("toy/relu"), source, EvalSettings())
    assert r.status == Status.CORRECT, r.message
    build = r.compile.builds[0]  # the build child's
    print(f"\n{name}: build {build['seconds']:.1f} s, split {build.get('split')}, nvcc {build.get('nvcc')}")
    return build


def test_a_kernelbench_style_cu_builds_split_and_is_correct(tmp_path, monkeypatch):
    build = _evaluate(tmp_path, monkeypatch, RELU, "relu")
    assert build["split"] == {"used": True, "kernels": ["relu_kernel"]}, build


def test_a_split_build_that_fails_builds_whole_and_is_correct(tmp_path, monkeypatch):
    assert SPLIT_FAILS != RELU
    build = _evaluate(tmp_path, monkeypatch, SPLIT_FAILS, "split_fails")
    assert build["split"]["used"] is False and build["split"]["reason"].startswith(
        "the split build failed"
    ), build


def test_a_template_kernel_builds_whole_and_is_correct(tmp_path, monkeypatch):
    assert TEMPLATE != RELU
    build = _evaluate(tmp_path, monkeypatch, TEMPLATE, "template")
    assert build["split"] == {"used": False, "reason": "a template kernel"}, build


def test_the_split_is_off_without_kb_split_cu_1(tmp_path, monkeypatch):
    build = _evaluate(tmp_path, monkeypatch, RELU, "off", split="0")
    assert build["split"] == {"used": False, "reason": "off (KB_SPLIT_CU=1 turns it on)"}, build
