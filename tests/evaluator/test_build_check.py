"""The candidate's build flags reach the compilers on a CPU machine too: the nvcc compile check (no CUDA
torch) and the real load_inline build of C++ sources, end to end through `evaluate`."""

import shutil
import threading
from pathlib import Path

import pytest
from kb_agent.evaluator import EvalSettings, Status, evaluate
from kb_agent.evaluator.build import BuildError, _syntax_check
from kb_agent.problems import resolve_one

CANDIDATES = Path(__file__).resolve().parent.parent / "candidates"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
KERNEL = "__global__ void k(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] = 1.f; }\n"


def run(name: str):
    src = (CANDIDATES / f"{name}.py").read_text()
    return evaluate(resolve_one("toy/relu"), src, EvalSettings(device="cpu"))


@needs_nvcc
def test_the_compile_check_passes_the_candidates_cuda_flags_to_nvcc(tmp_path):
    # fails in nvcc's option parsing (--dryrun, before any header is read): well under a second
    with pytest.raises(BuildError) as e:
        _syntax_check([], [KERNEL], {"extra_cuda_cflags": ["-O3", "-arch=sm_70"]}, tmp_path, "9.0")
    assert e.value.errors == [
        "nvcc fatal   : Unsupported gpu architecture 'sm_70'\n"
        "    nvcc rejected -arch=sm_70, which the candidate passed in extra_cuda_cflags; "
        "drop it: the evaluator sets the architecture (sm_90)"
    ]


@pytest.mark.slow
@needs_nvcc
def test_a_cuda_candidate_with_sm_70_is_a_compile_error_with_nvccs_line_on_cpu():
    r = run("cuda_bad_arch")
    assert r.status == Status.COMPILE_ERROR, r.message
    assert "nvcc fatal   : Unsupported gpu architecture 'sm_70'" in r.message
    assert "-arch=sm_70, which the candidate passed in extra_cuda_cflags" in r.message
    assert "-isystem" not in r.message and r.compile.errors


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("ninja") is None or shutil.which("c++") is None, reason="needs ninja and c++"
)
def test_a_cpp_candidate_with_a_bad_cflag_gives_gxxs_line_through_load_inline():
    # C++ sources build for real on a CPU torch: this is the path a GPU build takes (torch's ninja log)
    r = run("cpp_bad_cflag")
    assert r.status == Status.COMPILE_ERROR, r.message
    assert "c++: error: unrecognized command-line option" in r.message  # the quotes follow the locale
    assert "-fno-such-flag, which the candidate passed in extra_cflags" in r.message
    assert "FAILED" not in r.message and "-isystem" not in r.message


@pytest.mark.slow
@needs_nvcc
def test_flags_a_gpu_build_accepts_pass_the_compile_check(tmp_path):
    # several targets (nvcc -ptx alone refuses them) and --threads (with -o /dev/null, nvcc 13.0's -ptx
    # never returned): about 25 s, parsing torch's headers
    flags = {"extra_cuda_cflags": ["-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_80,code=sm_80",
                                   "--threads", "2", "-O3", "--use_fast_math"]}  # fmt: skip
    outcome = []

    def check():
        try:
            _syntax_check([], [KERNEL], flags, tmp_path, "9.0")
            outcome.append("ok")
        except BaseException as e:  # noqa: BLE001 - reported below
            outcome.append(e)

    t = threading.Thread(target=check, daemon=True)
    t.start()
    t.join(300)
    assert outcome == ["ok"], (
        getattr(outcome[0], "errors", outcome) if outcome else "still running after 300 s"
    )


def test_the_compile_check_uses_the_cxx_standard_torchs_build_uses(tmp_path, monkeypatch):
    """Found by a new user: the check compiled with -std=c++17 while torch 2.13's load_inline builds with
    -std=c++20 (nvcc and g++), so a candidate using `consteval` was a compile_error on the CPU machine."""
    import torch
    from kb_agent.evaluator import build

    if torch.__version__.startswith("2.13."):  # the pinned torch (constraints-cpu.txt)
        assert build.torch_cxx_std() == "-std=c++20"
    cmds = []
    monkeypatch.setattr(build, "_run_check", lambda cmd, *a: cmds.append(cmd))
    _syntax_check(["int f();"], [KERNEL], {}, tmp_path, "9.0")
    assert len(cmds) == 3 and all(build.torch_cxx_std() in c and "-std=c++17" not in c for c in cmds)


@pytest.mark.slow
@needs_nvcc
def test_a_cxx20_cuda_candidate_passes_the_compile_check():
    # C++20 (`consteval`), which torch 2.13's load_inline builds with (-std=c++20): a valid candidate
    src = (CANDIDATES / "cuda_relu.py").read_text()
    launch = "relu_kernel<<<(n + 255) / 256, 256>>>"
    assert launch in src
    kernel = "torch::Tensor relu(torch::Tensor x) {"  # the .cu's function, not cpp_src's declaration
    src = src.replace(kernel, "consteval int block_size() { return 256; }\n\n" + kernel)
    src = src.replace(launch, "relu_kernel<<<(n + block_size() - 1) / block_size(), block_size()>>>")
    r = evaluate(resolve_one("toy/relu"), src, EvalSettings(device="cpu"))
    assert r.status == Status.RUNTIME_ERROR and "passed an nvcc compile check" in r.message, r.message


@pytest.mark.slow
@needs_nvcc
def test_a_cu_using_the_cpp_frontend_passes_the_compile_check_through_the_retry():
    # torch::nn comes with the torch/extension.h the candidate includes, not with torch/types.h: nvcc's
    # `name followed by "::" must be a class or namespace` has to lead to the build as written (it was
    # taken for the candidate's own error)
    src = (CANDIDATES / "cuda_relu.py").read_text()
    assert "    return y;\n}" in src
    src = src.replace("    return y;\n}", "    return torch::nn::functional::relu(y);\n}")
    r = evaluate(resolve_one("toy/relu"), src, EvalSettings(device="cpu"))
    assert r.status == Status.RUNTIME_ERROR and "passed an nvcc compile check" in r.message, r.message


@pytest.mark.parametrize(
    "source, backend",
    [
        ("import triton\n# faster than load_inline would be\n@triton.jit\ndef k(x):\n    pass\n", "triton"),
        ('import triton\n"""Not a cpp_extension: no cuda_sources here."""\n@triton.jit\ndef k(x):\n    pass\n', "triton"),
        ("import triton\n@triton.jit\ndef k(x):\n    assert x, 'load_inline is not used'\n", "triton"),
        ("from torch.utils.cpp_extension import load_inline\nm = load_inline(name='m', cpp_sources='')\n", "cuda"),
        ("import torch.utils.cpp_extension as ce\nm = ce.load_inline('m', '', cuda_sources='')  # Triton? no\n", "cuda"),
        ("import torch\n# load_inline, @triton.jit: words only\n", "torch"),
        ("this is not Python: load_inline '\n", "cuda"),  # untokenizable: read as it is
    ],
)  # fmt: skip
def test_the_backend_is_read_from_the_code_not_its_comments_or_strings(source, backend):
    # helper-32: a Triton candidate that mentioned load_inline in a comment, a docstring or a message was
    # taken for a CUDA one, and `--backend triton` rejected it
    from kb_agent.evaluator.build import detect_backend

    assert detect_backend(source) == backend
