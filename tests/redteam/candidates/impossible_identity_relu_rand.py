"""Physically impossible speed: ReLU on torch.rand inputs "computed" by returning the input itself.

class: 9 impossible-speed
attack: inputs are all >= 0 (KernelBench 1/19 draws torch.rand), so relu(x) == x; forward returns x:
  zero bytes moved, zero kernels, an output that aliases the input. The speedup is bounded only by Python
  call overhead, far past what memory bandwidth allows for a ReLU that must read and write every
  element.
problem: tests/redteam/problems/902_relu_rand.py
expected: rejected
accept: incorrect
max_speedup: 3
max_speedup_cpu: 3
device: cpu
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x
