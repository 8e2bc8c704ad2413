"""Input-dependent: softmax without the max subtraction.

class: 6 input-dependent
attack: exp(x) / sum(exp(x)) straight: right on get_inputs() (randn: exp stays far below fp32's limit),
  and still right at x8 (|x| < ~40, exp < 3e17), but exp overflows fp32 past 88.7, so on larger
  magnitudes rows turn to inf/inf = NaN where the reference (which subtracts the row max) stays finite.
  A trustworthy evaluator tries such magnitudes.
problem: toy/row_softmax
expected: rejected
accept: incorrect
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < cols
    e = tl.exp(tl.load(x_ptr + row * cols + offs, mask=m, other=-float("inf")))
    tl.store(y_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        softmax_kernel[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
        return y
