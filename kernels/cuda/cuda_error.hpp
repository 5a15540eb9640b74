#pragma once
// kernels::cuda_error: how the cuda backend reports a failure of the CUDA runtime, cuBLAS or NCCL.
//
// The backend interface's ops return nothing (or a number), so a failing op cannot return a
// coach::error. It throws cuda_error instead, as the cpu backend's alloc throws std::bad_alloc:
// an out-of-memory device or a lost device is a condition of the machine, not a programming
// error, so it must never abort the process (COACH_ENFORCE is kept for violated preconditions,
// exactly as on the cpu). A worker actor whose op throws stops with that error, and the job goes
// on without it (the master watches its workers). Factories (cuda_backend::make, nccl_group::make)
// catch it and return the coach::error inside as a result.

#include <stdexcept>
#include <utility>

#include "common/error.hpp"

namespace coach::kernels {

/// A failed CUDA runtime, cuBLAS or NCCL call. what() and error().message name the call, the
/// device and the library's own error name and text, e.g.
/// "cuda: cudaMalloc of 4096 MiB on device 0 failed: out of memory (cudaErrorMemoryAllocation)".
/// error().code: resource_exhausted (out of memory), unsupported (no device or driver too old),
/// internal (anything else: a kernel fault, a lost device, a library bug).
class cuda_error : public std::runtime_error {
 public:
  explicit cuda_error(coach::error e) : std::runtime_error(e.message), error_(std::move(e)) {}

  /// The code and the message, ready to return across a boundary.
  const coach::error& error() const noexcept { return error_; }

 private:
  coach::error error_;
};

}  // namespace coach::kernels
