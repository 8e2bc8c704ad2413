"""Fault, GPU: a Triton kernel that loads from a wild pointer (illegal memory access).

class: 10 faults
attack: the load address is x + 2^40 elements; the launch is asynchronous, so the fault surfaces at the
  next synchronising call and poisons the CUDA context for the rest of the process.
problem: toy/relu
expected: runtime_error
device: gpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def wild_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs + (1 << 40), mask=mask)
    tl.store(y_ptr + offs, tl.maximum(v, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        wild_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
