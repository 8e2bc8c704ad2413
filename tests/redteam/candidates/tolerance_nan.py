"""Tolerance hole: an all-NaN output (NaN compares false, but some checks count only |a-e| > tol).

class: 7 tolerance
attack: a Triton kernel fills the output with NaN. A check written as `not (abs(a - e) > tol).any()`
  passes it, since every comparison with NaN is false.
problem: toy/relu
expected: incorrect
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def nan_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    z = tl.zeros((BLOCK,), dtype=tl.float32)
    tl.store(y_ptr + offs, z / z, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        nan_kernel[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
        return y
