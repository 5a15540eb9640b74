#include "kernels/cuda/cuda_check.hpp"

#include "kernels/cuda/cuda_error.hpp"

namespace coach::kernels::detail {

errc code_of(cudaError_t status) noexcept {
  switch (status) {
    case cudaErrorMemoryAllocation:
      return errc::resource_exhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return errc::unsupported;
    default:
      return errc::internal;
  }
}

std::string describe(cudaError_t status) {
  return coach::format("{} ({})", cudaGetErrorString(status), cudaGetErrorName(status));
}

void check_cuda(cudaError_t status, int device, std::string_view what) {
  if (status == cudaSuccess) [[likely]]
    return;
  // Clear the error if it is not sticky, so the next call of this thread does not see it again
  // (a sticky one, after a kernel fault, keeps failing every call: the context is lost).
  (void)cudaGetLastError();
  throw cuda_error(coach::error{code_of(status), coach::format("cuda: {} on device {} failed: {}",
                                                               what, device, describe(status))});
}

void check_cublas(cublasStatus_t status, int device, std::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) [[likely]]
    return;
  const errc code =
      status == CUBLAS_STATUS_ALLOC_FAILED ? errc::resource_exhausted : errc::internal;
  throw cuda_error(coach::error{
      code, coach::format("cuda: {} on device {} failed: {} ({})", what, device,
                          cublasGetStatusString(status), cublasGetStatusName(status))});
}

cublasComputeType_t compute_type(math_precision p) noexcept {
  switch (p) {
    case math_precision::tf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case math_precision::bf16:
    case math_precision::fp32:
      break;
  }
  return CUBLAS_COMPUTE_32F;
}

}  // namespace coach::kernels::detail
