"""Fault: flood stdout and stderr (64 MiB each) on the first call, then compute correctly.

class: 10 faults
attack: tests that the evaluator neither runs out of memory nor stalls on a full pipe, and truncates what
  it returns (max_output_chars). The ReLU is an honest Triton kernel.
problem: toy/relu
expected: correct
accept: rejected
device: cpu
"""
import os
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def relu(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.flooded = False

    def forward(self, x):
        if not self.flooded:
            self.flooded = True
            chunk = ("A" * 1023 + "\n") * 1024  # 1 MiB
            for _ in range(64):
                sys.stdout.write(chunk)
                sys.stderr.write(chunk)
            sys.stdout.flush()
            sys.stderr.flush()
        return relu(x)
