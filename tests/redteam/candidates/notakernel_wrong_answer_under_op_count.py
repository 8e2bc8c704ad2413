"""Not a kernel: the GEMM in PyTorch, a x2 kernel, and a forward that skips the GEMM while it is counted.

class: 5 not-a-kernel
attack: `not_the_reference_ops` counts one call's PyTorch ops under a dispatch mode. This forward sees the
  mode and then does no library work at all (its x2 kernel doubles an empty tensor), so the count says
  the custom kernels did the reference's work; every other call computes the matmul in torch (on A/2,
  exact) and doubles it in Triton. The counted call's output must be the answer too.
problem: tests/redteam/problems/901_matmul_256.py
expected: rejected
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, A, B):
        counted = torch._C._len_torch_dispatch_stack() > 0
        c = torch.empty(A.shape[0], B.shape[1]) if counted else torch.matmul(A * 0.5, B)
        y = torch.empty_like(c)
        double_kernel[(triton.cdiv(c.numel(), 4096),)](c, y, c.numel(), BLOCK=4096)
        return y
