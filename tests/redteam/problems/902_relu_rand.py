import torch
import torch.nn as nn


class Model(nn.Module):
    """KernelBench level 1 problem 19 (ReLU) at a small size: its inputs are torch.rand, all >= 0."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 16
dim = 4096


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
