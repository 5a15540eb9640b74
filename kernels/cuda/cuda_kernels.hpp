#pragma once
// The device kernels of kernels::cuda_backend, behind plain host functions that enqueue them on a
// stream. This header is shared by cuda_kernels.cu (nvcc, at most C++20) and cuda_backend.cpp
// (the host compiler, C++23), so it uses nothing newer than C++17 and no Coach header that needs
// C++23.
//
// Every launch_* function enqueues its work on `launch::stream` and returns at once with the
// launch's status (cudaGetLastError); a failure while the work runs shows up at the stream's next
// synchronization. Sizes of zero enqueue nothing.
//
// Arithmetic: the .cu file is compiled with --fmad=false, and each elementwise kernel performs the
// same operations in the same order as the cpu backend (kernels/cpu/cpu_backend.cpp), with IEEE
// division and square root. The cpu backend's compiler, without FMA at x86-64's baseline, rounds
// the same way, so the elementwise ops, column_sum and the optimizer updates agree bit for bit;
// reductions over many elements (sum, softmax's row sums) agree to rounding.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace coach::kernels::detail {

/// Threads per block of every kernel.
inline constexpr int cuda_block = 256;
/// Most blocks of the first pass of sum / sum_squares; fixed (not derived from the device) so a
/// sum's rounding depends on n only.
inline constexpr int cuda_max_partials = 1024;

/// Where and how wide to launch.
struct launch {
  cudaStream_t stream = nullptr;
  int max_blocks = 1;  ///< cap of grid-stride kernels (a few waves of the device's SMs)
};

/// c[r * ld + col] = beta * c[...] for r < rows, col < cols; beta == 0 writes zeros without
/// reading (gemm with k == 0).
cudaError_t launch_scale_matrix(launch l, float* c, int rows, int cols, int ld, float beta);

/// dst[i] = src[i] rounded to bfloat16, to nearest with ties to even (kernels/precision.hpp's
/// round_to), stored as 16 bits; for cuDNN's bf16 convolutions.
cudaError_t launch_to_bf16(launch l, const float* src, std::uint16_t* dst, std::size_t n);
/// dst[i] = the float of bfloat16 src[i] (exact).
cudaError_t launch_from_bf16(launch l, const std::uint16_t* src, float* dst, std::size_t n);

/// x[i] = x[i] rounded to bfloat16 (nearest, ties to even), kept as a float.
cudaError_t launch_round_bf16(launch l, float* x, std::size_t n);

/// See backend::bias_add.
cudaError_t launch_bias_add(launch l, float* y, const float* bias, int rows, int cols);

/// See backend::column_sum: one thread per column adds the rows in order, as the cpu does.
cudaError_t launch_column_sum(launch l, const float* x, int rows, int cols, float beta, float* out);

/// See backend::relu.
cudaError_t launch_relu(launch l, const float* x, float* y, std::size_t n);
/// See backend::relu_grad.
cudaError_t launch_relu_grad(launch l, const float* y, const float* dy, float* dx, std::size_t n);

/// See backend::softmax_xent, with device labels; writes each row's loss (double) to
/// row_loss[rows] instead of summing them (launch_sum_doubles does, in a fixed order).
cudaError_t launch_softmax_xent(launch l, const float* logits, const std::int32_t* labels, int rows,
                                int cols, float* dlogits, double* row_loss);

/// Sets *count to the number of rows whose first largest logit sits at the row's (device) label.
cudaError_t launch_count_correct(launch l, const float* logits, const std::int32_t* labels,
                                 int rows, int cols, unsigned long long* count);

/// See backend::axpy.
cudaError_t launch_axpy(launch l, std::size_t n, float alpha, const float* x, float* y);
/// See backend::scale.
cudaError_t launch_scale(launch l, std::size_t n, float alpha, float* x);

/// *out = sum of x[i] (or x[i]^2 when squares) in double, in two passes through `partials`
/// (cuda_max_partials doubles of device memory). Deterministic for a given n.
cudaError_t launch_sum(launch l, const float* x, std::size_t n, bool squares, double* partials,
                       double* out);

/// *out = sum of the n doubles x, by one block in a fixed order.
cudaError_t launch_sum_doubles(launch l, const double* x, std::size_t n, double* out);

/// See backend::sgd_update; v is not touched when momentum == 0.
cudaError_t launch_sgd_update(launch l, float* w, float* v, const float* g, std::size_t n,
                              float grad_scale, float learning_rate, float momentum,
                              float weight_decay);

/// The per-call constants of an Adam step, computed on the host as the cpu backend does.
struct adam_constants {
  float grad_scale = 1.0f;
  float step = 0.0f;          ///< learning_rate / (1 - beta1^t)
  float inv_sqrt_bc2 = 1.0f;  ///< 1 / sqrt(1 - beta2^t)
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;
  /// AdamW: w *= decay before the step and the gradient has no weight-decay term
  /// (decay = 1 - lr * weight_decay, computed in double on the host, rounded once).
  bool decoupled = false;
  float decay = 1.0f;
};

/// See backend::adam_update.
cudaError_t launch_adam_update(launch l, float* w, float* m, float* v, const float* g,
                               std::size_t n, const adam_constants& c);

}  // namespace coach::kernels::detail
