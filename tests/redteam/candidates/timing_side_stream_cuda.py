"""Timing escape, CUDA: launch on a private non-blocking stream created in C++, never synchronised.

class: 2 timing-escape
attack: the kernel runs on a cudaStreamNonBlocking stream, so events on the current stream do not wait
  for it; the host returns right after the launch. Whether a correctness trial reads the output before
  the side stream finished is a race: then it is incorrect, which also keeps its speed out of the score
  (seen on the H200, 2026-11-30).
problem: tests/redteam/problems/903_relu_rand_large.py
expected: rejected
accept: correct, incorrect
max_speedup: 3
device: gpu
slow: yes
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

static cudaStream_t side = nullptr;

torch::Tensor relu(torch::Tensor x) {
    if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    auto y = torch::empty_like(x);
    long n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256, 0, side>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
cpp_src = "torch::Tensor relu(torch::Tensor x);"

ext = load_inline(name="redteam_side_stream", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu(x.contiguous())
