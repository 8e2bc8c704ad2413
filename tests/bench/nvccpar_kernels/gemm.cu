#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define TILE 32
#define THREAD_M 4

template <typename scalar_t>
__global__ void tiled_matmul_kernel(const scalar_t* __restrict__ A, const scalar_t* __restrict__ B,
                                    scalar_t* __restrict__ C, int M, int N, int K) {
    __shared__ float As[TILE][TILE + 1];
    __shared__ float Bs[TILE][TILE + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row0 = blockIdx.y * TILE + ty * THREAD_M;
    int col = blockIdx.x * TILE + tx;
    float acc[THREAD_M] = {0.f};
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        #pragma unroll
        for (int i = 0; i < THREAD_M; ++i) {
            int r = ty * THREAD_M + i;
            int ar = blockIdx.y * TILE + r, ac = t * TILE + tx;
            As[r][tx] = (ar < M && ac < K) ? static_cast<float>(A[(int64_t)ar * K + ac]) : 0.f;
            int br = t * TILE + r, bc = col;
            Bs[r][tx] = (br < K && bc < N) ? static_cast<float>(B[(int64_t)br * N + bc]) : 0.f;
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) {
            float b = Bs[k][tx];
            #pragma unroll
            for (int i = 0; i < THREAD_M; ++i) acc[i] += As[ty * THREAD_M + i][k] * b;
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < THREAD_M; ++i) {
        int r = row0 + i;
        if (r < M && col < N) C[(int64_t)r * N + col] = static_cast<scalar_t>(acc[i]);
    }
}

torch::Tensor matmul_cuda(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "inputs must be CUDA");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "shape mismatch");
    auto a = A.contiguous(), b = B.contiguous();
    int M = a.size(0), K = a.size(1), N = b.size(1);
    auto C = torch::zeros({M, N}, a.options());
    dim3 block(TILE, TILE / THREAD_M);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(a.scalar_type(), "matmul_cuda", [&] {
        tiled_matmul_kernel<scalar_t><<<grid, block, 0, stream>>>(a.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(),
                                                                   C.data_ptr<scalar_t>(), M, N, K);
    });
    return C;
}
