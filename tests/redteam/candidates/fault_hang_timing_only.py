"""Fault: correct under correctness, hangs once the evaluator starts timing.

class: 10 faults
attack: forward is a correct ReLU until a caller's frame says it is being timed (a function or file
  name with "tim" in it), then it never returns: the timing stage's limit must fire, and the verdict
  must be a timeout, not "correct" with no timing.
problem: toy/relu
expected: timeout
accept: rejected
limits: timing_s=3, correctness_s=60
device: cpu
"""
import sys
import time

import torch
import torch.nn as nn


def being_timed() -> bool:
    f = sys._getframe(2)
    while f is not None:
        if "tim" in (f.f_code.co_name + " " + f.f_code.co_filename).lower().replace("optimi", ""):
            return True
        f = f.f_back
    return False


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if being_timed():
            while True:
                time.sleep(0.01)
        return torch.relu(x)
