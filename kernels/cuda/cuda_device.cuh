#pragma once
// Device helpers shared by the .cu files of the cuda backend (nvcc only): grid-stride indexing,
// launch sizes and the deterministic block sum.

#include <cstddef>

#include "kernels/cuda/cuda_kernels.hpp"

namespace coach::kernels::detail {

inline constexpr int warp = 32;
inline constexpr int warps_per_block = cuda_block / warp;
inline constexpr unsigned full_mask = 0xffffffffu;

__device__ inline std::size_t first_index() {
  return std::size_t(blockIdx.x) * std::size_t(blockDim.x) + threadIdx.x;
}
__device__ inline std::size_t grid_stride() {
  return std::size_t(gridDim.x) * std::size_t(blockDim.x);
}

/// Blocks for n elements, one per cuda_block elements up to `cap`.
inline int blocks_for(std::size_t n, int cap) {
  const std::size_t want = (n + cuda_block - 1) / cuda_block;
  return want < std::size_t(cap) ? int(want) : cap;
}

/// Sum of v over the block, in a fixed tree order (deterministic). Every thread of the block must
/// call it; `scratch` holds cuda_block doubles of shared memory. Every thread gets the sum. The
/// barrier on entry lets a block call it again with the same scratch right after a previous call.
__device__ inline double block_sum(double v, double* scratch) {
  __syncthreads();
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int width = cuda_block / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) scratch[threadIdx.x] += scratch[threadIdx.x + width];
    __syncthreads();
  }
  return scratch[0];
}

}  // namespace coach::kernels::detail
