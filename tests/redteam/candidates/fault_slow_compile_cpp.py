"""Fault: a C++ extension whose compile runs for minutes (constexpr evaluation), under a short build limit.

class: 10 faults
attack: a constexpr loop of ~2^30 steps forces g++ to evaluate it at compile time; the build stage must
  time out and the compiler processes (cc1plus, ninja) must die with the child, not linger (ninja
  starts each command in its own process group, so killing the child's group misses them).
problem: toy/relu
expected: timeout
limits: build_s=5
lingering: redteam_slow_compile
fresh_build: yes
device: cpu
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
#include <torch/extension.h>

constexpr unsigned long long spin(unsigned long long n) {
    unsigned long long s = 0;
    for (unsigned long long i = 0; i < n; ++i) s += i ^ (s >> 3);
    return s;
}
constexpr unsigned long long kSlow = spin(1ULL << 30);

torch::Tensor relu_forward(torch::Tensor x) {
    return x.clamp_min(static_cast<double>(kSlow & 0));
}
"""

ext = load_inline(name="redteam_slow_compile", cpp_sources=cpp_src, functions=["relu_forward"],
                  extra_cflags=["-fconstexpr-ops-limit=4294967296", "-fconstexpr-loop-limit=2147483647"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_forward(x)
