// The layer ops of kernels::cuda_backend (contracts in backend.hpp, layout of the work in
// cuda_backend.hpp): preconditions on the host, then kernels from cuda_layers.cu and cuBLAS, all
// enqueued on the backend's stream.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "common/enforce.hpp"
#include "kernels/counter_rng.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_error.hpp"
#include "kernels/cuda/cuda_layers.hpp"
#include "kernels/cuda/cudnn_conv.hpp"
#include "kernels/layer_shapes_check.hpp"

namespace coach::kernels {
namespace {

/// Most floats of the convolution workspace (32 MiB) unless one image needs more.
constexpr std::size_t max_column_floats = std::size_t{1} << 23;

template <class Shape>
void enforce_valid(const Shape& s, const char* op) {
  const auto ok = validate(s);
  COACH_ENFORCE(ok.has_value(), ok ? op : ok.error().message.c_str());
}

/// Row-major C_i = op(A_i) op(B_i) for i < count, C_i m x n, with element strides between the
/// A_i, B_i and C_i (0 repeats one matrix): cuBLAS's column-major C^T = op(B)^T op(A)^T, as gemm.
}  // namespace

// --- memory ---------------------------------------------------------------------------------

std::int32_t* cuda_backend::alloc_indices(std::size_t n) {
  static_assert(sizeof(std::int32_t) == sizeof(float));
  // The same device memory as alloc's (4-byte elements), under its own type.
  return reinterpret_cast<std::int32_t*>(alloc(n));
}

void cuda_backend::free_indices(std::int32_t* p) noexcept {
  free(reinterpret_cast<float*>(p));
}

float* cuda_backend::columns(std::size_t floats) {
  if (columns_capacity_ >= floats) return columns_;
  if (columns_ != nullptr) {
    // Ops enqueued before may still read the old workspace.
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (conv workspace)");
    check(cudaFree(columns_), "cudaFree (conv workspace)");
    columns_ = nullptr;
    columns_capacity_ = 0;
  }
  check(cudaMalloc(reinterpret_cast<void**>(&columns_), floats * sizeof(float)),
        coach::format("cudaMalloc of {} bytes (conv workspace)", floats * sizeof(float)));
  columns_capacity_ = floats;
  return columns_;
}

float* cuda_backend::filter_parts(std::size_t floats) {
  if (parts_capacity_ >= floats) return parts_;
  if (parts_ != nullptr) {
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (filter gradient workspace)");
    check(cudaFree(parts_), "cudaFree (filter gradient workspace)");
    parts_ = nullptr;
    parts_capacity_ = 0;
  }
  check(
      cudaMalloc(reinterpret_cast<void**>(&parts_), floats * sizeof(float)),
      coach::format("cudaMalloc of {} bytes (filter gradient workspace)", floats * sizeof(float)));
  parts_capacity_ = floats;
  return parts_;
}

detail::cudnn_convolutions* cuda_backend::dnn() {
  if (dnn_ || dnn_failed_ || !detail::cudnn_convolutions::enabled()) return dnn_.get();
  try {
    dnn_ = std::make_unique<detail::cudnn_convolutions>(device_, stream_, max_blocks_);
    dnn_->gemm_like(gemm_like_convolutions_);
  } catch (const cuda_error& e) {
    dnn_failed_ = true;
    std::fprintf(stderr, "coach: cuDNN did not start (%s); convolutions through im2col\n",
                 e.what());
  }
  return dnn_.get();
}

void cuda_backend::set_gemm_like_convolutions(bool on) {
  gemm_like_convolutions_ = on;
  if (dnn_) dnn_->gemm_like(on);
}

std::string cuda_backend::describe_convolution(const conv2d_shape& s) const {
  return dnn_ ? dnn_->describe(s, precision_) : std::string("im2col");
}

void cuda_backend::round_output(float* out, std::size_t n) {
  if (precision_ != math_precision::bf16) return;
  check(detail::launch_round_bf16({stream_, max_blocks_}, out, n), "round_bf16 kernel launch");
}

void cuda_backend::batched_product(bool trans_a, bool trans_b, int m, int n, int k, const float* a,
                                   int lda, long long stride_a, const float* b, int ldb,
                                   long long stride_b, float* c, int ldc, long long stride_c,
                                   int count) {
  const float alpha = 1.0f, beta = 0.0f;
  const auto op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (precision_ == math_precision::fp32) {
    detail::check_cublas(
        cublasSgemmStridedBatched(blas_, op_b, op_a, n, m, k, &alpha, b, ldb, stride_b, a, lda,
                                  stride_a, &beta, c, ldc, stride_c, count),
        device_,
        coach::format("cublasSgemmStridedBatched (m={} n={} k={} count={})", m, n, k, count));
    return;
  }
  // Every element the product reads, from the first matrix's start to the last one's end.
  auto extent = [count](int rows, int cols, int ld, long long stride) {
    return std::size_t(count - 1) * std::size_t(stride) + std::size_t(rows - 1) * ld + cols;
  };
  const auto in = operands(a, extent(trans_a ? k : m, trans_a ? m : k, lda, stride_a), b,
                           extent(trans_b ? n : k, trans_b ? k : n, ldb, stride_b));
  detail::check_cublas(
      cublasGemmStridedBatchedEx(blas_, op_b, op_a, n, m, k, &alpha, in.b, cudaDataType_t(in.type),
                                 ldb, stride_b, in.a, cudaDataType_t(in.type), lda, stride_a, &beta,
                                 c, CUDA_R_32F, ldc, stride_c, count,
                                 cublasComputeType_t(in.compute), CUBLAS_GEMM_DEFAULT),
      device_,
      coach::format("cublasGemmStridedBatchedEx {} (m={} n={} k={} count={})",
                    to_string(precision_), m, n, k, count));
}

int cuda_backend::conv_chunk(const conv2d_shape& s) const {
  const std::size_t fit = max_column_floats / s.column_size();
  return int(std::clamp<std::size_t>(fit, 1, std::size_t(s.batch)));
}

// --- activations ----------------------------------------------------------------------------

void cuda_backend::tanh(const float* x, float* y, std::size_t n) {
  activate();
  check(detail::launch_tanh({stream_, max_blocks_}, x, y, n), "tanh kernel launch");
}

void cuda_backend::tanh_grad(const float* y, const float* dy, float* dx, std::size_t n) {
  activate();
  check(detail::launch_tanh_grad({stream_, max_blocks_}, y, dy, dx, n), "tanh_grad kernel launch");
}

void cuda_backend::sigmoid(const float* x, float* y, std::size_t n) {
  activate();
  check(detail::launch_sigmoid({stream_, max_blocks_}, x, y, n), "sigmoid kernel launch");
}

void cuda_backend::sigmoid_grad(const float* y, const float* dy, float* dx, std::size_t n) {
  activate();
  check(detail::launch_sigmoid_grad({stream_, max_blocks_}, y, dy, dx, n),
        "sigmoid_grad kernel launch");
}

void cuda_backend::gelu(const float* x, float* y, std::size_t n) {
  activate();
  check(detail::launch_gelu({stream_, max_blocks_}, x, y, n), "gelu kernel launch");
}

void cuda_backend::gelu_grad(const float* x, const float* dy, float* dx, std::size_t n) {
  activate();
  check(detail::launch_gelu_grad({stream_, max_blocks_}, x, dy, dx, n), "gelu_grad kernel launch");
}

// --- convolution ----------------------------------------------------------------------------

void cuda_backend::conv2d_forward(const conv2d_shape& s, const float* x, const float* w,
                                  const float* bias, float* y) {
  enforce_valid(s, "conv2d_forward");
  activate();
  const detail::launch l{stream_, max_blocks_};
  const int k = s.filters, crs = int(s.column_rows()), plane = s.out_plane();
  const auto x_image = static_cast<long long>(s.image_size());
  const auto y_image = static_cast<long long>(s.output_image_size());
  auto* d = dnn();
  if (d != nullptr) {
    d->forward(s, precision_, x, w, y);
  } else if (s.is_pointwise()) {
    // y_n = W x_n for every image in one call: the image is its own column matrix.
    batched_product(false, false, k, plane, crs, w, crs, 0, x, plane, x_image, y, plane, y_image,
                    s.batch);
  } else {
    const int chunk = conv_chunk(s);
    const auto col_image = static_cast<long long>(s.column_size());
    float* col = columns(std::size_t(chunk) * s.column_size());
    for (int n0 = 0; n0 < s.batch; n0 += chunk) {
      const int g = std::min(chunk, s.batch - n0);
      check(detail::launch_im2col(l, s, x + n0 * x_image, g, col), "im2col kernel launch");
      batched_product(false, false, k, plane, crs, w, crs, 0, col, plane, col_image,
                      y + n0 * y_image, plane, y_image, g);
    }
  }
  if (d == nullptr) round_output(y, s.output_size());
  if (bias != nullptr)
    check(detail::launch_channel_bias(l, y, bias, s.batch, k, std::size_t(plane)),
          "conv bias kernel launch");
}

void cuda_backend::conv2d_backward_data(const conv2d_shape& s, const float* dy, const float* w,
                                        float* dx) {
  enforce_valid(s, "conv2d_backward_data");
  activate();
  if (auto* d = dnn()) {
    d->backward_data(s, precision_, dy, w, dx);
    return;
  }
  const detail::launch l{stream_, max_blocks_};
  const int k = s.filters, crs = int(s.column_rows()), plane = s.out_plane();
  const auto x_image = static_cast<long long>(s.image_size());
  const auto y_image = static_cast<long long>(s.output_image_size());
  if (s.is_pointwise()) {
    batched_product(true, false, crs, plane, k, w, crs, 0, dy, plane, y_image, dx, plane, x_image,
                    s.batch);
    round_output(dx, s.input_size());
    return;
  }
  const int chunk = conv_chunk(s);
  const auto col_image = static_cast<long long>(s.column_size());
  float* col = columns(std::size_t(chunk) * s.column_size());
  for (int n0 = 0; n0 < s.batch; n0 += chunk) {
    const int g = std::min(chunk, s.batch - n0);
    // columns_i = W^T dy_i, then each input gathers its column entries (col2im).
    batched_product(true, false, crs, plane, k, w, crs, 0, dy + n0 * y_image, plane, y_image, col,
                    plane, col_image, g);
    check(detail::launch_col2im(l, s, col, g, dx + n0 * x_image), "col2im kernel launch");
  }
  round_output(dx, s.input_size());
}

void cuda_backend::conv2d_backward_filter(const conv2d_shape& s, const float* x, const float* dy,
                                          float* dw, float* db) {
  enforce_valid(s, "conv2d_backward_filter");
  activate();
  const detail::launch l{stream_, max_blocks_};
  const int k = s.filters, crs = int(s.column_rows()), plane = s.out_plane();
  const std::size_t x_image = s.image_size(), y_image = s.output_image_size();
  if (auto* d = dnn()) {
    d->backward_filter(s, precision_, x, dy, dw);
    if (db != nullptr)
      check(detail::launch_channel_sum(l, dy, s.batch, k, std::size_t(plane), db),
            "conv bias gradient kernel launch");
    return;
  }
  const bool pointwise = s.is_pointwise();
  const std::size_t dw_size = std::size_t(k) * std::size_t(crs);
  // As many images a chunk as fit the workspace cap, for the columns and for the parts alike.
  const int parts_fit = int(std::clamp<std::size_t>(
      max_column_floats / std::max<std::size_t>(dw_size, 1), 1, std::size_t(s.batch)));
  const int chunk = std::min(pointwise ? s.batch : conv_chunk(s), parts_fit);
  float* col = pointwise ? nullptr : columns(std::size_t(chunk) * s.column_size());
  // Each image's dy_n col_n^T into a part of its own (one batched GEMM a chunk), then the
  // parts added in image order (the cpu's order of images): two launches a chunk instead of a
  // GEMM per image, which at small sizes cost more to launch than to run.
  float* parts = filter_parts(std::size_t(chunk) * dw_size);
  for (int n0 = 0; n0 < s.batch; n0 += chunk) {
    const int g = std::min(chunk, s.batch - n0);
    if (!pointwise)
      check(detail::launch_im2col(l, s, x + n0 * x_image, g, col), "im2col kernel launch");
    const float* cols = pointwise ? x + n0 * x_image : col;
    const auto col_stride = static_cast<long long>(pointwise ? x_image : s.column_size());
    batched_product(false, true, k, crs, plane, dy + n0 * y_image, plane,
                    static_cast<long long>(y_image), cols, plane, col_stride, parts, crs,
                    static_cast<long long>(dw_size), g);
    check(detail::launch_sum_parts(l, parts, g, dw_size, n0 > 0, dw), "filter sum kernel launch");
  }
  round_output(dw, s.weight_size());
  if (db != nullptr)
    check(detail::launch_channel_sum(l, dy, s.batch, k, std::size_t(plane), db),
          "conv bias gradient kernel launch");
}

// --- pooling --------------------------------------------------------------------------------

void cuda_backend::max_pool2d_forward(const pool2d_shape& s, const float* x, float* y,
                                      std::int32_t* argmax) {
  enforce_valid(s, "max_pool2d_forward");
  activate();
  check(detail::launch_max_pool_forward({stream_, max_blocks_}, s, x, y, argmax),
        "max_pool2d_forward kernel launch");
}

void cuda_backend::max_pool2d_backward(const pool2d_shape& s, const float* dy,
                                       const std::int32_t* argmax, float* dx) {
  enforce_valid(s, "max_pool2d_backward");
  activate();
  check(detail::launch_max_pool_backward({stream_, max_blocks_}, s, dy, argmax, dx),
        "max_pool2d_backward kernel launch");
}

void cuda_backend::avg_pool2d_forward(const pool2d_shape& s, const float* x, float* y) {
  enforce_valid(s, "avg_pool2d_forward");
  activate();
  check(detail::launch_avg_pool_forward({stream_, max_blocks_}, s, x, y),
        "avg_pool2d_forward kernel launch");
}

void cuda_backend::avg_pool2d_backward(const pool2d_shape& s, const float* dy, float* dx) {
  enforce_valid(s, "avg_pool2d_backward");
  activate();
  check(detail::launch_avg_pool_backward({stream_, max_blocks_}, s, dy, dx),
        "avg_pool2d_backward kernel launch");
}

// --- dropout --------------------------------------------------------------------------------

void cuda_backend::dropout_forward(const float* x, float* y, std::size_t n, float p,
                                   std::uint64_t seed, std::uint64_t step) {
  COACH_ENFORCE(p >= 0.0f && p < 1.0f, "dropout needs 0 <= p < 1");
  activate();
  // The key, threshold and scale come from the same host code as the cpu's.
  check(detail::launch_dropout({stream_, max_blocks_}, x, y, n, counter_rng::key(seed, step),
                               counter_rng::drop_threshold(p), 1.0f / (1.0f - p)),
        "dropout kernel launch");
}

void cuda_backend::dropout_backward(const float* dy, float* dx, std::size_t n, float p,
                                    std::uint64_t seed, std::uint64_t step) {
  dropout_forward(dy, dx, n, p, seed, step);
}

// --- batch norm -----------------------------------------------------------------------------

void cuda_backend::batch_norm_forward_train(const batch_norm_shape& s, const batch_norm_options& o,
                                            const float* x, const float* gamma, const float* beta,
                                            float* y, float* running_mean, float* running_var,
                                            float* saved_mean, float* saved_inv_std) {
  enforce_valid(s, "batch_norm_forward_train");
  activate();
  const detail::launch l{stream_, max_blocks_};
  check(detail::launch_batch_norm_stats(l, s, x, o.epsilon, o.momentum, running_mean, running_var,
                                        saved_mean, saved_inv_std),
        "batch_norm statistics kernel launch");
  check(detail::launch_batch_norm_apply(l, s, x, saved_mean, saved_inv_std, gamma, beta, y),
        "batch_norm kernel launch");
}

void cuda_backend::batch_norm_forward_inference(const batch_norm_shape& s,
                                                const batch_norm_options& o, const float* x,
                                                const float* gamma, const float* beta,
                                                const float* running_mean, const float* running_var,
                                                float* y) {
  enforce_valid(s, "batch_norm_forward_inference");
  activate();
  check(detail::launch_batch_norm_inference({stream_, max_blocks_}, s, x, gamma, beta, running_mean,
                                            running_var, o.epsilon, y),
        "batch_norm inference kernel launch");
}

void cuda_backend::batch_norm_backward(const batch_norm_shape& s, const float* x, const float* dy,
                                       const float* gamma, const float* saved_mean,
                                       const float* saved_inv_std, float* dx, float* dgamma,
                                       float* dbeta) {
  enforce_valid(s, "batch_norm_backward");
  activate();
  const detail::launch l{stream_, max_blocks_};
  check(detail::launch_batch_norm_grad_sums(l, s, x, dy, saved_mean, saved_inv_std, dgamma, dbeta),
        "batch_norm gradient sums kernel launch");
  check(detail::launch_batch_norm_dx(l, s, x, dy, gamma, saved_mean, saved_inv_std, dgamma, dbeta,
                                     dx),
        "batch_norm dx kernel launch");
}

}  // namespace coach::kernels
