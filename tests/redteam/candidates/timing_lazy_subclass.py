"""Timing escape: return a lazy tensor subclass; the work runs when the output is first read.

class: 2 timing-escape
attack: forward returns at once a torch.Tensor subclass over uninitialised storage, holding a thunk. Its
  __torch_function__ runs the (honest, Triton) matmul the first time anything reads the values (allclose,
  sub, abs, ...), so correctness sees the right numbers, but the timed loop, which never reads the
  output, times only the allocation. Shape/dtype/device reads do not force it.
problem: tests/redteam/problems/901_matmul_256.py
expected: rejected
accept: incorrect
max_speedup: 3
max_speedup_cpu: 0.3
device: cpu
"""
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


def matmul_into(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    mm_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](A, B, C, M, N, K, BM=64, BN=64, BK=64)


_META = {"shape", "dtype", "device", "size", "dim", "ndim", "numel", "stride", "is_cuda", "layout",
         "requires_grad", "is_contiguous", "storage_offset", "__get__", "is_floating_point", "element_size"}


class Deferred(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") not in _META:
            for t in tree_flatten((args, kwargs))[0]:
                if isinstance(t, Deferred):
                    t._force()
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    def _force(self):
        job = self.__dict__.pop("_job", None)
        if job is not None:
            with torch._C.DisableTorchFunctionSubclass():
                job(self.as_subclass(torch.Tensor))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        A = A.contiguous()
        B = B.contiguous()
        out = torch.empty(A.shape[0], B.shape[1], device=A.device, dtype=A.dtype).as_subclass(Deferred)
        out._job = lambda C: matmul_into(A, B, C)
        return out
