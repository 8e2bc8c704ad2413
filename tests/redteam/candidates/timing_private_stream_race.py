"""Timing escape, output race: the kernel runs on a private stream the caller's stream never waits for.

class: 2 timing-escape
attack: a careful variant of timing_side_stream_triton: the private stream first waits for the current
  one (so the inputs are ready and the work is all done, nothing skipped), then runs the ReLU; nothing
  joins it back. Every check that synchronises the device first sees a right answer, and the host clock
  around a synchronised call sees the work, but a consumer on the current stream reads the output
  before it is written (issue 11, item 5b: such a candidate passed the old strict checks).
problem: tests/redteam/problems/903_relu_rand_large.py
expected: rejected
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
        self.stream.wait_stream(torch.cuda.current_stream())  # inputs ready: the work itself is honest
        with torch.cuda.stream(self.stream):
            relu_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096)
        y.record_stream(self.stream)
        return y  # ... but the current stream is never made to wait for it
