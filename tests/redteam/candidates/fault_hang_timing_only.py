"""Fault: correct under correctness, hangs once the evaluator starts timing.

class: 10 faults
attack: the 6th and later calls (the correctness trials are 5) never return: the timing stage's limit
  must fire, and the verdict must be a timeout, not "correct" with no timing.
problem: toy/relu
expected: timeout
limits: timing_s=3
device: cpu
"""
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 5:
            while True:
                time.sleep(0.01)
        return torch.relu(x)
