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


RELU = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu({arg})


def get_inputs():
    return [{draw}]


def get_init_inputs():
    return []
"""

RELU_KERNEL = """
import torch
import torch.nn as nn
import torch.random
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def relu(x):
    x = x.contiguous().view(-1)
    y = torch.empty_like(x)
    for _ in range(8):  # work worth replaying
        relu_kernel[(triton.cdiv(x.numel(), 65536),)](x, y, x.numel(), BLOCK=65536)
    return y
"""

# from the parity figure on (the same tensor twice), torch.manual_seed seeds a decoy and torch's real
# generator goes back to one state after every call: every later draw of get_inputs() is the same values
HIJACK_THE_DRAWS = (
    RELU_KERNEL
    + """
_REAL, _STATE = torch.default_generator, []


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last, self.cache = None, None

    def forward(self, x):
        if self.last is x and not _STATE:
            _STATE.append(_REAL.get_state())
            torch.random.default_generator = torch.Generator()
        self.last = x
        if _STATE and self.cache is not None and torch.equal(x, self.cache[0]):
            out = self.cache[1].clone()
        else:
            out = relu(x).view(x.shape)
            self.cache = (x.clone(), out.clone())
        if _STATE:
            _REAL.set_state(_STATE[0])
        return out
"""
)

# counts its calls on the timed tensor and replays all but the checked call after strict timing
REPLAY_BUT_THE_CHECKED_CALL = (
    RELU_KERNEL
    + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.timed, self.calls, self.out = None, 0, None

    def forward(self, x):
        if self.timed is not None and x is self.timed:
            self.calls += 1
            if self.calls <= 6 + 40:  # the CPU's parity calls (1 warm-up, 5 timed) and strict timing's
                return self.out.clone()
        y = relu(x)
        if self.timed is None or x is not self.timed:
            self.timed, self.calls, self.out = x, 1, y.clone()
        return y
"""
)


@pytest.mark.slow
def test_a_candidate_that_makes_every_fresh_draw_the_same_is_rejected(tmp_path):
    # torch.random was not guarded, and the draws seeded it through torch.manual_seed (correct at 12-48x on
    # a fresh helper's runs of fd6ed22); the draws now check for tampering first and fall back to the
    # offsets of the harness's own generator
    problem = RELU.format(arg="x", draw="torch.randn(64, 1024)")
    r = evaluate_file(tmp_path, problem, HIJACK_THE_DRAWS)
    assert r.status == Status.REJECTED, r.message
    assert "torch.random.default_generator" in r.strict["checks"]["tampering"]["detail"]


@pytest.mark.slow
def test_a_judged_call_on_a_strided_draw_hands_the_reference_a_dense_copy(tmp_path):
    # the judged calls handed the reference get_inputs()'s own strided view, on which its .view(-1)
    # raised, so neither was checked (correct with every call but the checked one replayed, fd6ed22)
    problem = RELU.format(arg="x.view(-1)", draw="torch.randn(1024, 512)[:, :256]")
    r = evaluate_file(tmp_path, problem, REPLAY_BUT_THE_CHECKED_CALL)
    assert r.status == Status.REJECTED, r.message
    failed = {k for k, v in r.strict["checks"].items() if not v["passed"]}
    assert "timing_outputs" in failed, failed
