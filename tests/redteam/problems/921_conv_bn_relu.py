import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv2d, then BatchNorm2d (training mode: batch statistics), then ReLU (a level-2 pattern)."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


batch_size = 4
in_channels = 3
out_channels = 8
kernel_size = 3
height = width = 16


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
