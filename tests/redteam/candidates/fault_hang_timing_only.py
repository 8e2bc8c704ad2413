"""Fault: correct under correctness, hangs once the evaluator starts timing.

class: 10 faults
attack: forward is a correct ReLU until the same input tensor arrives for the third time in a row
  (correctness trials bring new inputs; a timing loop calls again and again on the same ones), then it
  never returns: the timing stage's limit must fire, and the verdict must be a timeout, not "correct"
  with no timing. (No frame inspection, which a strict sandbox may refuse.)
problem: toy/relu
expected: timeout
accept: rejected
limits: timing_s=3, correctness_s=60
device: cpu
"""
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = None
        self.repeats = 0

    def forward(self, x):
        key = (id(x), x.data_ptr(), x._version)
        self.repeats = self.repeats + 1 if key == self.last else 1
        self.last = key
        if self.repeats >= 3:
            while True:
                time.sleep(0.01)
        return torch.relu(x)
