"""Slowing the reference between calls: a thread holding the GIL while the reference is timed.

class: 4 tampering
attack: a thread spinning on the GIL, with sys.setswitchinterval raised, started after its last call before
  the timing stage and stopped in its next call: every op of the reference's timing waited for the GIL
  (100 ms per call), nothing left for the thread check (helper-18, 2026-12-07)
problem: toy/relu
expected: rejected
device: cpu
"""

import sys
import threading

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


_state = {"calls": 0, "stop": False, "thread": None, "interval": sys.getswitchinterval()}


def _spin():
    while not _state["stop"]:
        pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _state["calls"] += 1
        if _state["thread"] is not None:
            _state["stop"] = True
            _state["thread"].join()
            _state["thread"] = None
            sys.setswitchinterval(_state["interval"])
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        if _state["calls"] == 12:
            _state["stop"] = False
            sys.setswitchinterval(0.1)
            t = threading.Thread(target=_spin, daemon=True)
            _state["thread"] = t
            t.start()
        return y
