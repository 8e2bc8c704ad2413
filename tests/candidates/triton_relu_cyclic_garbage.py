import torch
import torch.nn as nn
import triton
import triton.language as tl

freed = []


class _Node:
    """One reference cycle per call, as Triton's interpreter leaves around every launch's arguments."""

    def __init__(self):
        self.me = self

    def __del__(self):
        freed.append(1)


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 4 and not freed:
            raise MemoryError("none of this kernel's cyclic garbage was collected in four calls")
        _Node()
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
