"""Compiler errors in BuildError.errors: the compiler's own lines, never ninja's command lines, and which of
the candidate's flags a compiler refused. Logs below have the shape torch's load_inline raises (its
"Error building extension" prefix around ninja's output), captured from real builds, paths made neutral."""

import shutil
import subprocess

import pytest
from kb_agent.evaluator.build import (
    MAX_ERRORS,
    BuildError,
    blame_flag,
    light_first,
    parse_compiler_errors,
    ptx_check_flags,
    trim_log,
)

TORCH = "/opt/py/lib/python3.12/site-packages/torch"
BUILD = "/tmp/kb_builds/relu_ext_3f2a9c1b7d0e_l"
NVCC_CMD = (
    f"/usr/local/cuda/bin/nvcc --generate-dependencies-with-compile --dependency-output cuda.cuda.o.d "
    f"-DTORCH_EXTENSION_NAME=relu_ext -DTORCH_API_INCLUDE_EXTENSION_H -isystem {TORCH}/include -isystem "
    f"{TORCH}/include/torch/csrc/api/include -isystem /usr/local/cuda/include -isystem /usr/include/python3.12 "
    "-D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ "
    "-D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr --compiler-options '-fPIC' -O3 -arch=sm_70 "
    f"-std=c++17 -c {BUILD}/cuda.cu -o cuda.cuda.o "
)
CXX_CMD = (
    f"c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=relu_ext -DTORCH_API_INCLUDE_EXTENSION_H -isystem "
    f"{TORCH}/include -isystem /usr/include/python3.12 -fPIC -std=c++17 -c {BUILD}/main.cpp -o main.o "
)
LINK_CMD = (
    f"c++ main.o cuda.cuda.o -shared -lnosuchlib -L{TORCH}/lib -lc10 -lc10_cuda -ltorch_cpu -o relu_ext.so"
)

# the H200 case of issue 11: extra_cuda_cflags=["-O3", "-arch=sm_70"] under CUDA 13
NINJA_BAD_ARCH = f"""Error building extension 'relu_ext_3f2a9c1b7d0e_l': [1/3] {NVCC_CMD}
FAILED: cuda.cuda.o
{NVCC_CMD}
nvcc fatal   : Unsupported gpu architecture 'compute_70'
[2/3] {CXX_CMD}
ninja: build stopped: subcommand failed.
"""

NINJA_GXX = f"""Error building extension 'cpp_ext': [1/2] {CXX_CMD}
FAILED: main.o
{CXX_CMD}
{BUILD}/main.cpp: In function ‘at::Tensor twice(at::Tensor)’:
{BUILD}/main.cpp:4:5: error: expected ‘,’ or ‘;’ before ‘return’
    4 |     return y.no_such_method();
      |     ^~~~~~
{BUILD}/main.cpp:5:1: warning: no return statement in function returning non-void [-Wreturn-type]
    5 | }}
      | ^
ninja: build stopped: subcommand failed.
"""

NINJA_LINK = f"""Error building extension 'ld_ext': [1/3] {NVCC_CMD}
[2/3] {CXX_CMD}
[3/3] {LINK_CMD}
FAILED: relu_ext.so
{LINK_CMD}
/usr/bin/ld: cannot find -lnosuchlib: No such file or directory
collect2: error: ld returned 1 exit status
ninja: build stopped: subcommand failed.
"""

NINJA_UNDEFINED = f"""Error building extension 'ext': [1/2] {CXX_CMD}
[2/2] {LINK_CMD}
FAILED: relu_ext.so
{LINK_CMD}
/usr/bin/ld: main.o: in function `relu(at::Tensor)':
main.cpp:(.text+0x2a): undefined reference to `relu_launch(at::Tensor const&)'
collect2: error: ld returned 1 exit status
ninja: build stopped: subcommand failed.
"""

NVCC_FRONT_END = f"""Error building extension 'relu_ext': [1/3] {NVCC_CMD}
FAILED: cuda.cuda.o
{NVCC_CMD}
{BUILD}/cuda.cu(11): error: identifier "undefined_thing" is undefined
      y[i] = undefined_thing;
             ^

{BUILD}/cuda.cu(12): error: expected a ";"
  }}
  ^

2 errors detected in the compilation of "{BUILD}/cuda.cu".
ninja: build stopped: subcommand failed.
"""

PTXAS = f"""Error building extension 'relu_ext': FAILED: cuda.cuda.o
{NVCC_CMD}
ptxas /tmp/tmpxft_00002ff8_00000000-6_cuda.ptx, line 27; error   : Unknown modifier '.instr'
ptxas /tmp/tmpxft_00002ff8_00000000-6_cuda.ptx, line 27; error   : Not a name of any known instruction: 'bogus'
ptxas fatal   : Ptx assembly aborted due to errors
ptxas error   : Entry function '_Z3bigPf' uses too much shared data (0x61a80 bytes, 0xc000 max)
ninja: build stopped: subcommand failed.
"""

CICC_KILLED = f"""Error building extension 'relu_ext': FAILED: cuda.cuda.o
{NVCC_CMD}
nvcc error   : 'cicc' died due to signal 9 (Kill signal)
ninja: build stopped: subcommand failed.
"""

SILENT = f"""Error building extension 'relu_ext': [1/3] {NVCC_CMD}
FAILED: cuda.cuda.o
{NVCC_CMD}
ninja: build stopped: subcommand failed.
"""

UNRECOGNISED = f"""Error building extension 'relu_ext': FAILED: main.o
{CXX_CMD}
Segmentation fault (core dumped)
ninja: build stopped: subcommand failed.
"""


def no_command_lines(errors):
    text = "\n".join(errors)
    return "FAILED" not in text and "-DTORCH_EXTENSION_NAME" not in text and "-isystem" not in text


def test_the_issue_11_log_gives_nvccs_line_and_names_the_candidates_flag():
    errors = parse_compiler_errors(NINJA_BAD_ARCH, None, {"extra_cuda_cflags": ["-O3", "-arch=sm_70"]}, "9.0")
    assert errors == [
        "nvcc fatal   : Unsupported gpu architecture 'compute_70'\n"
        "    nvcc rejected -arch=sm_70, which the candidate passed in extra_cuda_cflags; "
        "drop it: the evaluator sets the architecture (sm_90)"
    ]


def test_an_architecture_the_candidate_did_not_pass_is_not_blamed_on_it():
    errors = parse_compiler_errors(NINJA_BAD_ARCH, None, {"extra_cuda_cflags": ["-O3"]}, "9.0")
    assert errors == ["nvcc fatal   : Unsupported gpu architecture 'compute_70'"]
    assert parse_compiler_errors(NINJA_BAD_ARCH) == errors


@pytest.mark.parametrize(
    "flags,shown",
    [
        (["-arch", "sm_70"], "-arch sm_70"),
        (["-gencode", "arch=compute_70,code=sm_70"], "-gencode arch=compute_70,code=sm_70"),
        (["--gpu-architecture=compute_70"], "--gpu-architecture=compute_70"),
    ],
)
def test_architecture_flags_in_every_spelling_are_named(flags, shown):
    note = blame_flag(
        "nvcc fatal   : Unsupported gpu architecture 'compute_70'", "nvcc", {"extra_cuda_cflags": flags}
    )
    assert note == (
        f"nvcc rejected {shown}, which the candidate passed in extra_cuda_cflags; "
        "drop it: the evaluator sets the architecture"
    )


def test_gxx_error_keeps_the_source_lines_from_the_build_folder_or_the_compilers_quote(tmp_path):
    (tmp_path / "main.cpp").write_text(
        "#include <torch/extension.h>\ntorch::Tensor twice(torch::Tensor x) {\n    auto y = x * 2\n"
        "    return y.no_such_method();\n}\n"
    )
    assert parse_compiler_errors(NINJA_GXX, tmp_path) == [
        "main.cpp(4): error: expected ‘,’ or ‘;’ before ‘return’\n"
        "       3 |     auto y = x * 2\n"
        "       4 |     return y.no_such_method();"
    ]
    (quoted,) = parse_compiler_errors(NINJA_GXX, tmp_path / "elsewhere")
    assert quoted.splitlines()[1:] == ["    4 |     return y.no_such_method();", "    |     ^~~~~~"]


def test_linker_errors_name_the_library_and_the_candidates_ldflag():
    errors = parse_compiler_errors(NINJA_LINK, None, {"extra_ldflags": ["-lnosuchlib"]})
    assert errors[0].startswith("ld: cannot find -lnosuchlib: No such file or directory\n")
    assert "-lnosuchlib, which the candidate passed in extra_ldflags" in errors[0]
    assert errors[1] == "collect2: error: ld returned 1 exit status"
    assert len(errors) == 2 and no_command_lines(errors)


def test_undefined_reference_says_where_it_was_needed():
    assert parse_compiler_errors(NINJA_UNDEFINED) == [
        "main.cpp: undefined reference to `relu_launch(at::Tensor const&)' (in function `relu(at::Tensor)')",
        "collect2: error: ld returned 1 exit status",
    ]


def test_nvcc_front_end_errors_without_the_summary_line():
    errors = parse_compiler_errors(NVCC_FRONT_END)
    assert [e.splitlines()[0] for e in errors] == [
        'cuda.cu(11): error: identifier "undefined_thing" is undefined',
        'cuda.cu(12): error: expected a ";"',
    ]
    assert errors[0].splitlines()[1:] == ["    y[i] = undefined_thing;", "    ^"]


def test_a_source_error_is_never_blamed_on_a_flag():
    errors = parse_compiler_errors(
        'cuda.cu(3): error: identifier "O3" is undefined\n', None, {"extra_cuda_cflags": ["-O3"]}
    )
    assert errors == ['cuda.cu(3): error: identifier "O3" is undefined']


def test_ptxas_and_cicc_lines_are_kept_with_short_paths():
    assert parse_compiler_errors(PTXAS) == [
        "ptxas tmpxft_00002ff8_00000000-6_cuda.ptx, line 27; error   : Unknown modifier '.instr'",
        "ptxas tmpxft_00002ff8_00000000-6_cuda.ptx, line 27; error   : Not a name of any known instruction: 'bogus'",
        "ptxas fatal   : Ptx assembly aborted due to errors",
        "ptxas error   : Entry function '_Z3bigPf' uses too much shared data (0x61a80 bytes, 0xc000 max)",
    ]
    assert parse_compiler_errors(CICC_KILLED) == ["nvcc error   : 'cicc' died due to signal 9 (Kill signal)"]


def test_a_tool_option_is_named_with_its_pass_through_flag():
    note = blame_flag(
        "ptxas fatal   : Unknown option 'bogus'", "ptxas", {"extra_cuda_cflags": ["-Xptxas", "-bogus"]}
    )
    assert (
        note
        == "ptxas rejected -Xptxas -bogus, which the candidate passed in extra_cuda_cflags; drop or fix it"
    )
    note = blame_flag(
        "c++: error: unrecognized command-line option ‘-fbad’", "c++", {"extra_cflags": ["-O3", "-fbad"]}
    )
    assert note == "c++ rejected -fbad, which the candidate passed in extra_cflags; drop or fix it"
    assert (
        blame_flag("nvcc fatal   : 'abc': expected a number", "nvcc", {"extra_cuda_cflags": ["-O3"]}) is None
    )


def test_a_failed_step_with_unknown_output_gives_it_and_a_silent_one_says_so():
    assert parse_compiler_errors(UNRECOGNISED) == ["Segmentation fault (core dumped)"]
    (silent,) = parse_compiler_errors(SILENT)
    assert silent.startswith("building cuda.cuda.o failed and its compiler printed nothing")


def test_errors_are_capped_and_deduplicated():
    log = (
        "".join(f'cuda.cu({n}): error: expected a ";"\n' for n in range(1, 30))
        + 'cuda.cu(1): error: expected a ";"\n'
    )
    errors = parse_compiler_errors(log)
    assert len(errors) == MAX_ERRORS and errors[0] == 'cuda.cu(1): error: expected a ";"'


def test_trim_log_drops_torchs_prefix_and_the_command_lines():
    text = trim_log(NINJA_BAD_ARCH)
    assert "nvcc fatal   : Unsupported gpu architecture 'compute_70'" in text
    assert "Error building extension" not in text and "-isystem" not in text


def test_light_include_retry_only_for_a_missing_declaration_in_a_source():
    calls = []

    def attempt(errors):
        def run(sources, include):
            calls.append(include)
            raise BuildError("failed", errors, "")

        return run

    src = ["#include <torch/extension.h>\n__global__ void k() {}\n"]
    with pytest.raises(BuildError):
        light_first(src, attempt(["ld: cannot find -lfoo: No such file or directory"]))
    assert calls == ["slim"]  # a link or flag error would fail the same way again: no second build
    calls.clear()
    with pytest.raises(BuildError):
        light_first(
            src, attempt(['cuda.cu(4): error: identifier "at::cuda::getCurrentCUDAStream" is undefined'])
        )
    # a name the light header's additions never spell: its build would fail the same way
    assert calls == ["slim", "types_h", "given"]
    calls.clear()
    with pytest.raises(BuildError):  # a Tensor operator: ATen/TensorOperators.h is not in the light header
        light_first(src, attempt(['cuda.cu(9): error: no operator "+" matches these operands']))
    assert calls == ["slim", "prelude", "types_h", "given"]  # no name quoted: each header is tried
    calls.clear()
    with pytest.raises(BuildError):  # as parse_compiler_errors gives them: with the source lines quoted
        light_first(
            src,
            attempt(['cuda.cu(9): error: no operator "+" matches these operands\n   9 |   return y + 0;']),
        )
    assert calls == ["slim", "prelude", "types_h", "given"]
    calls.clear()
    with pytest.raises(BuildError):  # the light header in trouble: never the candidate's error
        light_first(
            src,
            attempt(
                [
                    'types.h(70): error: variable "torch::kF64" has already been defined (previous '
                    "definition at line 35 of kb_prelude/torch/types.h)"
                ]
            ),
        )
    assert calls == ["slim", "prelude", "types_h"]


def test_light_first_takes_the_first_include_that_builds():
    def attempt(sources, include):
        if include in ("slim", "prelude"):
            raise BuildError("failed", ['cuda.cu(3): error: namespace "at" has no member "native"'], "")
        return sources

    src = ["#include <torch/extension.h>\n__global__ void k() {}\n"]
    built, include = light_first(src, attempt)
    assert include == "types_h" and "torch/extension.h ->" in built[0]
    # no extension.h to drop: the light header, then the sources as they are
    built, include = light_first(["__global__ void k() {}\n"], attempt)
    assert include == "given"


def test_sources_that_need_the_whole_header_skip_the_light_one():
    tried = []
    for src in ("#include <torch/extension.h>\nnamespace py = pybind11;\n", "auto t = x.requires_grad_();\n"):
        tried.append(light_first([src], lambda sources, include: include)[1])
    assert tried == ["given", "given"]


@pytest.mark.parametrize(
    "flags,expected",
    [
        (["-O3"], ["-arch=sm_90", "-O3"]),
        (
            ["-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_80,code=sm_80", "-O3"],
            ["-arch=sm_90", "-O3"],
        ),
        (["-arch=sm_90a", "--use_fast_math"], ["-arch=sm_90a", "--use_fast_math"]),
        (["-arch", "sm_80", "-dlto"], ["-arch=sm_80"]),
        (["-arch=sm_70"], ["-arch=sm_70"]),  # kept: the --dryrun pass before reports it
    ],
)
def test_ptx_check_flags(flags, expected):
    assert ptx_check_flags(flags, "9.0") == expected


# -- real compilers, cheap invocations (plain sources, no torch headers: well under a second each) ----------

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
KERNEL = "__global__ void k(float* x) { x[threadIdx.x] = 1.f; }\n"


def compile_log(cmd, cwd):
    proc = subprocess.run(
        cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120
    )
    assert proc.returncode != 0, proc.stdout
    return proc.stdout


@needs_nvcc
def test_real_nvcc_rejecting_sm_70(tmp_path):
    (tmp_path / "k.cu").write_text(KERNEL)
    flags = ["-O3", "-gencode=arch=compute_70,code=sm_70"]
    errors = parse_compiler_errors(
        compile_log(["nvcc", "-c", *flags, "k.cu", "-o", "k.o"], tmp_path),
        tmp_path,
        {"extra_cuda_cflags": flags},
        "9.0",
    )
    assert errors[0].startswith(
        "nvcc fatal   : Unsupported gpu architecture 'compute_70'\n    nvcc rejected -gencode"
    )


@pytest.mark.slow  # two nvcc runs, 4.7 s: nvcc builds are the slow set's (README: Tests)
@needs_nvcc
def test_real_nvcc_and_ptxas_errors(tmp_path):
    (tmp_path / "bad.cu").write_text("__global__ void k(float* x) {\n    x[0] = undefined_thing;\n}\n")
    (tmp_path / "shm.cu").write_text(
        "__global__ void k(float* x) { __shared__ float s[100000]; s[threadIdx.x] = x[0]; __syncthreads();"
        " x[threadIdx.x] = s[threadIdx.x + 1]; }\n"
    )
    (errors,) = [
        parse_compiler_errors(
            compile_log(["nvcc", "-c", "-arch=sm_90", "bad.cu", "-o", "b.o"], tmp_path), tmp_path
        )
    ]
    assert errors == [
        'bad.cu(2): error: identifier "undefined_thing" is undefined\n       1 | __global__ void k(float* x) {\n       2 |     x[0] = undefined_thing;'
    ]
    errors = parse_compiler_errors(
        compile_log(["nvcc", "-c", "-arch=sm_90", "shm.cu", "-o", "s.o"], tmp_path)
    )
    assert len(errors) == 1 and errors[0].startswith(
        "ptxas error   : Entry function '_Z1kPf' uses too much shared data"
    )


@needs_nvcc
def test_real_ptx_check_flags_accept_what_a_gpu_build_accepts(tmp_path):
    # several targets are fine for the real build but `nvcc -ptx` refuses them; the check must not
    (tmp_path / "k.cu").write_text(KERNEL)
    flags = ["-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_80,code=sm_80", "-dlto"]
    log = compile_log(["nvcc", "-ptx", "-arch=sm_90", *flags, "k.cu", "-o", "k.ptx"], tmp_path)
    assert "not allowed when compiling for multiple GPU architectures" in log or "not compatible" in log
    cmd = ["nvcc", "-ptx", *ptx_check_flags(flags, "9.0"), "k.cu", "-o", "k.ptx"]
    assert subprocess.run(cmd, cwd=tmp_path, capture_output=True, timeout=120).returncode == 0


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_real_gxx_and_linker_errors(tmp_path):
    (tmp_path / "u.cpp").write_text("int helper(int);\nint twice(int x) { return helper(x) * 2; }\n")
    log = compile_log(["c++", "-shared", "-fPIC", "-Wl,--no-undefined", "u.cpp", "-o", "u.so"], tmp_path)
    assert parse_compiler_errors(log) == [
        "u.cpp: undefined reference to `helper(int)' (in function `twice(int)')",
        "collect2: error: ld returned 1 exit status",
    ]
    log = compile_log(["c++", "-shared", "-fPIC", "u.cpp", "-lnosuchlib", "-o", "u.so"], tmp_path)
    errors = parse_compiler_errors(log, None, {"extra_ldflags": ["-lnosuchlib"]})
    assert "cannot find -lnosuchlib" in errors[0] and "passed in extra_ldflags" in errors[0]
    log = compile_log(["c++", "-fsyntax-only", "-fno-such-flag", "u.cpp"], tmp_path)
    (error,) = parse_compiler_errors(log, None, {"extra_cflags": ["-fno-such-flag"]})
    assert "unrecognized command-line option" in error and "rejected -fno-such-flag" in error


def test_flags_passed_positionally_are_found_by_name(tmp_path):
    from kb_agent.evaluator.build import LoadInlineWrapper

    wrapper = LoadInlineWrapper(tmp_path, "9.0", cuda_torch=False, salt="")
    # load_inline(name, cpp_sources, cuda_sources, sycl_sources, functions, extra_cflags, ...)
    flags = wrapper._flags((None, ["relu"], ["-O3", "-fbad"]), {"extra_cuda_cflags": ["-arch=sm_70"]})
    assert flags["extra_cflags"] == ["-O3", "-fbad"] and flags["extra_cuda_cflags"] == ["-arch=sm_70"]
    assert wrapper._flags((), {"no_such_argument": 1}) == {"no_such_argument": 1}  # load_inline will say


def test_a_wrapped_compiler_drivers_error_names_the_candidates_flag():
    # the H200 image's g++ is a wrapper that runs `g++-real`, which names itself in its errors (seen there)
    log = (
        "Error building extension 'relu_ext': [1/2] c++ -MMD -MF main.o.d -fno-such-flag -c main.cpp -o main.o\n"
        "FAILED: main.o\n"
        "c++ -MMD -MF main.o.d -fno-such-flag -c main.cpp -o main.o\n"
        "g++-real: error: unrecognized command-line option ‘-fno-such-flag’; did you mean ‘-fno-mudflap’?\n"
        "ninja: build stopped: subcommand failed.\n"
    )
    errors = parse_compiler_errors(log, None, {"extra_cflags": ["-fno-such-flag"]}, "9.0")
    assert len(errors) == 1 and errors[0].startswith("g++-real: error: unrecognized command-line option")
    assert "-fno-such-flag, which the candidate passed in extra_cflags" in errors[0]
    assert no_command_lines(errors)


@pytest.mark.parametrize("folder", ["/home/Jane Doe/.cache/kb-agent/build/ab12", "/tmp/build (2)/ab12"])
def test_an_error_in_a_build_folder_with_spaces_or_parentheses_is_parsed_and_retried(folder):
    """Found by a new user: with KB_BUILD_DIR="/tmp/my build", a CUDA candidate using a Tensor operator
    (`y + x * 0`) was a compile_error, since nvcc's error, which names the .cu by its absolute path, was not
    recognised as one (no source line quoted) and the light header's retry never fired."""
    log = (
        f'{folder}/cuda.cu(16): error: no operator "*" matches these operands\n'
        "            operand types are: at::Tensor * int\n"
        f'1 error detected in the compilation of "{folder}/cuda.cu".\n'
    )
    errors = parse_compiler_errors(log)
    assert errors[0].startswith('cuda.cu(16): error: no operator "*" matches these operands')
    calls = []

    def attempt(sources, include):
        calls.append(include)
        if include in ("slim", "prelude"):
            raise BuildError("failed", errors, log)
        return "module"

    assert light_first(["__global__ void k() {}\n"], attempt) == ("module", "given")
    assert calls == ["slim", "prelude", "given"]


@pytest.mark.parametrize(
    "error,light",
    [
        ('cuda.cu(16): error: name followed by "::" must be a class or namespace', True),  # no name quoted
        ("/b/cuda.cu:16:12: error: 'nn' has not been declared", False),
        # a `::Py_IsInitialized()` that only torch/extension.h's Python.h declares (found by a new user)
        ('cuda.cu(9): error: the global scope has no "Py_IsInitialized"', False),
    ],
)
def test_a_missing_namespace_is_a_missing_declaration_and_tries_on(error, light):
    # torch::nn comes with torch/extension.h, not torch/types.h (nvcc and g++ say it their own ways)
    calls = []

    def run(sources, include):
        calls.append(include)
        raise BuildError("failed", [error + "\n  16 |   return torch::nn::functional::relu(y);"], "")

    with pytest.raises(BuildError):
        light_first(["#include <torch/extension.h>\n__global__ void k() {}\n"], run)
    assert calls == ["slim", *(["prelude"] if light else []), "types_h", "given"]


@pytest.mark.parametrize(
    "error,names",
    [
        ('cuda.cu(4): error: identifier "blockDimx" is undefined', ["blockDimx"]),
        (
            'cuda.cu(4): error: identifier "at::cuda::getCurrentCUDAStream" is undefined',
            ["getCurrentCUDAStream"],
        ),
        (
            'cuda.cu(4): error: namespace "at::cuda" has no member "getCurrentCUDAStream"',
            ["getCurrentCUDAStream"],
        ),
        ('cuda.cu(4): error: class "at::Tensor" has no member "data_ptrr"', ["data_ptrr"]),
        ('cuda.cu(9): error: the global scope has no "Py_IsInitialized"', ["Py_IsInitialized"]),
        (
            'cuda.cu(9): error: no instance of overloaded function "at::empty" matches the argument list',
            ["empty"],
        ),
        ("/b/cuda.cu:16:12: error: 'nn' has not been declared", ["nn"]),
        ("/b/main.cpp:3:5: error: \u2018foo\u2019 was not declared in this scope", ["foo"]),
        ("/b/main.cpp:3:5: error: 'kMish' is not a member of 'torch'", ["kMish"]),
        ('cuda.cu(9): error: no operator "+" matches these operands', None),  # no name: unknown
        ('cuda.cu(9): error: incomplete type "c10::Half" is not allowed', None),
        ('cuda.cu(16): error: name followed by "::" must be a class or namespace', None),
    ],
)
def test_the_missing_name_is_read_from_nvccs_and_gccs_wordings(error, names):
    from kb_agent.evaluator.build import _missing_names

    assert _missing_names(BuildError("failed", [error + "\n   4 |   quoted source"], "")) == names


def test_a_name_no_torch_header_spells_ends_the_tries_at_once():
    # a typo, or at::cuda::getCurrentCUDAStream without ATen/cuda/CUDAContext.h, fails every heavier try
    # the same way: the build is not done four times (some 40 s on the H200)
    calls = []

    def attempt(error):
        def run(sources, include):
            calls.append(include)
            raise BuildError("failed", [error], "")

        return run

    class Headers:  # what TorchHeaders reads of torch's headers, fixed
        def __init__(self, names, macros):
            self._names, self.macros = names, macros

        def names(self):
            return self._names

        def spells_heavier_macro(self, cuda_sources, include):
            return None if self.macros is None else any(m in "\n".join(cuda_sources) for m in self.macros)

    src = ["#include <torch/extension.h>\n__global__ void k() {}\n"]
    whole = frozenset({"device_of", "empty_like", "Tensor", "at"})
    every = ["slim", "prelude", "types_h", "given"]
    for error, tried in [
        ('cuda.cu(4): error: identifier "blockDimx" is undefined', ["slim"]),
        ('cuda.cu(4): error: namespace "at" has no member "device_of"', every),
        ('cuda.cu(9): error: no operator "+" matches these operands', every),
    ]:
        calls.clear()
        with pytest.raises(BuildError):
            light_first(src, attempt(error), Headers(whole, frozenset({"PRId64"})))
        assert calls == tried, error
    typo = 'cuda.cu(4): error: identifier "blockDimx" is undefined'
    for headers in (Headers(None, frozenset()), Headers(whole, None), None):  # unknown: every try, as before
        calls.clear()
        with pytest.raises(BuildError):
            light_first(src, attempt(typo), headers)
        assert calls == ["slim", "types_h", "given"]
    # the sources spell a macro only heavier headers define (found by a fresh helper: `#if
    # TORCH_VERSION_MAJOR >= 2` around the candidate's own helper left it undefined in the light builds)
    guarded = ["#include <torch/extension.h>\n#if TORCH_VERSION_MAJOR >= 2\n__device__ float f();\n#endif\n"]
    for error in (
        'cuda.cu(9): error: identifier "relu_op" is undefined',
        'cuda.cu(3): error: expected a ")"',
    ):
        calls.clear()
        with pytest.raises(BuildError):
            light_first(guarded, attempt(error), Headers(whole, frozenset({"TORCH_VERSION_MAJOR"})))
        assert calls == every, error  # any error at all goes on, and nothing ends early
    calls.clear()
    with pytest.raises(BuildError):  # a macro of the light header's own: a syntax error is the candidate's
        light_first(src, attempt('cuda.cu(3): error: expected a ")"'), Headers(whole, frozenset({"PRId64"})))
    assert calls == ["slim"]


@pytest.mark.parametrize(
    "flags,as_is",
    [
        ({}, True),
        (
            {
                "extra_cuda_cflags": ["-O3", "--use_fast_math", "", "-lineinfo"],
                "extra_cflags": ["-DX", "-I."],
            },
            True,
        ),
        ({"extra_cuda_cflags": ["-Xptxas=-v", "--expt-relaxed-constexpr", "-maxrregcount=64"]}, True),
        ({"extra_cuda_cflags": ["-arch=sm_100a"]}, False),  # another device pass than the names were read for
        ({"extra_cuda_cflags": ["-DUSE_FOO"]}, False),
        ({"extra_cuda_cflags": ["-Xcompiler", "-fopenmp"]}, False),  # _OPENMP
        ({"extra_cuda_cflags": ["-std=c++17"]}, False),
        ({"extra_cuda_cflags": ["--compiler-options '-DKB=1'"]}, False),
        ({"extra_cuda_cflags": ["--define-macro=X"]}, False),
        ({"extra_cuda_cflags": ["-U__CUDA_NO_HALF_OPERATORS__"]}, False),
        ({"extra_cuda_cflags": ["-include", "my.h"]}, False),
        ({"extra_include_paths": ["/opt/x"]}, False),
    ],
)
def test_only_flags_that_leave_torchs_headers_as_they_are_allow_the_early_end(flags, as_is):
    from kb_agent.evaluator.build import _flags_leave_torch_as_is

    assert _flags_leave_torch_as_is(flags) is as_is
