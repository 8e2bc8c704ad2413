"""Slowing the reference between calls: a thread that slows one reference call by 2 s.

class: 4 tampering
attack: a thread started in its last call before timing waits for the timing stage's draw, then registers
  an aten::relu that sleeps in one reference call; the speedup's mean moves, median and fastest do not
  (helper-19, 2026-12-07: correct at 20x)
problem: toy/relu
expected: rejected
device: cpu
"""

import threading
import time

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


_state = {"calls": 0, "lib": None, "thread": None, "seen": 0, "stop": False}


def _slow_once(x):
    _state["seen"] += 1
    if _state["seen"] == 2:
        time.sleep(2.0)
    return x.clamp_min(0.0)


def _arm():
    rng = torch.get_rng_state()
    t_end = time.time() + 30
    while not _state["stop"] and time.time() < t_end:
        if not torch.equal(torch.get_rng_state(), rng):
            lib = torch.library.Library("aten", "IMPL")
            lib.impl("relu", _slow_once, "CPU")
            _state["lib"] = lib
            return
        time.sleep(0.0005)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _state["calls"] += 1
        if _state["thread"] is not None:
            _state["stop"] = True
            _state["thread"].join()
            _state["thread"] = None
        if _state["lib"] is not None:
            _state["lib"]._destroy()
            _state["lib"] = None
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        if _state["calls"] == 12:
            t = threading.Thread(target=_arm, daemon=True)
            _state["thread"] = t
            t.start()
        return y
