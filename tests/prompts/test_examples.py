"""The worked examples shown to the model must be right: Triton runs under TRITON_INTERPRET=1 on CPU
tensors (conftest sets it when there is no GPU) or on the GPU; the CUDA one is checked for shape here
and built and run on a GPU when there is one."""

import ast
import importlib.util
import os
from pathlib import Path

import pytest
from kb_agent.prompts import example_parts, example_source

EXAMPLES = Path(__file__).resolve().parents[2] / "prompts" / "examples"


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check(module, device: str, dtype=None):
    import torch

    torch.manual_seed(0)
    init = module.get_init_inputs()
    ref, new = module.Model(*init), module.ModelNew(*init)
    inputs = [x.to(device=device, dtype=dtype or x.dtype) for x in module.get_inputs()]
    expected, actual = ref(*inputs), new(*inputs)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    tol = 1e-4 if dtype in (None, torch.float32) else 1e-2
    torch.testing.assert_close(actual, expected, atol=tol, rtol=tol)


def test_triton_example_matches_reference(tmp_path):
    import torch

    if os.environ.get("TRITON_INTERPRET") == "1":
        device = "cpu"
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        pytest.skip("Triton needs TRITON_INTERPRET=1 or a GPU")
    _check(_import(EXAMPLES / "triton_example.py", "kb_triton_example"), device)
    _check(_import(EXAMPLES / "triton_example.py", "kb_triton_example_fp16"), device, torch.float16)
    # the answer part alone is a complete module (the model is shown it on its own)
    reference, answer = example_parts("triton")
    (tmp_path / "answer.py").write_text(reference + "\n" + answer)
    _check(_import(tmp_path / "answer.py", "kb_triton_answer_only"), device)


def test_cuda_example_is_a_load_inline_module():
    tree = ast.parse(example_source("cuda"))
    calls = [
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "load_inline"
    ]
    assert len(calls) == 1
    kwargs = {k.arg: k.value for k in calls[0].keywords}
    assert {"name", "cpp_sources", "cuda_sources", "functions"} <= set(kwargs)
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert {"Model", "ModelNew"} <= classes
    src = example_source("cuda")
    assert "__global__" in src and "C10_CUDA_KERNEL_LAUNCH_CHECK" in src


@pytest.mark.gpu
@pytest.mark.slow
def test_cuda_example_builds_and_matches_reference_on_gpu(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    module = _import(EXAMPLES / "cuda_example.py", "kb_cuda_example")
    _check(module, "cuda")
    _check(module, "cuda", torch.float16)
    _check(module, "cuda", torch.bfloat16)
