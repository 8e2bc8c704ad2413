"""A Triton ReLU that does its work in the harness's write of fresh values into its input.

class: 3 timing
attack: its first call gives its input tensor an attribute `copy_` of its own (the timing stage hands
  the same tensor objects to every call); strict timing wrote each fresh draw with `a.copy_(v)`, looked
  up on that tensor, so the candidate's function ran there, outside the timed window: it copied, ran
  the kernel on the new values and kept the output, which the timed forward returned in microseconds
  (helper-24: correct, fresh calls 0.04 ms against 12 ms honest; every judged output right)
problem: toy/relu
expected: rejected
device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

_tensor_copy = torch.Tensor.copy_


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def _relu(x):
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


class ModelNew(nn.Module):
    def forward(self, x):
        own = vars(x)
        if x.is_contiguous() and "copy_" not in own:

            def copy_(src, *a, **k):
                r = _tensor_copy(x, src, *a, **k)
                own["kept"] = (x._version, _relu(x))
                return r

            x.copy_ = copy_
        kept = own.get("kept")
        if kept is None or kept[0] != x._version:
            kept = own["kept"] = (x._version, _relu(x.contiguous()))
        return kept[1]
