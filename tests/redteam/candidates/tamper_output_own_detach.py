"""A wrong ReLU (0.5 x relu) whose output carries a `detach` of its own that doubles what it hands out.

class: 4 tampering
attack: the output is a plain torch.Tensor (exact_type by type alone passes) with an instance attribute
  `detach`; a method is a non-data descriptor, so the attribute stands in for Tensor.detach on this
  object, and every reader that looked the method up on the output (the comparison, the relative
  error, the poison pass, the stream sample) read 2 x the output, the right values (helper-23)
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
def half_relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * 0.5, mask=mask)


_detach = torch.Tensor.detach


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        half_relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        y.detach = lambda y=y: _detach(y) * 2
        return y
