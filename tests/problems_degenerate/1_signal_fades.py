"""Input-independent: eight linear layers with their weights scaled down 100x and no normalisation. The
input's signal fades below 1e-4 after a few layers, so the output is set by the biases alone: with fixed
weights, the output for one seed's inputs matches the output for another's (it varies across elements,
so no zero or constant output passes)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, width: int, depth: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        with torch.no_grad():
            for layer in self.layers:
                layer.weight.mul_(0.01)

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


batch, width, depth = 32, 64, 8


def get_inputs():
    return [torch.rand(batch, width)]


def get_init_inputs():
    return [width, depth]
