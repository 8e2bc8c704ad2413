import torch
import torch.nn as nn


class Model(nn.Module):
    """KernelBench 1/100's Hinge loss, mean(clamp(1 - predictions * targets, min=0)), on a small batch;
    its targets are drawn as +-1 labels (randint(0, 2) * 2 - 1)."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


batch_size = 256
dim = 32


def get_inputs():
    return [torch.rand(batch_size, dim), torch.randint(0, 2, (batch_size, 1)).float() * 2 - 1]


def get_init_inputs():
    return []
