"""Not a kernel: nn.Linear's bias folded into the library GEMM as a column of ones, beside a x2 kernel.

class: 5 not-a-kernel
attack: the reference's addmm counts as a GEMM plus a bias add, and a custom bias kernel beside torch.mm
  is honest. Here torch.mm computes (x | 1) @ (W/2 | b/2)^T, the whole Linear with its bias, without an
  add the op count could see; a Triton kernel then doubles it (not a copy, so the kernel probe passes).
  The GEMM's extra FLOPs (two an output element) are the bias's.
problem: tests/redteam/problems/907_linear_bias.py
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
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        ones = torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)
        w = torch.cat([self.linear.weight, self.linear.bias[:, None]], 1) * 0.5
        c = torch.mm(torch.cat([x, ones], 1), w.t())
        y = torch.empty_like(c)
        double_kernel[(triton.cdiv(c.numel(), 4096),)](c, y, c.numel(), BLOCK=4096)
        return y
