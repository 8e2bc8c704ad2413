import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _mish(v):
    # x * tanh(softplus(x)) = x * t / (t + 2) with t = e^x (e^x + 2); softplus(x) = x past 20, as torch
    e = tl.exp(tl.minimum(v, 20.0))
    t = e * (e + 2.0)
    return tl.where(v > 20.0, v, v * t / (t + 2.0))


@triton.jit
def mish_mish_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, _mish(_mish(y)), mask=mask)


class ModelNew(nn.Module):
    """The GEMM stays in cuBLAS (F.linear); both Mish activations are one fused Triton kernel."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = F.linear(x, self.linear.weight, self.linear.bias).contiguous()
        n = y.numel()
        mish_mish_kernel[(triton.cdiv(n, 1024),)](y, n, BLOCK=1024)
        return y
