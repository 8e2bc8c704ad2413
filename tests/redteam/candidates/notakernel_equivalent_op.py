"""Not a kernel: a different but equivalent PyTorch expression (defeats "same op as the reference").

class: 5 not-a-kernel
attack: forward returns torch.where(x > 0, x, 0) via clamp_min: no aten::relu call, no custom kernel.
problem: toy/relu
expected: rejected
device: cpu
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.clamp_min(0.0)
