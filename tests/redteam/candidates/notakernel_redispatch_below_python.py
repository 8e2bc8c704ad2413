"""Not a kernel: the reference's GEMM called below the dispatcher's Python layer, beside a x2 kernel.

class: 5 not-a-kernel
attack: `OpOverload.redispatch` with a dispatch-key set of the candidate's own runs aten::mm without
  passing the Python dispatch key, so neither the op count's dispatch mode nor the FLOP counter sees a
  matmul: the candidate's library work reads as one multiply. A Triton kernel doubles the product of
  A/2 and B (exact), which the kernel probe accepts as work.
problem: tests/redteam/problems/901_matmul_256.py
expected: rejected
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_below = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


@triton.jit
def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, A, B):
        c = torch.ops.aten.mm.default.redispatch(_below, A * 0.5, B)
        y = torch.empty_like(c)
        double_kernel[(triton.cdiv(c.numel(), 4096),)](c, y, c.numel(), BLOCK=4096)
        return y
