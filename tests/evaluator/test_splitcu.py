"""The split of a load_inline .cu into a device unit (nvcc, no torch) and a host unit (g++): what goes
where, how launches become launcher calls, what is left whole, the flags and the build file."""

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from kb_agent.evaluator import prelude, splitcu

CANDIDATES = Path(__file__).resolve().parent.parent / "candidates"

RELU = r"""#include <torch/types.h>
#include <torch/extension.h>
#include <cuda_runtime.h>
#define BLOCK 256
constexpr int kUnroll = 1;
struct Params { float lo; float hi; };
static int launches = 0;  // host state

__device__ __forceinline__ float clampf(float v, Params p) { return fminf(fmaxf(v, p.lo), p.hi); }

__global__ void __launch_bounds__(BLOCK) clamp_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                      Params p, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = clampf(x[i], p);
}

__global__ void touch_kernel() {}

torch::Tensor clamp(torch::Tensor x, double lo, double hi) {
    TORCH_CHECK(x.is_cuda(), "clamp<<<: a CUDA tensor");  // not a launch: <<<grid, block>>>
    auto y = torch::empty_like(x);
    long long n = x.numel();
    clamp_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), Params{(float)lo, (float)hi}, n);
    touch_kernel<<<1, 1, 0>>>();
    launches += 1;
    return y;
}
"""


def test_kernels_go_to_the_device_unit_with_launchers_and_the_wrapper_to_the_host_unit():
    s = splitcu.split(RELU)
    assert s.kernels == ("clamp_kernel", "touch_kernel")
    # device: the kernels, the device function, the types, constants and macros; no torch, no host state
    for piece in ("__global__ void __launch_bounds__(BLOCK) clamp_kernel", "__device__ __forceinline__",
                  "#define BLOCK 256", "constexpr int kUnroll", "struct Params", "#include <cuda_runtime.h>"):  # fmt: skip
        assert piece in s.device, piece
    assert not re.search(r"torch|TORCH_|launches", s.device)
    launcher = (
        "struct kb_launch_clamp_kernel {\n    dim3 grid, block;\n    size_t shmem;\n    cudaStream_t stream;\n"
        "    kb_launch_clamp_kernel(dim3 g, dim3 b, size_t s, cudaStream_t st) : grid(g), block(b), shmem(s), "
        "stream(st) {}\n    void operator()(const float* __restrict__ x, float* __restrict__ y, Params p, "
        "long long n) const;\n};"
    )
    assert launcher + "\nvoid kb_launch_clamp_kernel::operator()(" in s.device
    assert "    clamp_kernel<<<grid, block, shmem, stream>>>(x, y, p, n);\n}" in s.device
    assert "touch_kernel<<<grid, block, shmem, stream>>>();" in s.device
    # host: cuda_runtime.h and the half types first, torch, the wrapper with launcher calls, the shared
    # pieces; no device code
    assert s.host.startswith(
        "#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <torch/types.h>"
    )
    assert launcher in s.host and "kb_launch_clamp_kernel::operator()" not in s.host
    assert (
        "static int launches = 0;" in s.host and "struct Params" in s.host and "#define BLOCK 256" in s.host
    )
    assert "clampf" not in s.host and "threadIdx" not in s.host
    # the configuration first, then the arguments, as <<<>>> has them (a call's postfix expression is
    # sequenced before its arguments; helper-33)
    assert "kb_launch_clamp_kernel((n + BLOCK - 1) / BLOCK, BLOCK, 0, 0)(\n" in s.host
    assert "Params{(float)lo, (float)hi}, n);" in s.host
    assert "kb_launch_touch_kernel(1, 1, 0, 0)();" in s.host
    assert (
        '"clamp<<<: a CUDA tensor");  // not a launch: <<<grid, block>>>' in s.host
    )  # strings, comments kept
    assert s.host.count("<<<") == 2
    assert s.host.index("struct kb_launch_clamp_kernel {") < s.host.index("torch::Tensor clamp(")


def test_a_launch_with_its_stream_and_a_kernel_declared_before_its_definition():
    cu = """#include <torch/types.h>
__global__ void k(float* y, int n);
torch::Tensor f(torch::Tensor y) {
    auto stream = at::cuda::getCurrentCUDAStream();
    k<<<dim3(2, 1), dim3(128), 64 * sizeof(float), stream>>>(y.data_ptr<float>(), (int)y.numel());
    return y;
}
__global__ void k(float* out, int count) { if (threadIdx.x < count) out[threadIdx.x] = 0.f; }
"""
    s = splitcu.split(cu)
    assert "kb_launch_k(dim3(2, 1), dim3(128), 64 * sizeof(float), stream)(y.data_ptr<float>()" in s.host
    # declared at the kernel's first declaration, before the wrapper; defined after its definition
    assert s.host.index("struct kb_launch_k {") < s.host.index("torch::Tensor f(")
    assert "k<<<grid, block, shmem, stream>>>(out, count);" in s.device
    assert s.device.index("void kb_launch_k::operator()(") > s.device.index("out[threadIdx.x] = 0.f")


@pytest.mark.parametrize(
    "cu, why",
    [
        ("template <typename T> __global__ void k(T* y) {}\nvoid f(float* y) { k<float><<<1, 1>>>(y); }",
         "template kernel"),
        ("__global__ void k(float* y) {}\n#ifdef FAST\n#define N 4\n#endif\n", "#ifdef"),
        ("__global__ void k(float* y) {}\nvoid f(float* y) {\n#ifdef __CUDACC__\n k<<<1, 1>>>(y);\n#endif\n}",
         "nvcc's macros"),
        ("__global__ void k(float* y) {}\nvoid f(float* y) { cudaFuncSetAttribute(k, "
         "cudaFuncAttributeMaxDynamicSharedMemorySize, 1); k<<<1, 1>>>(y); }", "named outside a launch"),
        ("namespace { __global__ void k(float* y) {} }\n", "namespace"),
        ('#include "helpers.cuh"\n__global__ void k(float* y) {}\n', "include"),
        ("__global__ void k(float* y) {}\n__global__ void k(int* y) {}\n", "two kernels"),
        ("__global__ void k(float* y) {}\nvoid f(void (*g)(float*), float* y) { g<<<1, 1>>>(y); }",
         "other than a kernel"),
        ("__global__ void k(float*, int n) {}\n", "unnamed parameter"),
        ("__global__ void k(float* y, int n = 4) {}\n", "does not forward"),
        ("__global__ void k(at::Half* y) {}\n", "names torch"),
        ("#define LAUNCH(y) k<<<1, 1>>>(y)\n__global__ void k(float* y) {}\n", "macro"),
        ("__global__ void k(float* y);\nvoid f(float* y) { k<<<1, 1>>>(y); }\n", "defined"),
        ("int helper(int x) { return x; }\n", "no kernel"),
        # helper-33: names the host code sees without their device-only declarations (silent otherwise)
        ("template <class T> struct Vec { static constexpr int n = 1; };\n"
         "template <> struct Vec<float> { static constexpr int n = 4; __device__ static float4 load(const float* p); };\n"
         "struct Args { float c[Vec<float>::n]; float* y; };\n__global__ void k(Args a) {}\n"
         "void f(Args a) { k<<<1, 1>>>(a); }", "Vec, declared by device code, is named by host code"),
        ("__host__ __device__ float clamp_val(float v, float lo, float hi) { return v; }\n"
         "int clamp_val(int v, int lo, int hi) { return v; }\n__global__ void k(float a) {}\n"
         "void f() { k<<<1, 1>>>(clamp_val(0.75f, 0.f, 1.f)); }", "clamp_val, declared by device code"),
        ("__constant__ float c_w[16];\n__global__ void k(float* y) {}\n"
         "void f(float* y, const float* w) { cudaMemcpyToSymbol(c_w, w, 64); k<<<1, 1>>>(y); }", "c_w, declared"),
        ("C10_HOST_DEVICE inline float gelu(float x) { return x; }\n__global__ void k(float* y) {}\n",
         "host-and-device macros"),
        ("__global__ void k(float* y) {}\nvoid f(float* y, int n) { k<<<max(n, 1), 32>>>(y); }", "min or max"),
    ],
)  # fmt: skip
def test_what_is_built_whole(cu, why):
    with pytest.raises(splitcu.Unsplittable, match=why):
        splitcu.split(cu)


def test_a_host_device_function_goes_to_both_only_when_it_may_be_defined_twice():
    both = splitcu.split(
        "__host__ __device__ inline int div_up(int a, int b) { return (a + b - 1) / b; }\n"
        "__global__ void k(float* y) {}\n"
    )
    assert "div_up" in both.host and "div_up" in both.device
    device_only = splitcu.split(
        "__host__ __device__ int twice(int a) { return 2 * a; }\n__global__ void k(float* y) {}\n"
    )
    assert "twice" not in device_only.host and "twice" in device_only.device
    # only its declaration says so, not its body (helper-33: `constexpr` in a body doubled a definition)
    body = splitcu.split("__host__ __device__ float softplus(float x) { constexpr float k = 1.f; return x * k; }\n"
                         "__global__ void k(float* y) {}\n")  # fmt: skip
    assert "softplus" not in body.host


def test_what_nvcc_alone_reads_goes_to_the_device_unit_and_the_rest_where_it_belongs():
    # helper-33's cases that failed a split build (a wasted build each) or were refused needlessly
    s = splitcu.split(
        "#include <cub/block/block_reduce.cuh>\n#include <mma.h>\n#include <cooperative_groups.h>\n"
        "namespace cg = cooperative_groups;\nusing namespace nvcuda;\n"
        "struct __align__(8) bf16x4 { __nv_bfloat16 v[4]; };\n"
        "template <int WARP = 32> __device__ float warp_sum(float v) { return v; }\n"
        "static __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }\n"
        "__global__ void k(const __grid_constant__ bf16x4 p, float* y, int n) { y[0] = warp_sum(1.f); }\n"
        "void f(float* y, int n, bool big) { k<<<ceil_div(n, 128), big ? 256 : 32, 0, 0>>>(bf16x4{}, y, n); }\n"
    )
    for device_only in ("cub/block", "<mma.h>", "cooperative_groups.h>", "namespace cg", "using namespace nvcuda", "warp_sum"):  # fmt: skip
        assert device_only in s.device and device_only not in s.host, device_only
    assert "struct __align__(8) bf16x4" in s.host and "struct __align__(8) bf16x4" in s.device
    assert "static __forceinline__ int ceil_div" in s.host and "ceil_div" not in s.device
    assert "void operator()(const bf16x4 p, float* y, int n) const;" in s.host  # no __grid_constant__
    assert "kb_launch_k(ceil_div(n, 128), big ? 256 : 32, 0, 0)(bf16x4{}, y, n)" in s.host  # `<`: no template
    assert "#include <cuda_fp16.h>\n#include <cuda_bf16.h>" in s.device  # what torch's headers gave the .cu


def test_a_line_comment_ending_in_a_backslash_goes_on_to_the_next_line():
    # helper-33: the spliced line was a comment to the compiler and live code to the split
    s = splitcu.split(
        "#define BLOCK 256\n// the old value, see notes\\\n#define BLOCK 128\n__global__ void k(float* y) {}\n"
    )
    assert "BLOCK 128" not in s.device and "BLOCK 128" not in s.host and "#define BLOCK 256" in s.device


def test_masking_keeps_offsets_and_hides_literals_and_comments():
    text = 'a = "x<<<y"; // k<<<1,1>>>\nb = R"raw(}{)raw"; c = \'{\'; d = 1\'000; /* { */ e'
    m = splitcu.mask(text)
    assert len(m) == len(text) and m.count("\n") == 1
    assert "<<<" not in m and "{" not in m and "}" not in m
    assert "1'000" in m  # a digit separator is not a character literal
    with pytest.raises(splitcu.Unsplittable):
        splitcu.mask('a = "unterminated\n";')


def test_host_flags_keep_what_nvcc_gives_host_code_and_refuse_what_they_do_not_know():
    given = shlex.split(
        "-DTORCH_EXTENSION_NAME=x -isystem /t/include -Ikb_prelude -D__CUDA_NO_HALF_OPERATORS__ "
        "--expt-relaxed-constexpr -gencode=arch=compute_90,code=sm_90 --compiler-options '-fPIC' -O3 "
        "-std=c++20 --use_fast_math -Xptxas -v -Xcompiler -fopenmp,-Wall -lineinfo -U NDEBUG"
    )
    assert splitcu.host_flags(given) == [
        "-fPIC", "-DTORCH_EXTENSION_NAME=x", "-isystem", "/t/include", "-Ikb_prelude",
        "-D__CUDA_NO_HALF_OPERATORS__", "-fPIC", "-O3", "-std=c++20", "-fopenmp", "-Wall", "-U", "NDEBUG",
    ]  # fmt: skip
    for refused in (["-ccbin", "clang++"], ["--default-stream", "per-thread"], ["-Xlinker", "-s"]):
        with pytest.raises(splitcu.Unsplittable, match="nvcc option"):
            splitcu.host_flags(refused)


NINJA = """ninja_required_version = 1.3
cxx = c++
nvcc = /usr/local/cuda/bin/nvcc

cflags = -DTORCH_EXTENSION_NAME=kbx -isystem /t/include -fPIC -std=c++20
post_cflags = 
cuda_cflags = -DTORCH_EXTENSION_NAME=kbx -isystem /t/include -D__CUDA_NO_HALF_OPERATORS__ --expt-relaxed-constexpr -gencode=arch=compute_90,code=sm_90 --compiler-options '-fPIC' -O3 -std=c++20 -Ikb_prelude
cuda_post_cflags = 
cuda_dlink_post_cflags = 
ldflags = -shared -L/t/lib -lc10 -ltorch -lcudart

rule compile
  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags
  depfile = $out.d
  deps = gcc

rule cuda_compile
  command = $nvcc  $cuda_cflags -c $in -o $out $cuda_post_cflags



rule link
  command = $cxx $in $ldflags -o $out

build main.o: compile /b/x/main.cpp
build cuda.cuda.o: cuda_compile /b/x/cuda.cu



build kbx.so: link main.o cuda.cuda.o

default kbx.so
"""  # noqa: W291 (torch writes empty values with a trailing space)


def test_the_build_file_builds_both_units_and_goes_back_to_the_whole_cu():
    from kb_agent.evaluator import bindcache

    split, host = splitcu.split_ninja(NINJA, "/b/x")
    assert "build cuda_dev.cuda.o: cuda_compile /b/x/cuda_dev.cu\n" in split
    assert "build cuda_host.o: kb_host_compile /b/x/cuda_host.cpp\n" in split
    assert "build kbx.so: link main.o cuda_dev.cuda.o cuda_host.o\n" in split
    assert (
        "cuda.cu\n" not in split
        and "rule kb_host_compile\n  command = $cxx -MMD -MF $out.d $kb_host_cflags" in split
    )
    assert f"kb_host_cflags = {shlex.join(host)}\n" in split and "-gencode" not in shlex.join(host)
    assert bindcache._other_objects(split) == ["cuda_dev.cuda.o", "cuda_host.o"]
    assert splitcu.unsplit_ninja(split, NINJA) == NINJA
    # with the binding object's edge dropped and the precompiled header in, as the binding cache has them
    changed = bindcache.with_pch(bindcache.without_main_edge(split, Path("/b/x")), Path("/p/h.h"))
    assert splitcu.unsplit_ninja(changed, NINJA) == bindcache.with_pch(
        bindcache.without_main_edge(NINJA, Path("/b/x")), Path("/p/h.h")
    )
    with pytest.raises(splitcu.Unsplittable):
        splitcu.split_ninja(NINJA.replace("cuda.cuda.o", "kernels.cuda.o"), "/b/x")


def _cuda_include() -> str | None:
    out = subprocess.run(["nvcc", "--dryrun", "-c", "-x", "cu", "/dev/null", "-o", "/dev/null"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    m = re.search(r'INCLUDES="-I([^"]+)"', out.stdout + out.stderr)
    return m.group(1).strip() if m else None


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("nm") is None, reason="needs nvcc and nm")
def test_both_units_compile_and_the_host_units_launchers_are_the_device_units(tmp_path):
    """tests/candidates/cuda_relu.py's .cu as load_inline writes it (torch/types.h first, extension.h
    lightened as the build does): nvcc compiles the device unit, g++ the host unit against the slim
    torch/types.h with host_flags, and the linked module defines every launcher the host unit calls."""
    import torch.utils.cpp_extension as ce
    from kb_agent.evaluator.build import lighten_cuda_sources, torch_cxx_std

    source = (CANDIDATES / "cuda_relu.py").read_text()
    cu = (
        "#include <torch/types.h>\n"
        + lighten_cuda_sources([re.search(r'cuda_src = r"""(.*?)"""', source, re.S).group(1)])[0]
    )
    s = splitcu.split(cu)
    prelude.write(tmp_path, [cu], slim=True)
    (tmp_path / "dev.cu").write_text(s.device)
    (tmp_path / "host.cpp").write_text(s.host)
    include = _cuda_include()
    assert include, "nvcc --dryrun names no include folder"
    flags = [*(f for p in ce.include_paths() for f in ("-isystem", p)), "-isystem", include,
             "-D__CUDA_NO_HALF_OPERATORS__", "--expt-relaxed-constexpr", "-gencode=arch=compute_90,code=sm_90",
             "--compiler-options", "-fPIC", "-O3", torch_cxx_std(), prelude.INCLUDE_FLAG]  # fmt: skip
    device = subprocess.Popen(["nvcc", *flags, "-c", "dev.cu", "-o", "dev.o"], cwd=tmp_path,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    host = subprocess.run(["g++", *splitcu.host_flags(flags), "-c", "host.cpp", "-o", "host.o"], cwd=tmp_path,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert device.wait() == 0, device.stderr.read()
    assert host.returncode == 0, host.stderr
    subprocess.run(["g++", "-shared", "dev.o", "host.o", "-o", "m.so"], cwd=tmp_path, check=True)
    defined = subprocess.run(
        ["nm", "-D", "--defined-only", "m.so"], cwd=tmp_path, capture_output=True, text=True
    )
    assert "kb_launch_relu_kernel" in defined.stdout
    assert splitcu.undefined_launchers(tmp_path / "m.so") == []
    # a host unit whose launcher means other parameter types leaves it undefined, and that is seen
    (tmp_path / "host.cpp").write_text(
        s.host.replace("const float* x, float* y, int n)", "const float* x, float* y, long n)", 1)
    )
    subprocess.run(
        ["g++", *splitcu.host_flags(flags), "-c", "host.cpp", "-o", "host.o"], cwd=tmp_path, check=True
    )
    subprocess.run(["g++", "-shared", "dev.o", "host.o", "-o", "m.so"], cwd=tmp_path, check=True)
    assert splitcu.undefined_launchers(tmp_path / "m.so") == [
        ln.split()[-1] for ln in subprocess.run(["nm", "-D", "--undefined-only", "m.so"], cwd=tmp_path,
                                                capture_output=True, text=True).stdout.splitlines() if "kb_launch_" in ln
    ] != []  # fmt: skip
