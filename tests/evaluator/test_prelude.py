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
    # (and the operators ATen/Functions.h's own overloads call: `functions_tail`)
    tail = ["std", "std_mean", "var", "var_mean"]
    assert prelude.operators([RELU]) == sorted(["empty_like", "zeros", *tail])
    assert prelude.operators(["auto y = empty(sizes, opts); y.add(x); relu_kernel(y);"]) == sorted(
        ["empty", *tail]
    )


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


def test_the_slim_operator_header_is_torchs_without_the_four_heavy_includes():
    full = (prelude._torch_include() / "ATen" / "ops" / "empty_like.h").read_text()
    slim = prelude.slim_operator_header("empty_like")
    assert all(f"#include <{h}>" in full and f"#include <{h}>" not in slim for h in prelude.HEAVY)
    kept = [ln for ln in full.splitlines() if not any(f"#include <{h}>" == ln.strip() for h in prelude.HEAVY)]
    assert slim.splitlines() == kept and "#include <ATen/ops/empty_like_ops.h>" in slim
    # not a generated function header, or none at all: torch's own serves
    assert prelude.slim_operator_header("empty_like_ops") is None
    assert prelude.slim_operator_header("no_such_operator") is None


def test_a_slim_write_puts_the_operators_copies_beside_it_and_a_light_one_takes_them_away(tmp_path):
    import os

    ops = tmp_path / prelude.FOLDER / "ATen" / "ops"
    prelude.write(tmp_path, [RELU], slim=True)
    tail = ["std.h", "std_mean.h", "var.h", "var_mean.h"]
    assert sorted(f.name for f in ops.iterdir()) == sorted(["empty_like.h", "zeros.h", *tail])
    assert (ops / "zeros.h").read_text() == prelude.slim_operator_header("zeros")
    os.utime(ops / "zeros.h", ns=(1_000_000_000, 1_000_000_000))
    prelude.write(tmp_path, [RELU.replace("at::zeros", "at::ones")], slim=True)  # unchanged ones are kept
    assert sorted(f.name for f in ops.iterdir()) == sorted(["empty_like.h", "ones.h", *tail])
    prelude.write(tmp_path, [RELU], slim=True)
    assert (ops / "zeros.h").stat().st_mtime_ns != 1_000_000_000  # a new copy: it was taken away
    os.utime(ops / "zeros.h", ns=(1_000_000_000, 1_000_000_000))
    prelude.write(tmp_path, [RELU], slim=True)
    assert (ops / "zeros.h").stat().st_mtime_ns == 1_000_000_000
    prelude.write(tmp_path, [RELU])
    assert list(ops.iterdir()) == []


STREAM = """#include <ATen/cuda/CUDAContext.h>
__global__ void fill_kernel(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.f; }
torch::Tensor fill(torch::Tensor y) {
  auto stream = at::cuda::getCurrentCUDAStream();
  fill_kernel<<<1, 32, 0, stream>>>(y.data_ptr<float>(), (int)y.numel());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""


@pytest.mark.parametrize(
    "extra, light",
    [("", True), ("auto p = at::cuda::getCurrentDeviceProperties();", False), ("AT_CUDA_CHECK(cudaGetLastError());", False),
     ("const at::cuda::OptionalCUDAGuard guard(y.device());", False), ("auto h = at::cuda::getCurrentCUDABlasHandle();", False)],
)  # fmt: skip
def test_the_light_cuda_context_serves_sources_that_use_only_its_streams_and_launch_checks(
    tmp_path, extra, light
):
    src = STREAM.replace("  return y;", f"  {extra}\n  return y;")
    assert prelude.light_cuda_context([src]) is light
    assert prelude.light_cuda_context([src.replace("#include <ATen/cuda/CUDAContext.h>", "")]) is False
    prelude.write(tmp_path, [src], slim=True)
    context = tmp_path / prelude.FOLDER / prelude.CUDA_CONTEXT
    assert context.is_file() is light
    prelude.write(tmp_path, [STREAM])  # not slim: none
    assert not context.exists()


@pytest.mark.slow  # one g++ parse of the slim header
@pytest.mark.skipif(shutil.which("c++") is None or shutil.which("nvcc") is None, reason="needs g++ and nvcc")
def test_host_code_using_the_streams_compiles_against_the_light_cuda_context(tmp_path):
    """g++ on the host half of STREAM (as `evaluator.splitcu` makes it) against the slim header and the
    light CUDAContext.h: c10's CUDA headers, no cuSPARSE or cuBLAS header (those of a CUDA build of torch,
    `CUDA_HDR_DIR`, as the README has them for the compile check; CPU torch lacks c10's CUDA macros)."""
    import re
    from pathlib import Path

    from kb_agent.evaluator.build import torch_includes

    includes = torch_includes()
    if not any((Path(p) / "c10/cuda/impl/cuda_cmake_macros.h").is_file() for p in includes):
        pytest.skip("needs the headers of a CUDA build of torch (CUDA_HDR_DIR)")

    prelude.write(tmp_path, [STREAM], slim=True)
    out = subprocess.run(["nvcc", "--dryrun", "-c", "-x", "cu", "/dev/null", "-o", "/dev/null"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    cuda = re.search(r'INCLUDES="-I([^"]+)"', out.stdout + out.stderr).group(1).strip()
    host = "#include <cuda_runtime.h>\n#include <torch/types.h>\n" + STREAM.replace(
        "fill_kernel<<<1, 32, 0, stream>>>(", "launch(1, 32, 0, stream, "
    ).replace("__global__ void fill_kernel(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.f; }",
              "void launch(dim3 g, dim3 b, size_t s, cudaStream_t st, float* y, int n);")  # fmt: skip
    (tmp_path / "host.cpp").write_text(host)
    inc = [a for p in [*includes, cuda] for a in ("-isystem", p)]
    cmd = ["c++", "-std=c++20", "-fsyntax-only", "-H", prelude.INCLUDE_FLAG, *inc, "host.cpp"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "kb_prelude/ATen/cuda/CUDAContext.h" in proc.stderr  # -H: the headers read
    assert "CUDAContextLight.h" not in proc.stderr and "cusparse.h" not in proc.stderr


def _function_headers() -> list[str]:
    ops = prelude._torch_include() / "ATen" / "ops"
    return sorted(f.stem for f in ops.glob("*.h") if prelude.slim_operator_header(f.stem) is not None)


@pytest.mark.slow  # 3-7 s of g++ on 2 cores
@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a host compiler")
def test_every_operator_header_compiles_slim(tmp_path):
    """Every function header of this torch, slim, after the light header's base and nothing else: what
    the four heavy includes declare, no operator's functions use (2-3 s of g++ on 2 cores)."""
    sources = ["at::Tensor f(at::Tensor x) { return at::empty_like(x); }"]
    prelude.write(tmp_path, sources, slim=True)
    ops = tmp_path / prelude.FOLDER / "ATen" / "ops"
    names = _function_headers()
    assert len(names) > 1000
    for name in names:
        (ops / f"{name}.h").write_text(prelude.slim_operator_header(name))
    includes = "".join(f"#include <ATen/ops/{n}.h>\n" for n in names)
    (tmp_path / "all.cpp").write_text("#include <torch/types.h>\n" + includes + sources[0] + "\n")
    torch_inc = prelude._torch_include()
    cmd = ["c++", "-std=c++17", "-fsyntax-only", prelude.INCLUDE_FLAG, "-isystem", str(torch_inc), "-isystem",
           str(torch_inc / "torch" / "csrc" / "api" / "include"), "all.cpp"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # and the heavy headers are really not in it
    pre = subprocess.run(
        [*cmd[:2], "-E", *cmd[3:]], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert pre.returncode == 0 and "ATen/Context.h" not in pre.stdout and "ATen/core/Tensor.h" in pre.stdout


def test_the_heavy_names_are_what_the_slim_header_leaves_out():
    heavy = prelude.heavy_names()
    assert heavy is not None
    assert {"device_of", "globalContext", "checkAllSameGPU"} <= heavy  # DeviceGuard, Context, TensorUtils
    assert "blockDimx" not in heavy and "empty_like" not in heavy


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
    prelude.write(tmp_path, [RELU], slim=True)  # and with the slim operator headers: no ATen/Context.h
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "kb_prelude/ATen/ops/empty_like.h" in (tmp_path / "cuda.ii").read_text()
    assert "ATen/Context.h" not in (tmp_path / "cuda.ii").read_text()
    proc = subprocess.run(ptx, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


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
    assert {b["cuda_include"] for b in r.compile.builds} == {"slim"}


@pytest.mark.gpu
def test_a_candidate_using_device_of_builds_against_the_light_header_and_is_correct(kb_dataset):
    # `device_of` is ATen/DeviceGuard.h's, which the slim operator headers leave out: the slim build fails
    # for want of it and the light header (whose operator headers include it) serves
    from pathlib import Path

    from kb_agent.evaluator import Status

    src = (Path(__file__).resolve().parent.parent / "candidates" / "cuda_relu.py").read_text()
    guard = "    const at::OptionalDeviceGuard guard(device_of(x));\n    auto y = torch::empty_like(x);"
    src = src.replace("    auto y = torch::empty_like(x);", guard).replace(
        'name="relu_ext"', 'name="relu_guard"'
    )
    assert "device_of(x)" in src
    r = _builds(src)
    assert r.status == Status.CORRECT, r.message
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


def test_a_second_try_gets_the_candidates_sources_not_what_load_inline_made_of_them(tmp_path, monkeypatch):
    # torch's load_inline adds its include and the pybind11 module to the very lists it is given; the try
    # after a failed light build then defined the module twice (seen on the H200: "redefinition of PyInit_")
    import torch.utils.cpp_extension as ce
    from kb_agent.evaluator import build
    from kb_agent.evaluator.build import LoadInlineWrapper

    monkeypatch.setattr(build, "find_nvcc", lambda: None)  # torch's headers not read (nvcc -E's seconds)

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
    assert [b["cuda_include"] for b in wrapper.builds] == ["prelude"]  # the slim build failed


def _compile_check(folder, calls: list):
    """`light_first`'s attempt as a CPU machine's build makes it (`_syntax_check`), in a fresh folder per
    try, each try's include appended to `calls`."""
    from kb_agent.evaluator.build import _syntax_check

    def attempt(sources, include):
        calls.append(include)
        here = folder / f"{include}{len(list(folder.iterdir()))}"
        here.mkdir()
        return _syntax_check([], sources, {}, here, "9.0", include)

    return attempt


@pytest.mark.slow  # five nvcc compile checks, about a minute on 2 cores
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_slim_build_that_lacks_a_heavy_name_tries_the_light_header_and_a_typo_does_not(tmp_path):
    from kb_agent.evaluator.build import BuildError, light_first

    calls = []
    attempt = _compile_check(tmp_path, calls)
    guarded = RELU.replace(
        "  auto y = torch::empty_like(x);",
        "  at::OptionalDeviceGuard g(device_of(x));\n  auto y = torch::empty_like(x);",
    )
    assert "device_of" in guarded
    assert light_first([guarded], attempt) == (None, "prelude")
    assert calls == ["slim", "prelude"]
    calls.clear()
    with pytest.raises(BuildError) as e:
        light_first([RELU.replace("blockDim.x", "blockDimx")], attempt)
    assert calls == ["slim", "given"]  # the light header spells no `blockDimx`: its build is left out
    assert any("blockDimx" in err for err in e.value.errors)
    calls.clear()
    headers = _headers()
    with pytest.raises(BuildError) as e:  # and no torch header does: the slim build's error is the verdict
        light_first([RELU.replace("blockDim.x", "blockDimx")], attempt, headers)
    assert calls == ["slim"] and any("blockDimx" in err for err in e.value.errors)
    calls.clear()
    assert light_first([guarded], attempt, headers) == (None, "prelude")
    assert calls == ["slim", "prelude"]


def _headers():
    from kb_agent.evaluator.build import torch_headers

    return torch_headers({}, "9.0")


def _whole():
    return _headers().names()


@pytest.mark.slow  # two nvcc -E passes of torch/extension.h, 4-8 s on 2 cores
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_whole_names_are_what_torchs_headers_spell_macros_and_pasted_names_included():
    names = _whole()
    assert names is not None
    assert {"device_of", "empty_like", "Py_IsInitialized", "nn", "relu", "Tensor"} <= names
    assert {"TORCH_CHECK", "AT_DISPATCH_FLOATING_TYPES", "C10_HOST_DEVICE"} <= names  # macros' names (-dD)
    assert "kMish" in names  # pasted by torch/enum.h's k##name: a raw grep of the headers misses it
    assert "__half2float" in names  # CUDA's own, through nvcc's passes
    assert not {"blockDimx", "getCurrentCUDAStream", "OptionalCUDAGuard"} & names  # ATen/cuda is not in it


def test_a_lighter_try_that_failed_is_not_built_again(tmp_path, monkeypatch):
    # a split evaluation's run child loads the build child's module through the same load_inline call:
    # without the record it built the failed slim try again (5-8 s of nvcc) before finding the light one
    import torch.utils.cpp_extension as ce
    from kb_agent.evaluator import build
    from kb_agent.evaluator.build import BuildError, LoadInlineWrapper

    monkeypatch.setattr(build, "find_nvcc", lambda: None)  # torch's headers not read (nvcc -E's seconds)

    seen = []

    def fake(name, cpp_sources, cuda_sources=None, *args, **kwargs):
        seen.append(kwargs["build_directory"][-2:])
        if kwargs["build_directory"].endswith("_s"):
            raise RuntimeError(
                "Error building extension 'x':\ncuda.cu(9): error: identifier \"device_of\" is undefined"
            )
        return "module"

    fake.__wrapped__ = ce.load_inline
    decl = "torch::Tensor relu_cuda(torch::Tensor x);"
    guarded = RELU.replace("  auto y =", "  at::OptionalDeviceGuard g(device_of(x));\n  auto y =")
    for _ in range(2):  # the build child, then the run child
        wrapper = LoadInlineWrapper(tmp_path, "9.0", cuda_torch=True, salt="t")
        wrapper.original = fake
        assert wrapper("x", decl, guarded, functions=["relu_cuda"]) == "module"
        assert [b["cuda_include"] for b in wrapper.builds] == ["prelude"]
    assert seen == ["_s", "_p", "_p"]

    # a failure light_first does not go on from (a typo, in the sources as given) is not recorded
    def typo(name, cpp_sources, cuda_sources=None, *args, **kwargs):
        seen.append(kwargs["build_directory"][-2:])
        raise RuntimeError("Error building extension 'y':\ncuda.cu(3): error: expected a \";\"")

    typo.__wrapped__ = ce.load_inline
    for _ in range(2):
        wrapper = LoadInlineWrapper(tmp_path, "9.0", cuda_torch=True, salt="t")
        wrapper.original = typo
        with pytest.raises(BuildError):
            wrapper("y", decl, RELU.replace("int n", "int n;;"), functions=["relu_cuda"])
    assert seen[3:] == ["_s", "_s"]


@pytest.mark.slow  # nvcc -E of torch/extension.h, twice
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_build_that_lacks_a_name_no_torch_header_spells_is_tried_once(tmp_path):
    import torch.utils.cpp_extension as ce
    from kb_agent.evaluator.build import BuildError, LoadInlineWrapper

    seen = []

    def fake(name, cpp_sources, cuda_sources=None, *args, **kwargs):
        tail = kwargs["build_directory"][-2:]
        seen.append({"_s": "slim", "_p": "prelude", "_l": "types_h"}.get(tail, "given"))
        raise RuntimeError(
            "Error building extension 'x':\ncuda.cu(9): error: identifier \"blockDimx\" is undefined"
        )

    fake.__wrapped__ = ce.load_inline
    decl = "torch::Tensor relu_cuda(torch::Tensor x);"
    src = "#include <torch/extension.h>\n" + RELU.replace("blockDim.x", "blockDimx")
    for flags, tried in (
        ({}, ["slim"]),
        ({"extra_cuda_cflags": ["-DBLOCK=256"]}, ["slim", "types_h", "given"]),
    ):
        seen.clear()
        wrapper = LoadInlineWrapper(tmp_path / str(len(tried)), "9.0", cuda_torch=True, salt="t")
        wrapper.original = fake
        with pytest.raises(BuildError) as e:
            wrapper("t", decl, src, functions=["relu_cuda"], **flags)
        assert seen == tried  # with a macro of its own, torch's headers might read otherwise: every try
        assert "blockDimx" in e.value.errors[0]


# valid sources that spell a macro only heavier headers define, from two fresh helpers' attacks: against a
# light header each failed in a way that read as the candidate's own error (a syntax error, its own name
# undefined, "explicit type is missing") and was reported a compile error
_MACRO_CASES = {
    "version_guard": RELU.replace(
        "__global__ void relu_kernel",
        "#if TORCH_VERSION_MAJOR >= 2\n__device__ __forceinline__ float kb_relu(float v) { return v; }\n#endif\n"
        "__global__ void relu_kernel",
    ).replace("y[i] = x[i] > 0.f", "y[i] = kb_relu(x[i]) > 0.f"),
    "disallow_copy": RELU.replace(
        "__global__ void relu_kernel",
        "struct LaunchCfg {\n  LaunchCfg(int n) : threads(256) {}\n  AT_DISALLOW_COPY_AND_ASSIGN(LaunchCfg);\n"
        "  int threads;\n};\n__global__ void relu_kernel",
    ),
    # a lighter header's lack as an incomplete type and as an ambiguous overload (found by a fresh helper)
    "cat": RELU.replace("  return y.add_(z);", "  return torch::cat({y, x}, 0);"),
    "tensor_list": RELU.replace(
        "  auto z = at::zeros", "  auto s = torch::tensor({1, 2.5}, x.options());\n  auto z = at::zeros"
    ),
    "inttypes": "#include <cstdio>\n"
    + RELU.replace(
        "  int n = x.numel();", '  int n = x.numel();\n  if (!n) std::printf("%" PRId64 "\\n", (int64_t)n);'
    ),
}


@pytest.mark.slow  # up to four nvcc compile checks each, 20-60 s on 2 cores
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("case", sorted(_MACRO_CASES))
def test_a_source_a_lighter_header_fails_builds_against_a_heavier_one(tmp_path, case):
    from kb_agent.evaluator.build import light_first

    src = "#include <torch/extension.h>\n" + _MACRO_CASES[case]
    calls = []
    attempt = _compile_check(tmp_path, calls)
    # (AT_DISALLOW_COPY_AND_ASSIGN is ATen/Utils.h's, which the light header's operator headers bring in)
    assert light_first([src], attempt, _headers())[1] in ("slim", "prelude", "types_h", "given"), calls


def test_an_operator_taking_a_type_the_slim_base_leaves_incomplete_keeps_torchs_header():
    # `torch::cat({y, x}, 0)` against a slim cat.h: "list-initialization of ... incomplete type
    # at::ITensorListRef" (found by a fresh helper); index takes a c10::List<optional<Tensor>>
    assert prelude.slim_operator_header("cat") is None and prelude.slim_operator_header("index") is None
    assert prelude.slim_operator_header("empty_like") is not None


@pytest.mark.parametrize(
    "src",
    [
        "torch::Tensor operator+(const torch::Tensor& a, const torch::Tensor& b) { return a; }",
        "std::ostream& operator<<(std::ostream& os, const at::Tensor& t) { return os; }",
    ],
)
def test_an_operator_of_the_candidates_own_on_tensors_gets_no_light_header(src):
    # stock's ATen/TensorOperators.h makes `y + x` ambiguous with it; a light build accepted it
    assert not prelude.applies([RELU + src])
    assert prelude.applies([RELU + "__device__ float4 operator+(float4 a, float4 b) { return a; }"])


def test_a_heavier_macro_in_a_comment_or_string_is_no_use_and_a_pasting_macro_may_be_one(monkeypatch):
    from kb_agent.evaluator.build import TorchHeaders

    monkeypatch.setattr(prelude, "macros_beyond", lambda *args: frozenset({"TENSOR", "PRId64"}))
    headers = TorchHeaders("nvcc", "9.0", early_end=True)
    assert headers.spells_heavier_macro(['printf("%" PRId64, n);'], "slim") is True
    assert headers.spells_heavier_macro(['// TENSOR\n/* PRId64 */ printf("TENSOR");'], "slim") is False
    assert headers.spells_heavier_macro(["#define CAT(a, b) a##b\nint CAT(x, y);"], "slim") is True
    monkeypatch.setattr(prelude, "macros_beyond", lambda *args: None)
    assert headers.spells_heavier_macro(["int x;"], "slim") is None


def test_the_light_header_has_functions_hs_own_overloads():
    # `torch::var(x, 1)`: without at::var(const Tensor&, int dim), 1 converts to `bool unbiased` and the
    # light build computes the variance of all elements (found by a fresh helper, run against libtorch)
    tail, called = prelude.functions_tail()
    assert "inline Tensor var(const Tensor& self, int dim)" in tail and "inline int64_t numel(" in tail
    assert tail in prelude.header([RELU]) and set(called) <= set(prelude.operators([RELU]))


@pytest.mark.parametrize(
    "src,given",
    [
        ("#define N 1024\n#include <torch/extension.h>\n__global__ void k() {}", True),
        ("#include <torch/extension.h>\n#define N 1024\n__global__ void k() {}", False),
        ("#undef min\n#include <ATen/ATen.h>\n__global__ void k() {}", True),
        ("#define TILE 16\n__global__ void k() {}", False),
    ],
)
def test_a_macro_defined_before_a_torch_include_is_built_as_given(src, given):
    # stock reads torch/types.h (load_inline's, first) before the macro; a light build reads the headers
    # the include brings with the macro in force (`#define N 1024` broke c10's variadic.h in stock only)
    from kb_agent.evaluator.build import light_first

    tried = []
    assert light_first([src], lambda sources, include: tried.append(include))[1] == tried[0]
    assert (tried == ["given"]) is given


@pytest.mark.slow  # one g++ parse of the slim header, 2-4 s
@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a host compiler")
def test_torch_var_with_an_int_takes_the_dim_overload_against_the_slim_header(tmp_path):
    src = "at::Tensor f(const at::Tensor& x) { return torch::var(x, 1); }"
    prelude.write(tmp_path, [src], slim=True)
    check = (
        "#include <torch/types.h>\n#include <type_traits>\n"
        "at::Tensor (*by_dim)(const at::Tensor&, int) = &at::var;  // Functions.h's own overload\n"
        + src
        + "\n"
    )
    (tmp_path / "v.cpp").write_text(check)
    inc = prelude._torch_include()
    cmd = ["c++", "-std=c++17", "-fsyntax-only", prelude.INCLUDE_FLAG, "-isystem", str(inc), "-isystem",
           str(inc / "torch" / "csrc" / "api" / "include"), "v.cpp"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
