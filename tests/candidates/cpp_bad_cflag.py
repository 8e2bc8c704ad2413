import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# a correct C++ ReLU (it builds and runs on a CPU torch) whose host-compiler flags include one g++ lacks
cpp_src = "torch::Tensor relu(torch::Tensor x) { return x.clamp_min(0); }"

ext = load_inline(
    name="relu_cpp_ext", cpp_sources=cpp_src, functions=["relu"], extra_cflags=["-O3", "-fno-such-flag"]
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu(x.contiguous())
