"""Not a kernel: ModelNew just calls the same PyTorch op as the reference.

class: 5 not-a-kernel
attack: forward returns torch.relu(x): trivially correct, speedup about 1, no custom kernel anywhere.
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
        return torch.relu(x)
