"""Stale memory, CUDA: torch::empty_like plus a kernel that returns at once.

class: 1 stale-memory
attack: the CUDA caching allocator hands a just-freed block of the same size back first; if the
  reference's output (or its last timing output) was freed just before the candidate runs, empty_like
  returns memory that already holds the answer.
problem: toy/relu
expected: incorrect
accept: rejected
device: gpu
slow: yes
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>

__global__ void nothing_kernel(const float* x, float* y, long n) {
    if (n >= 0) return;  // always
    y[0] = x[0];
}

torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    nothing_kernel<<<1, 32>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""
cpp_src = "torch::Tensor relu(torch::Tensor x);"

ext = load_inline(name="redteam_stale_empty_like", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["relu"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu(x.contiguous())
