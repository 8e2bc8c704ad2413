"""Scripted CUDA replies that fit any KernelBench problem, for sweeps on the GPU (bench_sweep --replies wrap).

A sweep measures the pool, not the model, but its evaluations should cost what real ones cost: a build
of a .cu nobody built before, correctness trials, and, for a correct candidate, the timing trials. A fixed
reply folder fails every problem but the one it was written for, so the GPU would only ever see failed
correctness checks. `wrapped_replies(problem)` writes three turns for one problem instead:

    1. a compile error: the turn-2 source with a `;` missing in its kernel (nvcc fails in the device code)
    2. correct: the reference's own operators (its `Model`, renamed `_Reference`), then the output copied
       by a CUDA kernel of one byte per thread (`load_inline`, KernelBench's style)
    3. correct: the same, the copy by 16 bytes per thread where the pointers allow it (the declarations of
       turn 2 kept, as a refinement keeps them)

Each problem's kernels and declarations carry its key (`copy_out_1_19`), and each turn's kernel its turn,
so no two sources of a sweep are the same and every turn builds its .cu from nothing, as a model's would;
turn 3 keeps turn 2's declarations, so its binding object may come from the build cache. The copy makes a
candidate slower than the reference (speedup just under 1x): these replies measure throughput, never
kernels. Under KernelBench's rules they are correct (operators left to PyTorch are allowed), and bench_sweep
runs without strict mode; strict mode rejects them (custom_kernels_do_the_work: every launch only copied).
"""

from __future__ import annotations

import re

from kb_agent.problems import Problem

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

// The output copied into a fresh tensor, @BODY@.
__global__ void copy_@TAG@_t@TURN@(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
                                   int64_t n_bytes) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
@LOOP@
}

torch::Tensor copy_out_@TAG@(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "expected a CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n_bytes = xc.numel() * xc.element_size();
    if (n_bytes == 0) return y;
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n_bytes + threads - 1) / threads, 132LL * 32);
    copy_@TAG@_t@TURN@<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        static_cast<const unsigned char*>(xc.data_ptr()), static_cast<unsigned char*>(y.data_ptr()), n_bytes);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_BYTES = """    for (; i < n_bytes; i += stride) {
        dst[i] = src[i]@SEMI@
    }"""

_VECTOR = """    const bool aligned = (reinterpret_cast<uintptr_t>(src) % 16 == 0) && (reinterpret_cast<uintptr_t>(dst) % 16 == 0);
    const int64_t n_vec = aligned ? n_bytes / 16 : 0;
    for (int64_t v = i; v < n_vec; v += stride) {
        reinterpret_cast<uint4*>(dst)[v] = reinterpret_cast<const uint4*>(src)[v];
    }
    for (int64_t b = n_vec * 16 + i; b < n_bytes; b += stride) {
        dst[b] = src[b];
    }"""

_MODULE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""@CUDA@"""

cpp_source = "torch::Tensor copy_out_@TAG@(torch::Tensor x);"

_ext = load_inline(name="copy_out_@TAG@_t@TURN@", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["copy_out_@TAG@"], verbose=False)

# The reference's operators, unchanged.
@REFERENCE@


class ModelNew(_Reference):
    def forward(self, *args):
        out = super().forward(*args)
        return _ext.copy_out_@TAG@(out) if isinstance(out, torch.Tensor) else out
'''

_NOTES = {
    1: "A first kernel: the reference's operators, then its output copied by a CUDA kernel, one byte per thread.",
    2: "The missing semicolon fixed.",
    3: "The copy by 16 bytes per thread where both pointers are 16-byte aligned, the tail byte by byte.",
}


def tag(problem: Problem) -> str:
    """`1/19` -> `1_19`: a C identifier's worth of the problem's key."""
    return re.sub(r"\W", "_", problem.key)


def reference_renamed(code: str) -> str:
    """The reference source with its `Model` class renamed `_Reference` (and `super(Model, self)` with it)."""
    return re.sub(r"\bModel\b", "_Reference", code).strip()


def candidate(problem: Problem, turn: int) -> str:
    """The whole candidate module of `turn` (1, 2 or 3) for `problem`. Raises ValueError for another turn."""
    if turn not in (1, 2, 3):
        raise ValueError(f"turn must be 1, 2 or 3, got {turn}")
    loop = _VECTOR if turn == 3 else _BYTES.replace("@SEMI@", "" if turn == 1 else ";")
    body = "16 bytes per thread where aligned" if turn == 3 else "one byte per thread"
    cuda = _CUDA.replace("@LOOP@", loop).replace("@BODY@", body)
    module = _MODULE.replace("@CUDA@", cuda).replace("@REFERENCE@", reference_renamed(problem.code))
    return module.replace("@TAG@", tag(problem)).replace("@TURN@", str(turn))


def wrapped_replies(problem: Problem) -> list[str]:
    """The three replies (markdown, one fenced python block each) for `problem`'s turns 1-3."""
    return [f"{_NOTES[t]}\n\n```python\n{candidate(problem, t)}```\n" for t in (1, 2, 3)]
