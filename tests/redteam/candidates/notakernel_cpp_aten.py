"""Not a kernel: a load_inline C++ extension whose "kernel" is a call to at::relu.

class: 5 not-a-kernel
attack: the source has load_inline and a C++ function, so it looks like a custom extension; the function
  just calls ATen (at::relu), which dispatches to PyTorch's own CPU/CUDA kernel. No CUDA source, so it
  builds (and runs) on a CPU too.
problem: toy/relu
expected: rejected
device: cpu
slow: yes
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    return at::relu(x);
}
"""

ext = load_inline(name="redteam_cpp_aten_relu", cpp_sources=cpp_src, functions=["relu_forward"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_forward(x)
