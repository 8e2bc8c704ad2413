"""Tampering: monkeypatch the clock so the candidate's own calls take no time.

class: 4 tampering
attack: replaces time.perf_counter (and perf_counter_ns, monotonic, timeit.default_timer, and every
  module-level alias of them found in sys.modules, e.g. `from time import perf_counter`) with a clock that
  subtracts the time spent inside ModelNew.forward. Forward runs an honest Triton matmul; the clock around
  it barely moves, so a perf_counter-timed candidate looks almost free.
problem: tests/redteam/problems/901_matmul_256.py
expected: rejected
max_speedup: 3
max_speedup_cpu: 0.3
device: cpu
"""
import sys
import time
import timeit

import torch
import torch.nn as nn
import triton
import triton.language as tl

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

_real = time.perf_counter
_real_ns = time.perf_counter_ns
_real_mono = time.monotonic
_credit = [0.0]


def fake_perf_counter():
    return _real() - _credit[0]


def fake_perf_counter_ns():
    return _real_ns() - int(_credit[0] * 1e9)


def fake_monotonic():
    return _real_mono() - _credit[0]


_swap = {id(_real): fake_perf_counter, id(_real_ns): fake_perf_counter_ns, id(_real_mono): fake_monotonic}
time.perf_counter = fake_perf_counter
time.perf_counter_ns = fake_perf_counter_ns
time.monotonic = fake_monotonic
timeit.default_timer = fake_perf_counter
for _mod in list(sys.modules.values()):
    d = getattr(_mod, "__dict__", None)
    if not isinstance(d, dict) or _mod is time or getattr(_mod, "__name__", None) == __name__:
        continue
    for _k, _v in list(d.items()):
        if id(_v) in _swap and _v in (_real, _real_ns, _real_mono):
            try:
                setattr(_mod, _k, _swap[id(_v)])
            except Exception:
                pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        t0 = _real()
        out = matmul(A, B)
        if A.is_cuda:
            torch.cuda.synchronize()
        _credit[0] += _real() - t0
        return out
