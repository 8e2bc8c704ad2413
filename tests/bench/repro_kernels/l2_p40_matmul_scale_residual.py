import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def scale_residual_kernel(y_ptr, n, scale, BLOCK: tl.constexpr):
    # y * scale + y, in place (the reference's clone, multiply and add in one pass)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, y * scale + y, mask=mask)


class ModelNew(nn.Module):
    """The GEMM stays in cuBLAS (F.linear); the scaling and residual add are one fused Triton kernel."""

    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        y = F.linear(x, self.matmul.weight, self.matmul.bias).contiguous()
        n = y.numel()
        scale_residual_kernel[(triton.cdiv(n, 1024),)](y, n, self.scaling_factor, BLOCK=1024)
        return y
