"""Not a kernel: torch.compile of the reference computation.

class: 5 not-a-kernel
attack: forward runs torch.compile(lambda x: torch.relu(x)): Inductor writes and launches a Triton (GPU)
  or C++ (CPU) kernel, so "a generated kernel ran", but nobody wrote it. (A sandbox that makes
  Inductor's compile workers fail with a rule's PermissionError gives runtime_error: fine too.)
problem: toy/relu
expected: rejected
accept: runtime_error
device: cpu
slow: yes
"""
import torch
import torch.nn as nn


def _relu(x):
    return torch.relu(x)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fn = torch.compile(_relu, dynamic=False)

    def forward(self, x):
        return self.fn(x)
