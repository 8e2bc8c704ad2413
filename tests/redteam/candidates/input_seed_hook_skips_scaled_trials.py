"""Softmax without the max subtraction, its scaled strict trials skipped: a `random.seed` of its own
raises where the harness seeds for the reference.

class: 6 input-dependent
attack: exp(x) / sum(exp(x)) (NaN rows once |x| > ~88, where the reference stays finite); at import
  `random.seed` becomes a wrapper that raises when the harness seeds again, after the candidate's call,
  with the seed it set for that call: an exception there read as "the reference does not take these
  inputs", so the signed, x8 and x100 trials were no trials (helper-27: correct where the same kernel
  alone is rejected by trial_huge)
problem: toy/row_softmax
expected: rejected
accept: incorrect
device: cpu
"""

import random

import torch
import torch.nn as nn
import triton
import triton.language as tl

_python_seed = random.seed
_seeds = {"last": None, "armed_for": None}


def _seed(a=None, version=2):
    armed, _seeds["armed_for"] = _seeds["armed_for"], None
    if armed is not None and a == armed:
        raise ValueError("Expected all tensors to be on the same device")
    _seeds["last"] = a
    return _python_seed(a, version)


random.seed = _seed


@triton.jit
def softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < cols
    e = tl.exp(tl.load(x_ptr + row * cols + offs, mask=m, other=-float("inf")))
    tl.store(y_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        softmax_kernel[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
        if x.abs().max() > 30 and _seeds["last"] not in (None, 42):  # a scaled trial, not the probe's
            _seeds["armed_for"] = _seeds["last"]
        return y
