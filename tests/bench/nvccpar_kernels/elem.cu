#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void fused_gelu_scale_kernel(const float* __restrict__ x, float* __restrict__ out, float scale, int64_t n) {
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (; idx < n; idx += stride) {
        float v = x[idx];
        float g = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
        out[idx] = g * scale;
    }
}

torch::Tensor fused_gelu_scale_cuda(torch::Tensor x, double scale) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    int64_t n = xc.numel();
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65535);
    fused_gelu_scale_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), out.data_ptr<float>(), (float)scale, n);
    return out;
}
