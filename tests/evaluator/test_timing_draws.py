"""Strict timing's fresh values are new draws of `get_inputs()` (CPU, Triton interpreted). They were the
timing draw plus a small offset per element, which broke the structure a problem guarantees (an honest
kernel for symmetric matrices was rejected) and moved a large reduction less than its tolerance (a
replayed loss passed every judged call). Both found by a fresh helper, 2026-12-06."""

import pytest
from kb_agent.evaluator import EvalSettings, Status, evaluate
from kb_agent.problems import resolve_one

SYMMETRIC = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():  # KernelBench 1/13's inputs, smaller
    A = torch.rand(64, 64)
    B = torch.rand(64, 64)
    return [(A + A.T) / 2, (B + B.T) / 2]


def get_init_inputs():
    return []
"""

# reads B row by row as its transpose, which the problem's symmetric B allows
MATMUL_SYMMETRIC_B = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mm_bt_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    bt = tl.load(b_ptr + r[:, None] * N + r[None, :])
    tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, tl.trans(bt), input_precision="ieee"))


class ModelNew(nn.Module):
    def forward(self, A, B):
        A, B = A.contiguous(), B.contiguous()
        C = torch.empty_like(A)
        mm_bt_kernel[(1,)](A, B, C, N=A.shape[0])
        return C
"""

MSE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean((predictions - targets) ** 2)


def get_inputs():  # KernelBench 1/94's inputs, smaller
    scale = torch.rand(())
    return [torch.rand(128, 4096) * scale, torch.rand(128, 4096)]


def get_init_inputs():
    return []
"""

# replays its loss for the same tensors while sampled values stay within the old offsets of the ones it
# computed on: a mean over 5e5 elements moved far less than the tolerance under them
MSE_REPLAY_NEAR = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sqdiff_kernel(p_ptr, t_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    d = tl.load(p_ptr + offs, mask=mask, other=0.0) - tl.load(t_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + tl.program_id(0), tl.sum(d * d, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = None

    def forward(self, p, t):
        sample = (p.reshape(-1)[::7919].clone(), t.reshape(-1)[::7919].clone())
        s = self.seen
        if s is not None and s[0] is p and s[1] is t and all(
                float((x - y).abs().max()) < 2.5e-3 for x, y in zip(sample, s[2])):
            return s[3].clone()
        n = p.numel()
        parts = torch.empty(triton.cdiv(n, 65536), dtype=torch.float32)
        sqdiff_kernel[(parts.numel(),)](p.contiguous(), t.contiguous(), parts, n, BLOCK=65536)
        out = parts.sum() / n
        self.seen = (p, t, sample, out)
        return out
"""


def evaluate_file(tmp_path, problem_source: str, candidate: str):
    path = tmp_path / "problem.py"
    path.write_text(problem_source)
    return evaluate(resolve_one(str(path)), candidate, EvalSettings(device="cpu"))


@pytest.mark.slow
def test_an_honest_kernel_that_relies_on_the_inputs_structure_is_correct(tmp_path):
    # offsets per element made B asymmetric in the judged calls: rejected by timing_outputs
    r = evaluate_file(tmp_path, SYMMETRIC, MATMUL_SYMMETRIC_B)
    assert r.status == Status.CORRECT, r.message


@pytest.mark.slow
def test_a_replayed_reduction_is_rejected(tmp_path):
    # correct before the fresh values were draws (34x on the helper's run)
    r = evaluate_file(tmp_path, MSE, MSE_REPLAY_NEAR)
    assert r.status == Status.REJECTED, r.message
    failed = {k for k, v in r.strict["checks"].items() if not v["passed"]}
    assert failed & {"timing_outputs", "no_replay", "no_parity_replay"}, failed
