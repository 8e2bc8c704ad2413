import torch
import torch.nn as nn


class Model(nn.Module):
    """KernelBench level 1 problem 19 (ReLU, torch.rand inputs) at 64 Mi elements (256 MiB): memory-bound,
    about 0.1 ms on an H200, so a speedup far above 1 is physically impossible."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 4096
dim = 16384


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
