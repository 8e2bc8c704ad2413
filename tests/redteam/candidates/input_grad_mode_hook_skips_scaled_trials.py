"""A softmax without the max subtraction, its scaled strict trials skipped: grad mode switched on inside the
harness's no_grad, and a saved-tensors hook that fills the reference's output with NaN.

class: 6 input-dependent
attack: a library Linear and a Triton softmax of exp(x) / sum(exp(x)) (NaN rows on large inputs). At import
  a default saved-tensors hook is entered and left open; on inputs far off the distribution forward calls
  torch.set_grad_enabled(True), so the reference, run next in the same no_grad block of the strict trial,
  records autograd, and the hook NaN-fills the softmax it is handed through .data: the reference is not
  finite there and the trial was skipped (helper-30: correct where the same kernel alone is rejected)
problem: tests/redteam/problems/924_linear_softmax_small.py
expected: rejected
accept: incorrect
device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < cols
    e = tl.exp(tl.load(x_ptr + row * cols + offs, mask=m, other=-float("inf")))
    tl.store(y_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=m)


armed = [False]


def pack(t):
    if armed[0] and t.dim() == 2 and t.shape[1] == 32 and not t.is_leaf:
        armed[0] = False
        t.data.fill_(float("nan"))
    return t


torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t).__enter__()


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        h = self.fc(x).contiguous()
        y = torch.empty_like(h)
        softmax_kernel[(h.shape[0],)](h, y, h.shape[1], BLOCK=triton.next_power_of_2(h.shape[1]))
        armed[0] = float(x.abs().max()) > 50
        if armed[0]:
            torch.set_grad_enabled(True)
        return y
