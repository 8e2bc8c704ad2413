"""Timing escape, GPU: launch the kernel on a side stream that the current stream never waits for.

class: 2 timing-escape
attack: the ReLU runs on a private torch.cuda.Stream with no wait_stream/record_stream back to the
  current stream. CUDA events recorded on the current stream around the call then bracket only the
  launch; the evaluator's own synchronize (if device-wide) makes correctness pass. When a correctness
  trial compares before the side stream has written the output, the verdict is incorrect, which is as
  safe (seen once on the H200, 2026-12-03: "output mismatch in correctness trial 3 of 5").
problem: tests/redteam/problems/903_relu_rand_large.py
expected: rejected
accept: correct, incorrect
max_speedup: 3
device: gpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = None

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if self.stream is None:
            self.stream = torch.cuda.Stream(device=x.device)
        with torch.cuda.stream(self.stream):  # no wait_stream either way
            relu_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096)
        return y
