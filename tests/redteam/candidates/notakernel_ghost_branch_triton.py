"""Not a kernel: the Triton kernel is used only on a branch no trial takes.

class: 5 not-a-kernel
attack: forward launches the (correct) Triton ReLU only when the input has more than 2**40 elements,
  which never happens; otherwise torch.where computes the answer (no relu op). The source has a kernel,
  the static check sees one; at run time no custom kernel ever runs.
problem: toy/relu
expected: rejected
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if x.numel() > 2**40:
            y = torch.empty_like(x)
            relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
            return y
        return torch.where(x > 0, x, torch.zeros_like(x))
