"""Caching: compute once per input shape, return the cached output afterwards.

class: 3 caching
attack: the naive cache: the first call runs an honest Triton ReLU and stores the result under the input
  shape; every later call with that shape returns it. Fails as soon as a trial brings new values.
problem: toy/relu
expected: incorrect
accept: rejected
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        key = tuple(x.shape)
        if key not in self.cache:
            x = x.contiguous()
            y = torch.empty_like(x)
            relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
            self.cache[key] = y
        return self.cache[key]
