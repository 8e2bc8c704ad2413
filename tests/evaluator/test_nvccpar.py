"""evaluator.nvccpar: nvcc's steps with the host and device front ends at once make nvcc's object, say
which path built it, fall back to nvcc for what they do not cover, and report errors as nvcc does."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from kb_agent.evaluator import nvccpar
from kb_agent.evaluator.build import find_nvcc

NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no nvcc on this machine")
ARCH = ["-gencode=arch=compute_90,code=sm_90", "--compiler-options", "-fPIC", "-O3", "-std=c++17"]
KERNEL = """#include <cuda_runtime.h>
#include <cstdio>
__global__ void scale(float* x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
void launch(float* x, float a, int n) { scale<<<(n + 255) / 256, 256>>>(x, a, n); printf("%s\\n", __FILE__); }
"""
TORCH_KERNEL = """#include <torch/types.h>
#include <cuda.h>
#include <cuda_runtime.h>
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""


@pytest.fixture(autouse=True)
def _switched_on(monkeypatch):  # on by default (nvccpar.enabled); a user's KB_NVCC_PARALLEL=0 aside
    monkeypatch.delenv("KB_NVCC_PARALLEL", raising=False)


def _norm(data: bytes) -> bytes:
    """An object without the name of nvcc's temporary file (it differs between any two nvcc runs)."""
    return re.sub(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}", b"tmpxft_X", data)


def _both(tmp_path: Path, source: str, args: list[str], monkeypatch=None) -> tuple:
    cu = tmp_path / "cuda.cu"
    cu.write_text(source)
    stock = subprocess.run([NVCC, *args, "-c", str(cu), "-o", str(tmp_path / "stock.o")], capture_output=True)
    rc, out, record = nvccpar.compile_parallel(NVCC, [*args, "-c", str(cu), "-o", str(tmp_path / "par.o")])
    return stock, rc, out, record


def test_the_build_file_runs_nvcc_through_the_module_unless_switched_off(monkeypatch):
    ninja = "cxx = c++\nnvcc = /usr/local/cuda/bin/nvcc\ncuda_cflags = -O3\n"
    line = nvccpar.through(ninja).splitlines()[1]
    assert line.startswith("nvcc = ") and line.endswith(
        "-m kb_agent.evaluator.nvccpar /usr/local/cuda/bin/nvcc"
    )
    assert (
        nvccpar.through("nvcc = ccache /usr/local/cuda/bin/nvcc\n")
        == "nvcc = ccache /usr/local/cuda/bin/nvcc\n"
    )
    monkeypatch.setenv("KB_NVCC_PARALLEL", "0")
    assert nvccpar.through(ninja) == ninja


def test_what_is_not_a_plain_compile_goes_to_nvcc_as_it_is(tmp_path):
    for args in (["-E", "x.cu"], ["-ptx", "x.cu"], ["x.cu", "-o", "x"]):
        with pytest.raises(nvccpar.Unplanned):
            nvccpar.plan("nvcc", args, tmp_path)


@needs_nvcc
@pytest.mark.slow  # two compiles, 3-7 s on 2 shared cores
def test_the_object_is_nvccs_and_the_record_says_parallel(tmp_path):
    stock, rc, out, record = _both(tmp_path, KERNEL, ARCH)
    assert stock.returncode == 0 and rc == 0, out
    assert {k: record[k] for k in ("path", "reason")} == {"path": nvccpar.PARALLEL, "reason": ""}
    assert _norm((tmp_path / "par.o").read_bytes()) == _norm((tmp_path / "stock.o").read_bytes())


@needs_nvcc
@pytest.mark.slow  # two compiles, 3-7 s on 2 shared cores
def test_differing_module_ids_run_the_device_chain_again_as_nvcc_does(tmp_path, monkeypatch):
    run = nvccpar._run

    def tampered(steps, env, out, times=None):  # cicc's own id altered after the device chain ran
        rc = run(steps, env, out, times)
        for own in {m for s in steps for m in re.findall(r'"([^"]+/kb_device\.module_id)"', s)}:
            Path(own).write_text("_not_the_id")
        return rc

    monkeypatch.setattr(nvccpar, "_run", tampered)
    stock, rc, out, record = _both(tmp_path, KERNEL, ARCH)
    assert rc == 0 and record["path"] == nvccpar.RERUN and "module id" in record["reason"]
    assert _norm((tmp_path / "par.o").read_bytes()) == _norm((tmp_path / "stock.o").read_bytes())


@needs_nvcc
@pytest.mark.slow  # two compiles, 3-7 s on 2 shared cores
def test_two_architectures_are_compiled_by_nvcc_itself(tmp_path):
    two = ["-gencode=arch=compute_80,code=sm_80", *ARCH]
    stock, rc, out, record = _both(tmp_path, KERNEL, two)
    assert rc == 0 and record["path"] == nvccpar.NVCC and (tmp_path / "par.o").is_file()


@needs_nvcc
@pytest.mark.slow  # two compiles, 3-7 s on 2 shared cores
@pytest.mark.parametrize(
    "bad",
    [
        "void host_only() { undeclared_host(); }",  # the host front end's error (cudafe++)
        "__global__ void k(float* x) { x[0] = undeclared_device; }",  # both front ends see this one
        '__global__ void k(float* x) { asm("not.a.ptx.instruction;"); }',  # ptxas's
    ],
)
def test_a_compile_error_comes_back_as_nvcc_reports_it(tmp_path, bad):
    stock, rc, out, record = _both(tmp_path, "#include <cuda_runtime.h>\n" + bad + "\n", ARCH)
    assert stock.returncode != 0 and rc != 0
    clean = lambda b: re.sub(r"tmpxft_[0-9a-f_]+-\d+_|/\S*/", "", b.decode())  # noqa: E731
    assert clean(out) == clean(stock.stdout + stock.stderr)
    assert not (tmp_path / "par.o").exists()


@needs_nvcc
def test_the_command_line_leaves_a_record_beside_the_object(tmp_path):
    cu = tmp_path / "cuda.cu"
    cu.write_text(KERNEL)
    obj = tmp_path / "cuda.cuda.o"
    r = subprocess.run([sys.executable, "-m", "kb_agent.evaluator.nvccpar", NVCC, *ARCH, "-c", str(cu), "-o", str(obj)],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    (record,) = nvccpar.records(tmp_path)
    assert {k: record[k] for k in ("object", "path", "reason")} == {"object": "cuda.cuda.o", "path": "parallel",
                                                                     "reason": ""}  # fmt: skip
    steps = record["steps"]
    assert [t for t, _ in steps["host"]][-1] == "cudafe++"
    assert "cicc" in [t for t, _ in steps["device"]] and "ptxas" in [t for t, _ in steps["device"]]
    assert len(steps["final"]) == 1
    chains = max(sum(s for _, s in steps["host"]), sum(s for _, s in steps["device"]))
    assert steps["plan_s"] + chains + steps["final"][0][1] <= record["seconds"]


@needs_nvcc
@pytest.mark.slow
def test_a_cu_with_torch_headers_builds_the_same_object(tmp_path):
    """torch/types.h as load_inline prepends it, the flags torch passes (30-60 s on 2 cores)."""
    import sysconfig

    import torch.utils.cpp_extension as ce

    inc = [a for p in [*ce.include_paths(), sysconfig.get_paths()["include"]] for a in ("-isystem", p)]
    half = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
            "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr"]  # fmt: skip
    args = [
        "-DTORCH_EXTENSION_NAME=kb_test",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        *inc,
        *half,
        *ARCH[:-1],
        "-std=c++20",
    ]
    stock, rc, out, record = _both(tmp_path, TORCH_KERNEL, args)
    assert stock.returncode == 0 and rc == 0, out
    assert record["path"] == nvccpar.PARALLEL
    assert _norm((tmp_path / "par.o").read_bytes()) == _norm((tmp_path / "stock.o").read_bytes())


def test_the_dependency_file_torchs_build_asks_for_becomes_an_nvcc_m_call():
    args = [
        "--generate-dependencies-with-compile",
        "--dependency-output",
        "k.cuda.o.d",
        "-DX=1",
        *ARCH,
        "-c",
        "k.cu",
        "-o",
        "k.cuda.o",
    ]  # fmt: skip  (the order of torch's ninja rule)
    rest, deps = nvccpar.split_dependencies("nvcc", args)
    assert rest == ["-DX=1", *ARCH, "-c", "k.cu", "-o", "k.cuda.o"]
    assert deps == ["nvcc", "-DX=1", *ARCH, "k.cu", "-M", "--dependency-target-name", "k.cuda.o",
                    "--dependency-output", "k.cuda.o.d"]  # fmt: skip
    assert nvccpar.split_dependencies("nvcc", ["-c", "k.cu", "-o", "k.o"]) == (
        ["-c", "k.cu", "-o", "k.o"],
        None,
    )
    for odd in (
        ["-MMD", "-MF", "k.d"],
        ["-MD", "-MF", "k.d", "-MT", "t"],
        ["-MD"],
        ["--dependency-output", "k.d"],
    ):
        with pytest.raises(nvccpar.Unplanned):
            nvccpar.split_dependencies("nvcc", [*odd, "-c", "k.cu", "-o", "k.o"])


@needs_nvcc
@pytest.mark.slow  # two compiles, 3-7 s on 2 shared cores
def test_a_compile_with_its_dependency_file_writes_nvccs_file_and_object(tmp_path):
    """Seen on the H200: torch's build file passes --generate-dependencies-with-compile, whose
    `-- Filter Dependencies --` step the parallel path ran as a command (bash: --: invalid option)."""
    cu = tmp_path / "cuda.cu"
    cu.write_text(KERNEL)
    made = {}
    for name in ("stock", "par"):
        obj = tmp_path / f"{name}.o"
        args = ["--generate-dependencies-with-compile", "--dependency-output", f"{obj}.d", *ARCH, "-c", str(cu),
                "-o", str(obj)]  # fmt: skip
        if name == "stock":
            r = subprocess.run([NVCC, *args], capture_output=True)
            assert r.returncode == 0, r.stderr
        else:
            rc, out, record = nvccpar.compile_parallel(NVCC, args)
            assert rc == 0, out
            assert {k: record[k] for k in ("path", "reason")} == {"path": nvccpar.PARALLEL, "reason": ""}
        made[name] = (_norm(obj.read_bytes()), Path(f"{obj}.d").read_text().replace(str(obj), "OBJ"))
    assert made["par"] == made["stock"]
    assert "cuda_runtime.h" in made["par"][1]
