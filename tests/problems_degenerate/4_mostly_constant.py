"""Mostly constant: 2.0 everywhere but where the input is within 0.1 of 0 or 1, which pulls the output up
or down by as much, symmetrically: about 80 % of the outputs sit on their mean (METR's filter: more than
70 % near the mean), so a constant output passes most elements but not all."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, level: float, margin: float):
        super().__init__()
        self.level, self.margin = level, margin

    def forward(self, x):
        return self.level + torch.relu(x - (1 - self.margin)) - torch.relu(self.margin - x)


def get_inputs():
    return [torch.rand(384, 384)]


def get_init_inputs():
    return [2.0, 0.1]
