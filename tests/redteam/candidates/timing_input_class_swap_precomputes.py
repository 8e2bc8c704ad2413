"""A Triton ReLU that makes its input a subclass of its own and does its work in the harness's writes.

class: 3 timing
attack: its first call sets `x.__class__` to a torch.Tensor subclass whose __torch_function__, after
  every in-place op on that tensor (strict timing's writes of fresh values, through Tensor's own
  methods too), runs the kernel on the new values and keeps the output, which the timed forward
  returns (helper-25: correct, fresh calls 0.035 ms against 17 ms honest, a ~2000x forged speedup)
problem: toy/relu
expected: rejected
device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

_Off = torch._C.DisableTorchFunctionSubclass
_kept = {}


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def _relu(x):
    x = x.contiguous()
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


class _T(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with _Off():
            r = func(*args, **(kwargs or {}))
            name = getattr(func, "__name__", "")
            if name.endswith("_") and not name.startswith("_") and args and type(args[0]) is _T:
                x = args[0]
                _kept[id(x)] = (x, x._version, _relu(x))
        return r


class ModelNew(nn.Module):
    def forward(self, x):
        with _Off():
            if type(x) is torch.Tensor and x.is_contiguous():
                x.__class__ = _T
            kept = _kept.get(id(x))
            if kept is None or kept[0] is not x or kept[1] != x._version:
                kept = _kept[id(x)] = (x, x._version, _relu(x))
            return kept[2]
