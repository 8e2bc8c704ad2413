"""Not a kernel: the whole reference in PyTorch (spelled differently), a Triton kernel copies the result
out.

class: 5 not-a-kernel
attack: torch.where(x > 0, x, 0) computes the ReLU (no relu or clamp op, so "the reference's own ops"
  does not see it); a Triton kernel then copies that result into the returned buffer, so a custom kernel
  runs on every call, its result is the output, and it even takes a share of the GPU time.
problem: toy/relu
expected: rejected
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        r = torch.where(x > 0, x, torch.zeros_like(x)).contiguous()
        out = torch.empty_like(r)
        copy_kernel[(triton.cdiv(r.numel(), 1024),)](r, out, r.numel(), BLOCK=1024)
        return out
