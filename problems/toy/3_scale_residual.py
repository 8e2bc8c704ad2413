import torch
import torch.nn as nn


class Model(nn.Module):
    """y = x * scale + x, with `scale` a constructor argument."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale + x


batch_size = 8
dim = 512
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [scale]
