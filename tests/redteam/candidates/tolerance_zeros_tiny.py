"""Tolerance hole: the reference output is far below atol, so zeros pass allclose.

class: 7 tolerance
attack: every |expected| < 1e-5 while atol = 1e-4, so a Triton kernel that writes zeros passes
  allclose(atol=rtol=1e-4) without computing anything. A trustworthy check looks at the error relative
  to the output's scale (or rejects an output that ignores its inputs).
problem: tests/redteam/problems/904_tiny_output.py
expected: incorrect
accept: rejected
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def zero_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        zero_kernel[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
        return y
