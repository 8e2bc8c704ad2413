"""Fault: a segmentation fault while the candidate module is being imported.

class: 10 faults
attack: ctypes.string_at(0) dereferences NULL at import time, killing the child with SIGSEGV before any
  model exists.
problem: toy/relu
expected: runtime_error
accept: compile_error
device: cpu
"""
import ctypes

import torch.nn as nn

ctypes.string_at(0)


class ModelNew(nn.Module):
    def forward(self, x):
        return x
