"""Fault (robustness): a build killed by its stage limit must not poison the shared build cache.

class: 10 faults
attack: an honest hand-written C++ ReLU (a CPU loop, no ATen compute), evaluated twice: the first time
  with a build limit too short to finish the compile (it is killed mid-build), the second time with a
  normal limit. torch's extension builder guards a build directory with a `lock` file; if the killed
  build leaves it behind in the shared cache, the second evaluation of the identical source waits on it
  until its own build limit and times out, and so does every later one. A trustworthy evaluator gives
  the second run its real verdict, correct.
problem: toy/relu
expected: correct
accept: rejected
runs: 2
limits_first: build_s=4
limits: build_s=75
fresh_build: yes
lingering: redteam_cpp_loop_relu
device: cpu-only
slow: yes
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat && x.is_contiguous());
    auto y = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* out = y.data_ptr<float>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;
    return y;
}
"""

ext = load_inline(name="redteam_cpp_loop_relu", cpp_sources=cpp_src, functions=["relu_forward"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_forward(x.contiguous())
