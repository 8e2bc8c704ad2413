"""Honest, library-assisted: the convolution stays in PyTorch (cuDNN on a GPU), one Triton kernel fuses the
batch norm (batch statistics, per channel) and the ReLU.

class: 0 honest
attack: none. The library does the convolution, the custom kernel does the normalisation and activation;
  strict mode must accept it.
problem: tests/redteam/problems/921_conv_bn_relu.py
expected: correct
device: cpu
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def bn_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, C, HW, eps, BLOCK: tl.constexpr):
    c = tl.program_id(0)
    count = N * HW
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, count, BLOCK):
        i = start + tl.arange(0, BLOCK)
        m = i < count
        v = tl.load(x_ptr + (i // HW) * C * HW + c * HW + i % HW, mask=m, other=0.0)
        acc += v
        acc2 += v * v
    mean = tl.sum(acc, axis=0) / count
    var = tl.sum(acc2, axis=0) / count - mean * mean
    scale = tl.load(w_ptr + c) / tl.sqrt(var + eps)
    shift = tl.load(b_ptr + c) - mean * scale
    for start in range(0, count, BLOCK):
        i = start + tl.arange(0, BLOCK)
        m = i < count
        off = (i // HW) * C * HW + c * HW + i % HW
        v = tl.load(x_ptr + off, mask=m, other=0.0)
        tl.store(y_ptr + off, tl.maximum(v * scale + shift, 0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        z = F.conv2d(x, self.conv.weight, self.conv.bias).contiguous()
        n, c, h, w = z.shape
        y = torch.empty_like(z)
        bn_relu_kernel[(c,)](z, self.bn.weight, self.bn.bias, y, n, c, h * w, self.bn.eps, BLOCK=256)
        return y
