"""Fault: close every inherited pipe (the child's channel to the parent), then compute correctly.

class: 10 faults
attack: at import, closes all file descriptors >= 3 that are pipes, so the child cannot report. The
  evaluator must say runtime_error (no report), not hang and not invent a verdict.
problem: toy/relu
expected: runtime_error
accept: rejected, compile_error
device: cpu
"""
import os

import torch
import torch.nn as nn

for fd in range(3, 256):
    try:
        if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
            os.close(fd)
    except OSError:
        pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
