"""Fault: forward never returns (a busy loop that ignores SIGTERM/SIGINT).

class: 10 faults
attack: hangs inside the first correctness trial.
problem: toy/relu
expected: timeout
limits: correctness_s=3
device: cpu
"""
import signal
import time

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        while True:
            time.sleep(0.01)
