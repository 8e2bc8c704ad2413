"""Fault: raise SystemExit(0) inside forward (a BaseException, not an Exception).

class: 10 faults
attack: slips past `except Exception` handlers; if nothing catches BaseException the interpreter exits
  cleanly with status 0 in the middle of the correctness stage.
problem: toy/relu
expected: runtime_error
device: cpu
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        raise SystemExit(0)
