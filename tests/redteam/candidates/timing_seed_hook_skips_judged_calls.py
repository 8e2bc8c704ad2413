"""Replayed outputs, every judged call skipped: a `random.seed` of its own raises where the harness seeds
for the reference.

class: 3 timing
attack: at import `random.seed` becomes a wrapper that raises the first time it is called again with the
  seed the harness set right before the candidate's forward: that is the harness seeding the RNGs to
  run the reference on the same values, and an exception there read as "the reference does not take
  these values", so the call went unchecked. From the parity figure on (the same input tensor twice in a
  row) every call returns the output of the last honest call: no_replay compares replays with replays,
  and no judged call ever compares (helper-27: 2122x forged on a small conv problem)
problem: toy/relu
expected: rejected
device: cpu
"""

import random
import weakref

import torch
import torch.nn as nn
import triton
import triton.language as tl

_python_seed = random.seed
_seeds = {"last": None, "armed_for": None}


def _seed(a=None, version=2):
    armed, _seeds["armed_for"] = _seeds["armed_for"], None
    if armed is not None and a == armed:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    _seeds["last"] = a
    return _python_seed(a, version)


random.seed = _seed


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.previous, self.replaying, self.out = None, False, None

    def forward(self, x):
        if self.previous is not None and self.previous() is x:
            self.replaying = True
        self.previous = weakref.ref(x)
        if not self.replaying:
            x = x.contiguous()
            self.out = torch.empty_like(x)
            relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, self.out, x.numel(), BLOCK=1024)
            return self.out
        if _seeds["last"] != 42:  # strict timing's own seed per call, set just before this one
            _seeds["armed_for"] = _seeds["last"]
        return self.out
