"""Tolerance hole: return shape [1] where the reference returns a 0-d scalar (broadcasts in allclose).

class: 7 tolerance
attack: the MSE is computed honestly (Triton, per-block partial sums combined with tl.atomic_add) into a
  1-element buffer that is returned as is, shape [1] instead of []. torch.allclose broadcasts, so values
  agree; only an explicit shape check catches it.
problem: tests/redteam/problems/905_mse_small.py
expected: incorrect
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sq_err_kernel(p_ptr, t_ptr, out_ptr, n, inv_n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    d = tl.load(p_ptr + offs, mask=m, other=0.0) - tl.load(t_ptr + offs, mask=m, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(d * d, axis=0) * inv_n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        p = predictions.contiguous()
        t = targets.contiguous()
        n = p.numel()
        out = torch.zeros(1, device=p.device, dtype=torch.float32)
        sq_err_kernel[(triton.cdiv(n, 4096),)](p, t, out, n, 1.0 / n, BLOCK=4096)
        return out  # shape [1], reference is shape []
