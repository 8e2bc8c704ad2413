"""Which GPU kernels ran in one forward, from torch.profiler, and which of them are custom."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
from kb_agent.evaluator.result import KernelRow, ProfileInfo

# Kernels that come from PyTorch's own libraries (ATen, cuBLAS(Lt), cuDNN, CUTLASS inside them, NCCL,
# inductor-generated Triton) rather than from the candidate.
_LIBRARY_KERNEL = re.compile(
    r"(^|\W)(at::|at_cuda_detail|c10::|cublas|cublasLt|cudnn|cutlass|cute::|nvjet|sm\d+_xmma|xmma_|"
    r"ampere_|volta_|turing_|hopper_|sm\d\d_|gemm|gemv|splitKreduce|elementwise_kernel|"
    r"vectorized_elementwise|unrolled_elementwise|reduce_kernel|softmax_warp|cunn_|"
    r"triton_(poi|red|per|tem|for)_|ncclDevKernel|Memcpy|Memset|fft|cufft|curand|thrust::|cub::)",
    re.IGNORECASE,
)


def is_library_kernel(name: str) -> bool:
    return bool(_LIBRARY_KERNEL.search(name))


def profile_forward(fn: Callable[..., Any], args: Sequence[Any], max_rows: int = 20) -> ProfileInfo:
    """Profile one (already warmed-up) call of `fn` and tabulate its CUDA kernels by total device time."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    rows: dict[str, list[float]] = {}
    for evt in prof.events():
        if evt.device_type != torch.autograd.DeviceType.CUDA:
            continue
        dur = evt.time_range.elapsed_us() if hasattr(evt, "time_range") else getattr(evt, "device_time", 0.0)
        calls_total = rows.setdefault(evt.name, [0, 0.0])
        calls_total[0] += 1
        calls_total[1] += float(dur)
    total = sum(t for _, t in rows.values())
    table = [
        KernelRow(
            name=name,
            calls=int(calls),
            total_us=t,
            avg_us=t / calls if calls else 0.0,
            share=t / total if total else 0.0,
            custom=not is_library_kernel(name),
        )
        for name, (calls, t) in sorted(rows.items(), key=lambda kv: -kv[1][1])
    ]
    custom_us = sum(r.total_us for r in table if r.custom)
    return ProfileInfo(
        kernels=table[:max_rows],
        total_us=total,
        custom_kernel_ran=any(r.custom for r in table),
        custom_share=custom_us / total if total else 0.0,
    )
