"""Honest: an upper-triangular matmul that skips the blocks the inputs' structure makes zero.

class: 0 honest
attack: none; A and B are upper triangular (get_inputs draws torch.triu), so C's tiles below the
  diagonal are zero and tile (i, j) needs only k in [i, j]: what a fast kernel for KernelBench 1/14
  does. Strict mode's signed trial (2x - mean) filled the zeros with -mean, broke the structure the
  problem promises, and rejected it (trial_signed; helper-26)
problem: tests/redteam/problems/923_triu_matmul_small.py
expected: correct
device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def triu_matmul_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    i, j = tl.program_id(0), tl.program_id(1)
    rows = i * BLOCK + tl.arange(0, BLOCK)
    cols = j * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    if i <= j:
        for kb in range(i, j + 1):  # A[r, k] = 0 for k < r and B[k, c] = 0 for k > c
            ks = kb * BLOCK + tl.arange(0, BLOCK)
            a = tl.load(a_ptr + rows[:, None] * n + ks[None, :], mask=(rows[:, None] < n) & (ks[None, :] < n), other=0.0)
            b = tl.load(b_ptr + ks[:, None] * n + cols[None, :], mask=(ks[:, None] < n) & (cols[None, :] < n), other=0.0)
            acc += tl.dot(a, b, input_precision="ieee")
        acc = tl.where(rows[:, None] <= cols[None, :], acc, 0.0)
    tl.store(c_ptr + rows[:, None] * n + cols[None, :], acc, mask=(rows[:, None] < n) & (cols[None, :] < n))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        A, B = A.contiguous(), B.contiguous()
        n = A.shape[0]
        c = torch.empty_like(A)
        grid = (triton.cdiv(n, 32), triton.cdiv(n, 32))
        triu_matmul_kernel[grid](A, B, c, n, BLOCK=32)
        return c
