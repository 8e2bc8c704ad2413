"""Replayed outputs, the judged calls' reference made to raise: the recursion limit lowered after each call.

class: 3 timing
attack: from the parity figure on (the same input tensor twice in a row) every call returns the output of
  the last honest call and sets the recursion limit a few frames above the forward's depth, so that the
  reference's module calls, deeper than the harness's, raise RecursionError where the harness runs it to
  judge the call: read as "the reference does not take these values", the call went unchecked
  (helper-27; on the CPU the harness's own seeding went deeper first and it ended a runtime error)
problem: toy/relu
expected: rejected
accept: runtime_error
device: cpu
"""

import sys
import weakref

import torch
import torch.nn as nn
import triton
import triton.language as tl

_NORMAL = sys.getrecursionlimit()


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def _frames() -> int:  # the current depth, found by recursing until the limit stops it
    n = 0

    def deeper():
        nonlocal n
        n += 1
        deeper()

    try:
        deeper()
    except RecursionError:
        pass
    return sys.getrecursionlimit() - n


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.previous, self.replaying, self.out = None, False, None

    def forward(self, x):
        sys.setrecursionlimit(_NORMAL)
        if self.previous is not None and self.previous() is x:
            self.replaying = True
        self.previous = weakref.ref(x)
        if not self.replaying:
            x = x.contiguous()
            self.out = torch.empty_like(x)
            relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, self.out, x.numel(), BLOCK=1024)
            return self.out
        sys.setrecursionlimit(_frames() + 20)
        return self.out
