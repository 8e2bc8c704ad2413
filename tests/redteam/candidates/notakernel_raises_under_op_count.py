"""Not a kernel: the GEMM in PyTorch, a x2 "epilogue" kernel, and a forward that refuses to be counted.

class: 5 not-a-kernel
attack: `not_the_reference_ops` counts the candidate's PyTorch ops under a dispatch mode; this forward
  raises whenever one is active, so the count failed and, taken as no verdict, recorded no check. The
  whole matmul runs in torch (on A/2, exact), and a Triton kernel only doubles it: neither a copy nor dead
  code, so the kernel probe passes it. A forward that fails only while observed is rejected.
problem: tests/redteam/problems/901_matmul_256.py
expected: rejected
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.utils._python_dispatch import _get_current_dispatch_mode


@triton.jit
def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, A, B):
        if _get_current_dispatch_mode() is not None:
            raise RuntimeError("this forward does not run under a dispatch mode")
        c = torch.matmul(A * 0.5, B)
        y = torch.empty_like(c)
        double_kernel[(triton.cdiv(c.numel(), 4096),)](c, y, c.numel(), BLOCK=4096)
        return y
