import torch
import torch.nn as nn


class Model(nn.Module):
    """An output far below fp32's atol of 1e-4: sigmoid(x) * 1e-5."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sigmoid(x) * 1e-5


batch_size = 16
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
