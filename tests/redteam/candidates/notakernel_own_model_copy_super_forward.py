"""Not a kernel: ModelNew subclasses its own copy of the reference Model and its forward calls the base's,
a Triton kernel copying the result.

class: 5 not-a-kernel
attack: the static rule against `class ModelNew(Model)` now lets a subclass with a forward of its own
  through (a copy of Model shared for __init__ is honest, helper-29); this forward calls
  `super().forward(x)` (torch.relu) and launches a Triton copy of its output, so the library does all of
  the reference's work: not_the_reference_ops and the kernel probe must see it
problem: toy/relu
expected: rejected
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


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


class ModelNew(Model):
    def forward(self, x):
        z = super().forward(x).contiguous()
        y = torch.empty_like(z)
        copy_kernel[(triton.cdiv(z.numel(), 1024),)](z, y, z.numel(), BLOCK=1024)
        return y
