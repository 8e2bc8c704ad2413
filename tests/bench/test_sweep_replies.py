"""The sweep's wrapped CUDA replies (tests/bench/sweep_replies.py): they fit the problem they were written
for, reach it through the fake server's routes, and their .cu fails or builds as each turn says."""

import importlib.util
import types
from pathlib import Path

import pytest
import torch
from kb_agent.agent.extract import extract_code
from kb_agent.agent.feedback import initial_messages
from kb_agent.problems import resolve, resolve_one

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("sweep_replies", HERE / "sweep_replies.py")
sweep_replies = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep_replies)


def run_candidate(source: str, problem, monkeypatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(reference output, candidate output) on the CPU, `load_inline` standing in for nvcc with a copy
    that records its calls."""
    calls = []

    def fake_load_inline(name, cpp_sources, cuda_sources, functions, **kw):
        assert len(functions) == 1 and functions[0] in cpp_sources and functions[0] in cuda_sources
        calls.append(name)
        return types.SimpleNamespace(**{functions[0]: lambda t: t.clone()})

    monkeypatch.setattr("torch.utils.cpp_extension.load_inline", fake_load_inline)
    ref, cand = {}, {}
    exec(compile(problem.code, "reference", "exec"), ref)
    exec(compile(source, "candidate", "exec"), cand)
    torch.manual_seed(0)
    inputs = ref["get_inputs"]()
    init = ref["get_init_inputs"]()
    torch.manual_seed(1)
    want = ref["Model"](*init)(*inputs)
    torch.manual_seed(1)
    got = cand["ModelNew"](*init)(*inputs)
    assert calls, "the candidate never built its extension"
    return want, got


@pytest.mark.parametrize("key", ["toy/relu", "toy/small_matmul", "toy/row_softmax"])
def test_correct_turns_return_the_reference_output_through_their_kernel(key, monkeypatch):
    problem = resolve_one(key)
    for turn in (2, 3):
        source = extract_code(sweep_replies.wrapped_replies(problem)[turn - 1])
        assert source == sweep_replies.candidate(problem, turn)
        want, got = run_candidate(source, problem, monkeypatch)
        assert torch.equal(want, got)


def test_every_source_of_a_sweep_differs_and_turn_3_keeps_turn_2s_declarations(kb_dataset):
    problems = resolve("1/1-20")
    sources = [sweep_replies.candidate(p, t) for p in problems for t in (1, 2, 3)]
    assert len(set(sources)) == len(sources)
    for p in problems:
        decl = [line for line in sweep_replies.candidate(p, 2).splitlines() if line.startswith("cpp_source")]
        assert decl and decl[0] in sweep_replies.candidate(p, 3)
        assert "class Model(" not in sweep_replies.candidate(p, 2)
        compile(sweep_replies.candidate(p, 2), p.key, "exec")  # valid Python for every problem


def test_each_problems_task_prompt_holds_its_route_key(kb_dataset):
    problems = resolve("1/1-20")
    for p in problems:
        task = initial_messages(p, "cuda", "NVIDIA H200", "9.0")[1]["content"]
        keys = [q.code.strip() for q in problems if q.code.strip() in task]
        assert max(keys, key=len) == p.code.strip()


def test_turn_out_of_range_is_an_error():
    with pytest.raises(ValueError, match="turn must be 1, 2 or 3"):
        sweep_replies.candidate(resolve_one("toy/relu"), 4)


@pytest.mark.gpu
@pytest.mark.parametrize("strict", [False, True])
def test_turn_1_is_a_compile_error_and_turns_2_and_3_are_correct_on_the_gpu(strict):
    """Through the evaluator, as a sweep evaluates them (the CPU's torch lacks the CUDA headers they
    include, so only a GPU machine builds them): correct under KernelBench's rules (bench_sweep's default),
    rejected by strict mode's custom_kernels_do_the_work, their kernels only copy."""
    from kb_agent.evaluator import EvalSettings, Status, evaluate

    problem = resolve_one("toy/relu")
    got = [
        evaluate(problem, sweep_replies.candidate(problem, t), EvalSettings(strict=strict)) for t in (1, 2, 3)
    ]
    print(f"\nstrict={strict}: " + "; ".join(f"{r.status} {r.stages}" for r in got))
    assert got[0].status == Status.COMPILE_ERROR and ";" in got[0].message, got[0].message
    if not strict:
        assert [r.status for r in got[1:]] == [Status.CORRECT, Status.CORRECT], [r.message for r in got]
        assert all(0 < r.speedup < 1.5 for r in got[1:])  # the reference's work plus a copy
        return
    # strict mode sees them for what they are: the kernel only copies what PyTorch computed
    assert [r.status for r in got[1:]] == [Status.REJECTED, Status.REJECTED], [r.message for r in got]
    for r in got[1:]:
        assert r.strict["parity_status"] == str(Status.CORRECT), r.strict
        assert not r.strict["checks"]["custom_kernels_do_the_work"]["passed"], r.strict["checks"]
