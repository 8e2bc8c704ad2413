"""Fault: os._exit(0) inside forward: the child vanishes with a *success* exit code.

class: 10 faults
attack: exit status 0 and no result; an evaluator that trusts the exit code, or that treats "no failure
  reported" as success, calls this correct.
problem: toy/relu
expected: runtime_error
device: cpu
"""
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        os._exit(0)
