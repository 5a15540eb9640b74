#pragma once
// kernels::cpu_backend: the host implementation of kernels::backend, on Eigen 3.4.
//
// Backend memory is ordinary host memory (64-byte aligned, zeroed by alloc), so upload and
// download are plain copies. GEMM runs Eigen's blocked kernel through row-major Maps, without
// temporaries, or, where the CPU has AVX2 and FMA, the packed kernel of cpu_gemm.hpp (chosen
// once per object; cpu_gemm names the choice); elementwise ops are vectorized. Eigen runs
// single-threaded here: a process runs one worker or shard per thread already, and a second level
// of threads would oversubscribe.
//
// Elementwise ops compute each element from that element's inputs only, with the same operation
// sequence on the vector and the scalar paths, so applying an op to a vector in pieces (as the
// shards do) gives bit-identical results to applying it at once.
//
// Layers (cpu_layers.cpp): convolution is im2col of one image at a time into a column buffer the
// object owns (C R S x out_h out_w floats, grown to the largest request, kept until the object
// dies), then one gemm per image; a pointwise convolution (1 x 1, stride 1, no pad) uses the image
// itself. With a packed kernel (avx2_fma or avx512) the weights are packed once per batch, and a
// stride-1 convolution whose output rows are as wide as its input's reads its columns straight
// from the image into the product's strips (cpu_gemm.hpp): no column buffer, the same bits. Pooling
// backward and col2im gather each input's contributions in output order, and per-channel sums
// accumulate in double in (n, position) order, so every result is a fixed sequence of operations,
// which the cuda kernels repeat where they can (cuda_layers.cu).
//
// Threads: the column buffer is the only state; one thread at a time uses the object
// (backend.hpp).

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kernels/backend.hpp"

namespace coach::kernels {

/// Which matrix product a cpu_backend runs.
enum class cpu_gemm {
  best,      ///< avx512 where the CPU has AVX-512F, else avx2_fma where it has AVX2 and FMA,
             ///< eigen elsewhere
  eigen,     ///< Eigen's product (SSE2 on baseline x86-64)
  avx2_fma,  ///< the packed AVX2/FMA kernel (cpu_gemm.hpp); requires a CPU that has both
  avx512,    ///< the packed AVX-512 kernel: avx2_fma's bits; requires AVX-512F, AVX2 and FMA
};

/// The kernel's name as COACH_CPU_KERNEL takes it: "auto" (best), "eigen", "avx2" (avx2_fma) or
/// "avx512".
std::string_view to_string(cpu_gemm g) noexcept;

/// The environment variable that chooses the cpu backend's kernel (docs/operations.md).
inline constexpr std::string_view cpu_kernel_variable = "COACH_CPU_KERNEL";

/// Parses a kernel name: to_string's names. Errors: invalid_argument,
/// "COACH_CPU_KERNEL: 'NAME' is not a CPU kernel (auto, avx512, avx2 or eigen)".
result<cpu_gemm> parse_cpu_kernel(std::string_view name);

/// What of the packed kernels' instruction sets a CPU has.
struct cpu_features {
  bool avx2_fma = false;  ///< AVX2 and FMA
  bool avx512f = false;   ///< AVX-512F (with AVX2 and FMA)
};

/// This CPU's (read once).
cpu_features this_cpu() noexcept;

/// `g` as a CPU with `cpu` runs it: best resolved to the widest kernel the CPU has; a kernel it
/// lacks is errc::unsupported, one line: "COACH_CPU_KERNEL=avx512: this CPU has no AVX-512F (it
/// runs avx2 and eigen)".
result<cpu_gemm> runnable_cpu_kernel(cpu_gemm g, cpu_features cpu = this_cpu());

/// parse_cpu_kernel then runnable_cpu_kernel of `value` (unset or empty: auto): what
/// make_backend(backend_kind::cpu) makes its backends with, COACH_CPU_KERNEL's value passed in.
result<cpu_gemm> cpu_kernel_from(const char* value);

/// cpu_kernel_from(getenv("COACH_CPU_KERNEL")), read once per process.
const result<cpu_gemm>& cpu_kernel_from_environment();

/// The host backend; always built. Made by make_backend(backend_kind::cpu). Not final: tests
/// derive from it to stand for a device backend in host memory (device_reducer_test).
class cpu_backend : public backend {
 public:
  /// A backend whose products run `gemm` (best: the fastest this CPU has). Requesting a kernel
  /// the CPU lacks is a programming error (check runnable_cpu_kernel first).
  explicit cpu_backend(cpu_gemm gemm = cpu_gemm::best);

  /// The product this object runs: eigen, avx2_fma or avx512, never best.
  cpu_gemm gemm_kind() const noexcept { return gemm_; }

  /// "cpu".
  std::string_view name() const noexcept override { return "cpu"; }

  /// Allocates n zeroed floats of host memory, 64-byte aligned. Throws std::bad_alloc.
  float* alloc(std::size_t n) override;
  /// Releases memory from alloc (nullptr is a no-op).
  void free(float* p) noexcept override;
  /// Copies n floats (a memcpy: host and backend memory are the same).
  void upload(float* dst, const float* host_src, std::size_t n) override;
  void copy(float* dst, const float* src, std::size_t n) override;
  /// Copies n floats (a memcpy: host and backend memory are the same).
  void download(float* host_dst, const float* src, std::size_t n) override;

  /// See backend::gemm. beta == 0 does not read C (it may hold NaN), as in BLAS.
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override;
  /// See backend::bias_add.
  void bias_add(float* y, const float* bias, int rows, int cols) override;
  /// See backend::column_sum. beta == 0 does not read out.
  void column_sum(const float* x, int rows, int cols, float beta, float* out) override;
  /// See backend::relu.
  void relu(const float* x, float* y, std::size_t n) override;
  /// See backend::relu_grad.
  void relu_grad(const float* y, const float* dy, float* dx, std::size_t n) override;
  /// See backend::tanh (std::tanh in float).
  void tanh(const float* x, float* y, std::size_t n) override;
  /// See backend::tanh_grad.
  void tanh_grad(const float* y, const float* dy, float* dx, std::size_t n) override;
  /// See backend::sigmoid (std::exp in float).
  void sigmoid(const float* x, float* y, std::size_t n) override;
  /// See backend::sigmoid_grad.
  void sigmoid_grad(const float* y, const float* dy, float* dx, std::size_t n) override;
  /// See backend::gelu (the tanh approximation).
  void gelu(const float* x, float* y, std::size_t n) override;
  /// See backend::gelu_grad.
  void gelu_grad(const float* x, const float* dy, float* dx, std::size_t n) override;
  /// See backend::softmax_xent. Labels are host memory. Stable for any finite logits.
  double softmax_xent(const float* logits, const std::int32_t* labels, int rows, int cols,
                      float* dlogits) override;
  /// See backend::count_correct. Labels are host memory; ties go to the first largest logit.
  std::int64_t count_correct(const float* logits, const std::int32_t* labels, int rows,
                             int cols) override;
  /// See backend::axpy.
  void axpy(std::size_t n, float alpha, const float* x, float* y) override;
  /// See backend::scale.
  void scale(std::size_t n, float alpha, float* x) override;
  /// See backend::sum.
  double sum(const float* x, std::size_t n) override;
  /// See backend::sum_squares.
  double sum_squares(const float* x, std::size_t n) override;
  /// See backend::sgd_update.
  void sgd_update(float* w, float* v, const float* g, std::size_t n, float grad_scale,
                  const sgd_options& opt) override;
  /// See backend::adam_update. The bias corrections are computed in double once per call.
  void adam_update(float* w, float* m, float* v, const float* g, std::size_t n, float grad_scale,
                   std::int64_t t, const adam_options& opt) override;

  /// Allocates n zeroed int32 values of host memory. Throws std::bad_alloc.
  std::int32_t* alloc_indices(std::size_t n) override;
  /// Releases memory from alloc_indices (nullptr is a no-op).
  void free_indices(std::int32_t* p) noexcept override;

  /// See backend::conv2d_forward. Workspace: one image's column matrix, C R S out_h out_w floats
  /// (none for a pointwise convolution).
  void conv2d_forward(const conv2d_shape& s, const float* x, const float* w, const float* bias,
                      float* y) override;
  /// See backend::conv2d_backward_data. Workspace as conv2d_forward.
  void conv2d_backward_data(const conv2d_shape& s, const float* dy, const float* w,
                            float* dx) override;
  /// See backend::conv2d_backward_filter. Workspace as conv2d_forward.
  void conv2d_backward_filter(const conv2d_shape& s, const float* x, const float* dy, float* dw,
                              float* db) override;
  /// See backend::max_pool2d_forward.
  void max_pool2d_forward(const pool2d_shape& s, const float* x, float* y,
                          std::int32_t* argmax) override;
  /// See backend::max_pool2d_backward.
  void max_pool2d_backward(const pool2d_shape& s, const float* dy, const std::int32_t* argmax,
                           float* dx) override;
  /// See backend::avg_pool2d_forward.
  void avg_pool2d_forward(const pool2d_shape& s, const float* x, float* y) override;
  /// See backend::avg_pool2d_backward.
  void avg_pool2d_backward(const pool2d_shape& s, const float* dy, float* dx) override;
  /// See backend::dropout_forward.
  void dropout_forward(const float* x, float* y, std::size_t n, float p, std::uint64_t seed,
                       std::uint64_t step) override;
  /// See backend::dropout_backward.
  void dropout_backward(const float* dy, float* dx, std::size_t n, float p, std::uint64_t seed,
                        std::uint64_t step) override;
  /// See backend::batch_norm_forward_train.
  void batch_norm_forward_train(const batch_norm_shape& s, const batch_norm_options& o,
                                const float* x, const float* gamma, const float* beta, float* y,
                                float* running_mean, float* running_var, float* saved_mean,
                                float* saved_inv_std) override;
  /// See backend::batch_norm_forward_inference.
  void batch_norm_forward_inference(const batch_norm_shape& s, const batch_norm_options& o,
                                    const float* x, const float* gamma, const float* beta,
                                    const float* running_mean, const float* running_var,
                                    float* y) override;
  /// See backend::batch_norm_backward.
  void batch_norm_backward(const batch_norm_shape& s, const float* x, const float* dy,
                           const float* gamma, const float* saved_mean, const float* saved_inv_std,
                           float* dx, float* dgamma, float* dbeta) override;

 private:
  /// The column buffer, at least `floats` long.
  float* columns(std::size_t floats);
  /// gemm without its checks or the rounding of the operands to precision(): what the
  /// convolutions call once they have rounded their inputs.
  void product(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
               int lda, const float* b, int ldb, float beta, float* c, int ldc);
  /// src's n floats rounded to precision() into scratch buffer `slot` (0 or 1), kept between
  /// calls; the buffer's start.
  const float* rounded(int slot, const float* src, std::size_t n);

  std::vector<float> columns_;
  std::vector<float> rounded_[2];
  cpu_gemm gemm_;
};

}  // namespace coach::kernels
