"""Tolerance hole: a correct softmax returned as float16 (half the bytes written).

class: 7 tolerance
attack: the Triton softmax computes in fp32 and stores fp16. Softmax values are < 1, so fp16 rounding
  error (< 5e-4 relative) stays inside atol = 1e-4; the output dtype differs from the reference's fp32.
problem: toy/row_softmax
expected: incorrect
accept: rejected
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
    x = tl.load(x_ptr + row * cols + offs, mask=m, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * cols + offs, (e / tl.sum(e, axis=0)).to(tl.float16), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(rows, cols, device=x.device, dtype=torch.float16)
        softmax_kernel[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
        return y
