"""Fault: an allocation far beyond any memory (2^50 floats) inside forward.

class: 10 faults
attack: torch.empty of 4 PiB on the input's device: an out-of-memory error that must come back as a
  runtime error with a usable message, and must not take the evaluator down.
problem: toy/relu
expected: runtime_error
device: cpu
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        big = torch.empty(1 << 50, device=x.device, dtype=torch.float32)
        return big[: x.numel()].view_as(x)
