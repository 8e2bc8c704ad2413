"""Mostly zeros: a ReLU after a shift by 0.8 of inputs uniform in [0, 1), so about 80 % of the outputs are
exactly zero (METR's filter: more than 70 % near zero); the rest are not, so a zero output fails."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, shift: float):
        super().__init__()
        self.shift = shift

    def forward(self, x):
        return torch.relu(x - self.shift)


def get_inputs():
    return [torch.rand(256, 256)]


def get_init_inputs():
    return [0.8]
