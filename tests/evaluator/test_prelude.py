"""The light torch/types.h (evaluator.prelude): what it declares, when it applies, and that nvcc builds
candidates' CUDA sources against it (a real compile, `slow`)."""

import shutil
import subprocess

import pytest
from kb_agent.evaluator import prelude

RELU = """
__global__ void relu_kernel(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu_cuda(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  TORCH_CHECK_GE(x.dim(), 1);  // c10/util/Logging.h: without it, a second build (found by a new user)
  auto y = torch::empty_like(x);
  auto z = at::zeros({1}, x.options().dtype(torch::kFloat32));
  int n = x.numel();
  relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y.add_(z);
}
"""


def test_the_operators_named_are_the_ones_with_a_header():
    # qualified or called bare; methods (`.add_`, `.numel`) and kernels are the Tensor's / the candidate's
    assert prelude.operators([RELU]) == ["empty_like", "zeros"]
    assert prelude.operators(["auto y = empty(sizes, opts); y.add(x); relu_kernel(y);"]) == ["empty"]


def test_the_header_has_torchs_own_aliases_and_the_operators():
    text = prelude.header([RELU])
    assert "#include <ATen/core/Tensor.h>" in text and "#include <ATen/Dispatch.h>" in text
    assert "#include <c10/util/Logging.h>" in text  # TORCH_CHECK_EQ and its kin
    assert "#include <ATen/ops/empty_like.h>" in text and "#include <ATen/ops/zeros.h>" in text
    aliases = prelude.torch_aliases()
    assert "using namespace at;" in aliases
    assert any(a.startswith("constexpr auto kFloat32") for a in aliases)
    assert all(a in text for a in aliases)
    assert "#include <ATen/Functions.h>" not in text  # the point: not every operator


@pytest.mark.parametrize(
    "src",
    [
        "#include <ATen/ATen.h>\n" + RELU,
        "#include <torch/torch.h>\n" + RELU,
        RELU + "auto w = torch::nn::functional::relu(x);",
        RELU + "y.set_requires_grad(true);",
        RELU + "torch::autograd::Variable v;",
        RELU + "TORCH_LIBRARY(my_ops, m) {}",
        RELU + "PYBIND11_MODULE(m, m) {}",
    ],
)
def test_sources_needing_more_do_not_get_it(src):
    assert not prelude.applies([src])


def test_plain_sources_get_it():
    assert prelude.applies([RELU]) and prelude.applies(["#include <torch/types.h>\n" + RELU])
    assert not prelude.applies([])


def test_write_puts_it_where_the_include_flag_finds_it(tmp_path):
    prelude.write(tmp_path, [RELU])
    assert prelude.INCLUDE_FLAG == "-I" + prelude.FOLDER
    assert (tmp_path / prelude.FOLDER / "torch" / "types.h").read_text() == prelude.header([RELU])


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_nvcc_compiles_a_candidate_against_it(tmp_path):
    """The .cu exactly as load_inline writes it, against the light header: compiles (and its
    preprocessed text has torch's Tensor class but not ATen/Functions.h)."""
    import torch.utils.cpp_extension as ce

    prelude.write(tmp_path, [RELU])
    cu = tmp_path / "cuda.cu"
    cu.write_text("#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" + RELU)
    inc = [a for p in ce.include_paths() for a in ("-isystem", p)]
    cmd = ["nvcc", "-E", "-std=c++17", "-x", "cu", prelude.INCLUDE_FLAG, *inc, str(cu), "-o", "cuda.ii"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (tmp_path / "cuda.ii").read_text()
    assert "kb_prelude/torch/types.h" in text and "ATen/Functions.h" not in text
    ptx = ["nvcc", "-ptx", "-arch=sm_90", "-std=c++17", prelude.INCLUDE_FLAG, *inc, str(cu), "-o", "cuda.ptx"]
    proc = subprocess.run(ptx, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "relu_kernel" in (tmp_path / "cuda.ptx").read_text()


def _builds(src: str, problem: str = "toy/relu"):
    from kb_agent.evaluator import EvalSettings, evaluate
    from kb_agent.problems import resolve_one

    r = evaluate(resolve_one(problem), src, EvalSettings())
    print(
        f"\n{r.status}: builds {r.compile.builds if r.compile else None}; stages {r.stages}; {r.message[:300]}"
    )
    return r


@pytest.mark.gpu
def test_a_candidate_builds_against_the_light_header_and_is_correct(kb_dataset):
    from pathlib import Path

    from kb_agent.evaluator import Status

    src = (Path(__file__).resolve().parent.parent / "candidates" / "cuda_relu.py").read_text()
    r = _builds(src.replace('name="relu_ext"', 'name="relu_light"'))
    assert r.status == Status.CORRECT, r.message
    # a split evaluation records the build child's build and the run child's
    assert {b["cuda_include"] for b in r.compile.builds} == {"prelude"}


@pytest.mark.gpu
def test_a_tensor_operator_falls_back_to_torchs_header_and_is_correct(kb_dataset):
    # `y + 0` needs ATen/TensorOperators.h, which the light header leaves out: the light build fails for
    # want of the operator and the build is done again against torch/types.h, as before
    from pathlib import Path

    from kb_agent.evaluator import Status

    src = (Path(__file__).resolve().parent.parent / "candidates" / "cuda_relu.py").read_text()
    src = src.replace("    return y;\n}", "    return y + 0;\n}").replace('name="relu_ext"', 'name="relu_op"')
    assert "return y + 0;" in src
    r = _builds(src)
    assert r.status == Status.CORRECT, r.message
    assert {b["cuda_include"] for b in r.compile.builds} == {"types_h"}


def test_an_unchanged_header_is_not_written_again(tmp_path):
    # the .cu's dependency file names it: a newer one made ninja compile the .cu again (9.4 s on the H200)
    import os

    prelude.write(tmp_path, [RELU])
    target = tmp_path / prelude.FOLDER / "torch" / "types.h"
    os.utime(target, ns=(1_000_000_000, 1_000_000_000))
    prelude.write(tmp_path, [RELU])
    assert target.stat().st_mtime_ns == 1_000_000_000
    prelude.write(tmp_path, [RELU + "auto w = torch::ones_like(x);"])
    assert target.stat().st_mtime_ns != 1_000_000_000 and "ops/ones_like.h" in target.read_text()


def test_a_second_try_gets_the_candidates_sources_not_what_load_inline_made_of_them(tmp_path):
    # torch's load_inline adds its include and the pybind11 module to the very lists it is given; the try
    # after a failed light build then defined the module twice (seen on the H200: "redefinition of PyInit_")
    import torch.utils.cpp_extension as ce
    from kb_agent.evaluator.build import LoadInlineWrapper

    seen = []

    def fake(name, cpp_sources, cuda_sources=None, *args, **kwargs):
        seen.append((list(cpp_sources), list(cuda_sources)))
        cpp_sources.insert(0, "#include <torch/extension.h>")
        cpp_sources.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}")
        cuda_sources.insert(0, "#include <torch/types.h>")
        if len(seen) == 1:
            raise RuntimeError(
                "Error building extension 'x':\ncuda.cu(9): error: no operator \"+\" matches these operands"
            )
        return "module"

    fake.__wrapped__ = ce.load_inline  # load_inline's signature, for the wrapper's reading of the arguments
    wrapper = LoadInlineWrapper(tmp_path, "9.0", cuda_torch=True, salt="t")
    wrapper.original = fake
    decl = "torch::Tensor relu_cuda(torch::Tensor x);"
    assert wrapper("x", decl, "#include <torch/extension.h>\n" + RELU, functions=["relu_cuda"]) == "module"
    assert [cpp for cpp, _ in seen] == [[decl], [decl]]
    assert [cu[0].startswith("// kb-agent: torch/extension.h") for _, cu in seen] == [True, True]
    assert [b["cuda_include"] for b in wrapper.builds] == ["types_h"]
