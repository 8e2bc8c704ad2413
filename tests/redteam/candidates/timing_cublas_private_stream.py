"""Timing escape, cuBLAS: every call creates a stream and a cuBLAS handle of its own and runs the GEMM there.

class: 2 timing-escape
attack: the C++ extension creates a cudaStreamNonBlocking stream and a cuBLAS handle bound to it in each
  call (neither destroyed: that would synchronise), runs cublasSgemm on it and returns. Nothing makes the
  current stream wait, so events on it time only the launch. KernelBench's adversarial unit test does
  this; under CUDA-graph capture its handle creation fails unchecked, which once killed our evaluator's
  child (SIGSEGV, SIGABRT) and made the verdict runtime_error (issue 11, item 4).
problem: tests/redteam/problems/910_matmul_2048.py
expected: rejected
max_speedup: 1.5
device: gpu
slow: yes
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>

torch::Tensor mm_private_stream(torch::Tensor A, torch::Tensor B) {
    const int M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::empty({M, N}, A.options());
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cublasHandle_t h;
    cublasCreate(&h);
    cublasSetStream(h, s);
    const float one = 1.f, zero = 0.f;
    // row-major C = A B is column-major C^T = B^T A^T
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B.data_ptr<float>(), N, A.data_ptr<float>(), K,
                &zero, C.data_ptr<float>(), N);
    return C;
}
"""
cpp_src = "torch::Tensor mm_private_stream(torch::Tensor A, torch::Tensor B);"

ext = load_inline(name="redteam_cublas_private_stream", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["mm_private_stream"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return ext.mm_private_stream(A.contiguous(), B.contiguous())
