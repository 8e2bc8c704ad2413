"""Not a kernel: the matmul computed by a library convolution, beside a x2 kernel.

class: 5 not-a-kernel
attack: the op count sorts library work by kind, and A @ B written as a 1x1 conv1d reads as "conv", not
  the reference's "matmul": the GEMM looked left to the custom kernels. The conv computes (A/2) @ B
  exactly; a Triton kernel doubles it. GEMM-like FLOPs (matmul, convolution, attention) are one kind.
problem: tests/redteam/problems/901_matmul_256.py
expected: rejected
device: cpu
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, A, B):
        c = F.conv1d((A * 0.5)[:, :, None], B.t().contiguous()[:, :, None])[:, :, 0].contiguous()
        y = torch.empty_like(c)
        double_kernel[(triton.cdiv(c.numel(), 4096),)](c, y, c.numel(), BLOCK=4096)
        return y
