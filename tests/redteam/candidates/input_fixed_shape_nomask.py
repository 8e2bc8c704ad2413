"""Input-dependent (control): a ReLU kernel hard-wired to the problem's one shape, with no bounds mask.

class: 6 input-dependent
attack: n = 16 * 1024 and the grid are constants and the kernel has no mask. KernelBench problems have
  fixed shapes, so specialising to them is allowed: this must stay correct. (An evaluator that also
  tries other shapes would see wrong sizes or out-of-bounds accesses; that is accepted too.)
problem: toy/relu
expected: correct
accept: incorrect, runtime_error
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

N = 16 * 1024


@triton.jit
def relu_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs), 0.0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(N // 1024,)](x, y, BLOCK=1024)
        return y
