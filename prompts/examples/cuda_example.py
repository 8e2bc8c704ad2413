# ruff: noqa: E402
# A worked example for the prompt: the reference (what a task gives) above the marker, the answer below.
# prompts.example_parts() splits it; tests import the whole file and compare ModelNew with Model.
import torch
import torch.nn as nn


class Model(nn.Module):
    """out = a + alpha * b, elementwise."""

    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + self.alpha * b


def get_inputs():
    return [torch.randn(1024, 1024), torch.randn(1024, 1024)]


def get_init_inputs():
    return [0.5]


# ==== answer ====
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

template <typename scalar_t>
__global__ void scaled_add_kernel(const scalar_t* __restrict__ a, const scalar_t* __restrict__ b,
                                  scalar_t* __restrict__ out, float alpha, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = static_cast<scalar_t>(static_cast<float>(a[i]) + alpha * static_cast<float>(b[i]));
    }
}

torch::Tensor scaled_add(torch::Tensor a, torch::Tensor b, double alpha) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "a and b must be CUDA tensors");
    TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type(), "a and b must match");
    auto a_c = a.contiguous();
    auto b_c = b.contiguous();
    auto out = torch::empty_like(a_c);
    const int64_t n = a_c.numel();
    if (n == 0) return out;
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a_c.scalar_type(), "scaled_add", [&] {
        scaled_add_kernel<scalar_t><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
            a_c.data_ptr<scalar_t>(), b_c.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
            static_cast<float>(alpha), n);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor scaled_add(torch::Tensor a, torch::Tensor b, double alpha);"

scaled_add_ext = load_inline(
    name="kb_example_scaled_add",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["scaled_add"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return scaled_add_ext.scaled_add(a, b, self.alpha)
