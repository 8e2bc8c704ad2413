"""Fault, CUDA: a launch that fails (2048 threads per block) and is never checked; the output is
whatever torch::empty_like held.

class: 10 faults
attack: cudaErrorInvalidConfiguration is left pending (no C10_CUDA_KERNEL_LAUNCH_CHECK, no
  cudaGetLastError), so nothing raises; the returned tensor is uninitialised memory, which may still
  hold a reference output (see stale_empty_like_cuda).
problem: toy/relu
expected: runtime_error
accept: incorrect, rejected
device: gpu
slow: yes
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>

__global__ void relu_kernel(const float* x, float* y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    relu_kernel<<<(n + 2047) / 2048, 2048>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;  // the launch failed; nobody asks
}
"""
cpp_src = "torch::Tensor relu(torch::Tensor x);"

ext = load_inline(name="redteam_unchecked_launch", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu(x.contiguous())
