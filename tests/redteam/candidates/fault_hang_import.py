"""Fault: an infinite loop at import time, with SIGTERM and SIGINT ignored.

class: 10 faults
attack: the module never finishes importing; the signal handlers make a polite terminate useless, so
  only SIGKILL of the whole process group ends it.
problem: toy/relu
expected: timeout
limits: build_s=3
device: cpu
"""
import signal

import torch.nn as nn

signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        return x
