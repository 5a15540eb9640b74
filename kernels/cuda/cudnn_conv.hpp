#pragma once
// kernels::detail::cudnn_convolutions: the cuda backend's convolutions through cuDNN, when the
// build found it (COACH_HAVE_CUDNN). One object per backend, on the backend's stream; it keeps,
// for each shape and precision it met, cuDNN's descriptors and the algorithm it picked, and one
// workspace for all of them.
//
// Precision (kernels/precision.hpp): fp32 runs float tensors with CUDNN_FMA_MATH (no tensor
// cores: no TF32 rounding), tf32 float tensors with CUDNN_TENSOR_OP_MATH (cuDNN may round the
// operands to TF32, or keep a float kernel where that is faster), bf16 bfloat16 tensors (inputs
// rounded to nearest-even first, the float accumulation's result rounded once to bfloat16, then
// widened back to float). Algorithms: cuDNN's heuristic order (the _v7 queries, no timing
// runs, so the choice does not vary between runs), the first that is deterministic, keeps to the
// precision's math type and needs at most 512 MiB of workspace; with gemm_like(true), also one
// that sums its products as a GEMM does (no FFT or Winograd, whose transforms round otherwise:
// the cpu-reference tests hold the device to the GEMM's error bound that way).
//
// Host code only (includes cuDNN's header in the .cpp, not here).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "kernels/layer_shapes.hpp"
#include "kernels/precision.hpp"

namespace coach::kernels::detail {

class cudnn_convolutions {
 public:
  /// True when this build has cuDNN and COACH_CUDNN is not "0" in the environment (read once).
  static bool enabled() noexcept;

  /// A cuDNN handle on `stream` of `device` (current). Throws cuda_error when cuDNN cannot start
  /// (the library missing at run time, no memory).
  cudnn_convolutions(int device, cudaStream_t stream, int max_blocks);
  ~cudnn_convolutions();
  cudnn_convolutions(const cudnn_convolutions&) = delete;
  cudnn_convolutions& operator=(const cudnn_convolutions&) = delete;

  /// y = conv(x, w) without bias (backend::conv2d_forward adds it).
  void forward(const conv2d_shape& s, math_precision p, const float* x, const float* w, float* y);
  /// dx from dy and w (backend::conv2d_backward_data).
  void backward_data(const conv2d_shape& s, math_precision p, const float* dy, const float* w,
                     float* dx);
  /// dw from x and dy (backend::conv2d_backward_filter without db).
  void backward_filter(const conv2d_shape& s, math_precision p, const float* x, const float* dy,
                       float* dw);

  /// Only GEMM-like algorithms from now on (true), or any deterministic one (false, the default).
  void gemm_like(bool on) noexcept { gemm_like_ = on; }

  /// The algorithms picked for shape s at p ("fwd 1 (implicit precomp gemm), data 1, filter 1"),
  /// for logs and tests; empty before the shape ran.
  std::string describe(const conv2d_shape& s, math_precision p) const;

 private:
  struct plan;
  using key = std::tuple<int, int, int, int, int, int, int, int, int, int, int, int, bool>;
  key key_of(const conv2d_shape& s, math_precision p) const;
  plan& plan_for(const conv2d_shape& s, math_precision p);
  void* workspace(std::size_t bytes);
  /// Device scratch for bf16 copies: slot 0..2, at least `halves` 16-bit values.
  std::uint16_t* halves(int slot, std::size_t halves);
  /// Runs `call(a, b, out)` with the operands at precision p: the floats themselves, or (bf16)
  /// bfloat16 copies of a (na values) and b (nb), and a bfloat16 output widened into `out`
  /// (nout) afterwards.
  void with_operands(math_precision p, const float* a, std::size_t na, const float* b,
                     std::size_t nb, float* out, std::size_t nout,
                     const std::function<void(const void*, const void*, void*)>& call);

  int device_;
  cudaStream_t stream_;
  int max_blocks_;
  bool gemm_like_ = false;
  void* handle_ = nullptr;  ///< cudnnHandle_t
  std::map<key, std::unique_ptr<plan>> plans_;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  std::uint16_t* halves_[3] = {nullptr, nullptr, nullptr};
  std::size_t halves_size_[3] = {0, 0, 0};
};

}  // namespace coach::kernels::detail
