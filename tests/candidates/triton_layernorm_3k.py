"""A plain Triton LayerNorm in three kernels, all on the current stream (issue 11, item 3): per-chunk mean
and M2, a per-row combination (Chan's formula), then the normalisation. For KernelBench 1/40."""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def ln_partial(x_ptr, mean_ptr, m2_ptr, N, CHUNKS, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    offs = c * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=0.0).to(tl.float32)
    cnt = tl.minimum(N - c * BLOCK, BLOCK).to(tl.float32)
    mean = tl.sum(x, axis=0) / cnt
    d = tl.where(mask, x - mean, 0.0)
    tl.store(mean_ptr + row * CHUNKS + c, mean)
    tl.store(m2_ptr + row * CHUNKS + c, tl.sum(d * d, axis=0))


@triton.jit
def ln_stats(mean_ptr, m2_ptr, mu_ptr, rstd_ptr, N, CHUNKS, eps, BLOCK: tl.constexpr, CB: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, CB)
    m = i < CHUNKS
    means = tl.load(mean_ptr + row * CHUNKS + i, mask=m, other=0.0)
    m2s = tl.load(m2_ptr + row * CHUNKS + i, mask=m, other=0.0)
    cnt = tl.where(m, tl.minimum(N - i * BLOCK, BLOCK), 0).to(tl.float32)
    mu = tl.sum(means * cnt, axis=0) / N
    d = means - mu
    var = (tl.sum(m2s, axis=0) + tl.sum(cnt * d * d, axis=0)) / N
    tl.store(mu_ptr + row, mu)
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(var + eps))


@triton.jit
def ln_apply(x_ptr, w_ptr, b_ptr, y_ptr, mu_ptr, rstd_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=0.0)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    mu = tl.load(mu_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    tl.store(y_ptr + row * N + offs, (x - mu) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.normalized_shape = tuple(normalized_shape)
        self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape))
        self.eps = 1e-5

    def forward(self, x):
        n = math.prod(self.normalized_shape)
        x = x.contiguous()
        rows = x.numel() // n
        block = 8192
        chunks = triton.cdiv(n, block)
        part_mean = torch.empty((rows, chunks), device=x.device, dtype=torch.float32)
        part_m2 = torch.empty_like(part_mean)
        mu = torch.empty(rows, device=x.device, dtype=torch.float32)
        rstd = torch.empty_like(mu)
        ln_partial[(rows, chunks)](x, part_mean, part_m2, n, chunks, BLOCK=block)
        ln_stats[(rows,)](part_mean, part_m2, mu, rstd, n, chunks, self.eps, BLOCK=block,
                          CB=triton.next_power_of_2(chunks))
        y = torch.empty_like(x)
        ln_apply[(rows, chunks)](x, self.weight, self.bias, y, mu, rstd, n, BLOCK=block)
        return y
