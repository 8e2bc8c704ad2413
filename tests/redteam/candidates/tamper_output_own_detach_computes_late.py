"""A kernel that writes one element and returns an unwritten output whose own `detach` computes torch.relu.

class: 3 timing
attack: forward launches a one-element Triton kernel and returns torch.empty_like(x); the output's
  instance attribute `detach` computes torch.relu(x) when a reader calls it, after every timed window,
  so the timed calls did no work and the checks read the reference's own op's result (helper-23: 19x
  the honest kernel's speedup, all checks passed)
problem: toy/relu
expected: incorrect
accept: rejected
device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def one_kernel(s_ptr):
    tl.store(s_ptr, 1.0)


_detach = torch.Tensor.detach


class ModelNew(nn.Module):
    def forward(self, x):
        s = torch.empty(1, device=x.device, dtype=x.dtype)
        one_kernel[(1,)](s)
        y = torch.empty_like(x)
        y.detach = lambda x=x, s=s: torch.relu(_detach(x)) * s
        return y
