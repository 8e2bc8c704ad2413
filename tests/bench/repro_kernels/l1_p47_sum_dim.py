import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_kernel(x_ptr, y_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # x viewed as (B, M, N); program (b, j) sums rows 0..M-1 of columns j*BLOCK_N.. of slab b
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    base = x_ptr + b * M * N
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        ptrs = base + rows[:, None].to(tl.int64) * N + cols[None, :]
        acc += tl.load(ptrs, mask=(rows[:, None] < M) & cmask[None, :], other=0.0)
    tl.store(y_ptr + b * N + cols, tl.sum(acc, 0), mask=cmask)


class ModelNew(nn.Module):
    """torch.sum(x, dim, keepdim=True) as one Triton reduction kernel."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        dim = self.dim % x.dim()
        B, M, N = math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1 :])
        out_shape = list(x.shape)
        out_shape[dim] = 1
        y = torch.empty(out_shape, device=x.device, dtype=x.dtype)
        grid = (B, triton.cdiv(N, 64))
        sum_kernel[grid](x, y, M, N, BLOCK_M=32, BLOCK_N=64)
        return y
