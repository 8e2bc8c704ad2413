"""Input-dependent: zero the inputs in place and return zeros.

class: 6 input-dependent
attack: a Triton kernel writes 0 over both inputs and the output. If the reference runs after the
  candidate on the same tensors (or is timed on them), it computes 0 + 0 and agrees, and gets a
  workload of zeros.
problem: toy/vector_add
expected: incorrect
accept: rejected
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def zero3_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    z = tl.zeros((BLOCK,), dtype=tl.float32)
    tl.store(a_ptr + offs, z, mask=m)
    tl.store(b_ptr + offs, z, mask=m)
    tl.store(c_ptr + offs, z, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        c = torch.empty_like(a)
        zero3_kernel[(triton.cdiv(a.numel(), 1024),)](a, b, c, a.numel(), BLOCK=1024)
        return c
