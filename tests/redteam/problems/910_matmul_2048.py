import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B, 2048x2048 fp32 (KernelBench level 1 problem 1 at half its size): about 0.3 ms in cuBLAS on
    an H200, long enough that work hidden from the timer shows."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


N = 2048


def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]


def get_init_inputs():
    return []
