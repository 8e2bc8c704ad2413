"""Fault, CUDA: a kernel that writes through a wild pointer, launch not checked.

class: 10 faults
attack: writes to y + 2^36 floats from every thread; no error check after the launch, so the fault
  surfaces later, at whatever call synchronises next.
problem: toy/relu
expected: runtime_error
device: gpu
slow: yes
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>

__global__ void wild_kernel(const float* x, float* y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i + (1L << 36)] = x[i];
}

torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    wild_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
cpp_src = "torch::Tensor relu(torch::Tensor x);"

ext = load_inline(name="redteam_illegal_address", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu(x.contiguous())
