"""Fault: raise KeyboardInterrupt inside forward.

class: 10 faults
attack: another BaseException; an evaluator may take it for its own interruption (e.g. a user's Ctrl-C)
  and report something other than the candidate's failure.
problem: toy/relu
expected: runtime_error
device: cpu
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        raise KeyboardInterrupt
