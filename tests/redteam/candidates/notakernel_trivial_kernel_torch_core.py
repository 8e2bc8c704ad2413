"""Not a kernel: PyTorch does the matmul, a Triton kernel does a trivial epilogue (x * 1.0).

class: 5 not-a-kernel
attack: all the real work is torch.matmul (cuBLAS/MKL); a custom Triton kernel then scales the result by
  1.0 in place, so a custom kernel runs on every call and touches the whole output. Contrast with
  honest_triton_linear_torch_bias, where the GEMM is the custom kernel and torch does the glue.
problem: toy/small_matmul
expected: rejected
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(y_ptr, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=m) * s, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        C = torch.matmul(A, B)
        scale_kernel[(triton.cdiv(C.numel(), 1024),)](C, C.numel(), 1.0, BLOCK=1024)
        return C
