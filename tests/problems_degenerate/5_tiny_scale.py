"""Degenerate only at the looser tolerance: the output is the input scaled by 1e-3, so it is below 1e-3
everywhere. At fp32's 1e-4 neither a zero nor a constant output passes; at the 1e-2 of fp16 and bf16 (and
of many published harnesses) both do."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale


def get_inputs():
    return [torch.rand(128, 128)]


def get_init_inputs():
    return [1e-3]
