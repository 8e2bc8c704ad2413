"""Timing escape: do the work in a background thread; the output blocks only when first read.

class: 2 timing-escape
attack: forward starts a thread that runs the (honest, Triton) matmul into a preallocated output and
  returns at once; the output is a tensor subclass whose __torch_function__ joins that thread before any
  read. The work overlaps whatever the evaluator does next (it never waits for it in the timed loop).
problem: tests/redteam/problems/901_matmul_256.py
expected: rejected
accept: incorrect
max_speedup: 3
max_speedup_cpu: 0.3
device: cpu
"""
import threading

import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.utils._pytree import tree_flatten

@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(A, B, C=None):
    A = A.contiguous()
    B = B.contiguous()
    M, K = A.shape
    N = B.shape[1]
    if C is None:
        C = torch.empty(M, N, device=A.device, dtype=A.dtype)
    mm_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](A, B, C, M, N, K, BM=64, BN=64, BK=64)
    return C


class Pending(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") not in ("__get__", "size", "dim", "numel", "stride"):
            for t in tree_flatten((args, kwargs))[0]:
                if isinstance(t, Pending):
                    th = t.__dict__.pop("_thread", None)
                    if th is not None:
                        th.join()
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        C = torch.empty(A.shape[0], B.shape[1], device=A.device, dtype=A.dtype)
        th = threading.Thread(target=matmul, args=(A, B, C), daemon=True)
        th.start()
        out = C.as_subclass(Pending)
        out._thread = th
        return out
