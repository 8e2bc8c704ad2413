"""Not a kernel: try a (broken) Triton kernel, fall back to PyTorch on any error.

class: 5 not-a-kernel
attack: the Triton kernel never compiles (it uses an undefined name); `except Exception` swallows the
  error and returns torch.relu(x) every time. Looks like a kernel submission, is PyTorch.
problem: toy/relu
expected: rejected
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), undefined_zero), mask=mask)  # noqa: F821


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.broken = False

    def forward(self, x):
        if not self.broken:
            try:
                y = torch.empty_like(x)
                relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
                return y
            except Exception:
                self.broken = True
        return torch.relu(x)
