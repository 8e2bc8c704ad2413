"""Tampering with the dispatcher: a wrong aten::relu alive between the candidate's calls.

class: 4 tampering
attack: a wrong aten::relu of its own registered at the end of every forward and removed inside the
  reference's next call: the reference computed the candidate's wrong values (0.5 * relu); only the
  harness's own ops were compared after each call (helper-18, 2026-12-07)
problem: toy/relu
expected: rejected
accept: incorrect
device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * scale, mask=mask)


_state = {"calls": 0, "lib": None}


def _drop():
    lib = _state["lib"]
    _state["lib"] = None
    if lib is not None:
        lib._destroy()


def _wrong_relu(x):
    out = x.clamp_min(0.0) * 0.5
    _drop()
    return out


def _arm():
    if _state["lib"] is None:
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("relu", _wrong_relu, "CPU")
        _state["lib"] = lib


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _state["calls"] += 1
        _drop()
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        scale = 1.0 if _state["calls"] == 1 else 0.5
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, scale, BLOCK=1024)
        _arm()
        return y
