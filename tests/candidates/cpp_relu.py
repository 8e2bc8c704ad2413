import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# a correct C++ ReLU with its own loop (it builds and runs on a CPU torch; no PyTorch op does the work)
cpp_src = r"""
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* py = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) py[i] = px[i] > 0.f ? px[i] : 0.f;
    return y;
}
"""
ext = load_inline(name="relu_loop_cpp", cpp_sources=cpp_src, functions=["relu"], extra_cflags=["-O1"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x.contiguous())
