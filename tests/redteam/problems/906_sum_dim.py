import torch
import torch.nn as nn


class Model(nn.Module):
    """KernelBench level 1 problem 47 (sum over a dimension, keepdim) at a small size."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 8
dim1 = 256
dim2 = 255
reduce_dim = 1


def get_inputs():
    return [torch.rand(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
