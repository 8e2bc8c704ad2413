"""The architecture a CUDA build targets: exactly the detected GPU's (no PTX beside it), and the
evaluator's `-gencode` kept when a candidate's flag merely contains "arch" (torch's substring test dropped
it, leaving the build to nvcc's default architecture), while a candidate that names its own architecture
still builds for that alone, as before."""

import shutil

import pytest
from kb_agent.evaluator import build
from kb_agent.evaluator.build import LoadInlineWrapper, arch_flags_for, evaluator_arch_kept
from kb_agent.evaluator.hardware import arch_list

OURS = ["-gencode=arch=compute_90a,code=sm_90a"]


def test_the_arch_list_is_the_detected_gpu_alone():
    assert arch_list((9, 0)) == "9.0a"  # sm_90a: Hopper's wgmma and TMA, for that GPU only, no PTX
    assert arch_list((8, 0)) == "8.0"
    assert "+PTX" not in arch_list((10, 0)) and ";" not in arch_list((10, 0))


@pytest.mark.parametrize(
    "flags,added",
    [
        ([], False),  # torch adds its own
        (["-O3", "--use_fast_math"], False),
        (["-Xcompiler", "-march=native"], True),  # "arch" in a host flag: torch dropped its -gencode
        (["--compiler-options=-march=native", "-O3"], True),
        (["-DKB_arch_tuned=1"], True),
        (["-arch=sm_90a"], False),  # the candidate's own architecture, as before
        (["-gencode=arch=compute_90,code=sm_90"], False),
        (["--gpu-architecture", "sm_90"], False),
        (["-O3 -arch=sm_90"], False),  # several options in one string
        (["-Xcompiler", "-march=native", "-arch=sm_90"], False),
    ],
)
def test_the_evaluators_architecture_is_added_only_where_torch_would_drop_it_for_nothing(flags, added):
    got = arch_flags_for(flags, OURS)
    assert got == (flags + OURS if added else flags)
    names_own = any(
        f.startswith(("-arch", "-gencode", "--gpu-architecture")) for f in " ".join(flags).split()
    )
    assert evaluator_arch_kept(flags) == (not names_own)


def test_the_wrapper_passes_the_fixed_flags_by_keyword_and_by_position(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    w = LoadInlineWrapper(tmp_path, "9.0", cuda_torch=True, salt="s")
    args, kwargs = w._with_arch(
        (), {"functions": ["f"], "extra_cuda_cflags": ["-Xcompiler", "-march=native"]}
    )
    assert args == () and kwargs["extra_cuda_cflags"] == ["-Xcompiler", "-march=native", *OURS]
    assert kwargs["functions"] == ["f"]
    mine = {"functions": ["f"], "extra_cuda_cflags": ["-arch=sm_90a"]}
    assert w._with_arch((), mine) == ((), mine)
    import inspect

    params = list(inspect.signature(w.original).parameters)
    pos = params.index("extra_cuda_cflags") - 3  # after name, cpp_sources, cuda_sources
    given = tuple([None] * pos + [["-Xcompiler", "-march=native"]])
    args, kwargs = w._with_arch(given, {})
    bound = inspect.signature(w.original).bind_partial("n", [], [], *args, **kwargs)
    assert bound.arguments["extra_cuda_cflags"] == ["-Xcompiler", "-march=native", *OURS]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("flags,gencode", [(["-Xcompiler", "-march=native"], True), (["-arch=sm_90"], False)])
def test_the_cpu_compile_check_passes_nvcc_what_the_build_will(tmp_path, monkeypatch, flags, gencode):
    cmds = []
    monkeypatch.setattr(build, "_run_check", lambda cmd, *a: cmds.append(cmd))
    build._syntax_check([], ["__global__ void k() {}"], {"extra_cuda_cflags": flags}, tmp_path, "9.0")
    dryrun = next(c for c in cmds if "--dryrun" in c)
    assert ("-gencode=arch=compute_90,code=sm_90" in dryrun) == gencode
    assert all(f in dryrun for f in flags)
