"""Input-dependent: compute the ReLU in place, into the input, and return the input.

class: 6 input-dependent
attack: the Triton kernel writes relu(x) over x and forward returns x itself: no allocation, and if the
  evaluator reuses one input tensor for the reference and the candidate the reference may see already
  rectified values (ReLU is idempotent, so it still matches). Mutating an input is out of bounds.
problem: toy/relu
expected: rejected
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_inplace_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        relu_inplace_kernel[(triton.cdiv(x.numel(), 1024),)](x, x.numel(), BLOCK=1024)
        return x
