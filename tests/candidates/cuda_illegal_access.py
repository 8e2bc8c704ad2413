import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
__global__ void bad_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i + (1L << 40)] = x[i];  // far outside the allocation
}

torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    bad_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(name="bad_ext", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=cuda_src,
                  functions=["relu"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu(x.contiguous())
