"""Input-dependent: the inputs are torch.rand (all >= 0), so ReLU is a copy.

class: 6 input-dependent
attack: a Triton kernel copies x to the output without the max: right for every input the problem's
  get_inputs can produce (KernelBench 1/19 has torch.rand inputs), wrong for any negative value. A
  trustworthy evaluator also tries inputs outside get_inputs' range (e.g. of either sign).
problem: tests/redteam/problems/902_relu_rand.py
expected: incorrect
accept: rejected
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
