#pragma once
// kernels::cpu_backend: the host implementation of kernels::backend, on Eigen 3.4.
//
// Backend memory is ordinary host memory (64-byte aligned, zeroed by alloc), so upload and
// download are plain copies. GEMM runs Eigen's blocked kernel through row-major Maps, without
// temporaries; elementwise ops are vectorized. Eigen runs single-threaded here: a process runs
// one worker or shard per thread already, and a second level of threads would oversubscribe.
//
// Elementwise ops compute each element from that element's inputs only, with the same operation
// sequence on the vector and the scalar paths, so applying an op to a vector in pieces (as the
// shards do) gives bit-identical results to applying it at once.
//
// Threads: an object has no state beyond its vtable; one thread at a time uses it (backend.hpp).

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/backend.hpp"

namespace coach::kernels {

/// The Eigen backend; always built. Made by make_backend(backend_kind::cpu).
class cpu_backend final : public backend {
 public:
  /// "cpu".
  std::string_view name() const noexcept override { return "cpu"; }

  /// Allocates n zeroed floats of host memory, 64-byte aligned. Throws std::bad_alloc.
  float* alloc(std::size_t n) override;
  /// Releases memory from alloc (nullptr is a no-op).
  void free(float* p) noexcept override;
  /// Copies n floats (a memcpy: host and backend memory are the same).
  void upload(float* dst, const float* host_src, std::size_t n) override;
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
};

}  // namespace coach::kernels
