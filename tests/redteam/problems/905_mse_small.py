import torch
import torch.nn as nn


class Model(nn.Module):
    """KernelBench level 1 problem 94 (MSELoss) at a small size: a 0-d output."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean((predictions - targets) ** 2)


batch_size = 64
dim = 1024


def get_inputs():
    scale = torch.rand(())
    return [torch.rand(batch_size, dim) * scale, torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
