#pragma once
// Turning CUDA runtime and cuBLAS status codes into kernels::cuda_error (cuda_error.hpp). Host
// code of kernels/cuda/ only: it includes the CUDA headers.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string_view>

#include "common/error.hpp"
#include "kernels/precision.hpp"

namespace coach::kernels::detail {

/// The coach code of a CUDA runtime status: resource_exhausted for out of memory, unsupported
/// for no device or a driver older than the runtime, internal otherwise.
errc code_of(cudaError_t status) noexcept;

/// Throws cuda_error when `status` is not cudaSuccess. `what` names the call and what it was
/// doing ("cudaMalloc of 12 MiB"), `device` the device it ran on.
void check_cuda(cudaError_t status, int device, std::string_view what);

/// Throws cuda_error when `status` is not CUBLAS_STATUS_SUCCESS (out of memory gives
/// resource_exhausted, anything else internal).
void check_cublas(cublasStatus_t status, int device, std::string_view what);

/// cuBLAS's compute type for products at precision p: CUBLAS_COMPUTE_32F for fp32 (no
/// tensor-core rounding under the default math mode) and for bf16 (whose operands the backend
/// rounds into bfloat16 copies first), CUBLAS_COMPUTE_32F_FAST_TF32 for tf32 (float operands
/// rounded to TF32 inside the kernel, products on the tensor cores, float accumulation and
/// results).
cublasComputeType_t compute_type(math_precision p) noexcept;

/// Text of a status for a message: "out of memory (cudaErrorMemoryAllocation)".
std::string describe(cudaError_t status);

}  // namespace coach::kernels::detail
