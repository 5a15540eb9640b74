#pragma once
// kernels::backend: the one math interface of Coach. Workers run forward and backward on it,
// shards run the fused optimizer updates on it. Implementations: cpu (Eigen, always built) and
// cuda (cuBLAS + own kernels, built with COACH_ENABLE_CUDA).
//
// Memory: every float* passed to an op is memory of this backend (host memory for cpu, device
// memory for cuda); integer label arrays are host memory (a device backend copies them itself).
// alloc/free/upload/download move data between host and backend memory. All matrices are row-major
// and dense unless a leading dimension says otherwise.
//
// Threads: a backend object is used by one thread at a time (each worker owns its own).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "common/error.hpp"

namespace coach::kernels {

/// Which implementation to use. `auto_select` picks cuda when a device is present.
enum class backend_kind { auto_select, cpu, cuda };

/// Parses "auto" | "cpu" | "cuda".
result<backend_kind> parse_backend_kind(std::string_view text);
std::string_view to_string(backend_kind kind) noexcept;

/// Hyper-parameters of SGD with momentum (momentum = 0 gives plain SGD).
struct sgd_options {
  float learning_rate = 0.01f;
  float momentum = 0.0f;      ///< heavy-ball: v = momentum * v + g; w -= lr * v
  float weight_decay = 0.0f;  ///< L2: g += weight_decay * w before the update
};

/// Hyper-parameters of Adam (Kingma & Ba, with bias correction).
struct adam_options {
  float learning_rate = 0.001f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;  ///< L2 added to the gradient (not decoupled)
};

class backend {
 public:
  virtual ~backend() = default;

  /// "cpu" or "cuda".
  virtual std::string_view name() const noexcept = 0;

  // --- memory -----------------------------------------------------------------------------
  /// Allocates n floats of backend memory (zeroed).
  virtual float* alloc(std::size_t n) = 0;
  /// Releases memory from alloc (nullptr is a no-op).
  virtual void free(float* p) noexcept = 0;
  /// Copies n floats from host memory into backend memory.
  virtual void upload(float* dst, const float* host_src, std::size_t n) = 0;
  /// Copies n floats from backend memory into host memory (waits for pending work).
  virtual void download(float* host_dst, const float* src, std::size_t n) = 0;

  // --- dense algebra ----------------------------------------------------------------------
  /// C[m x n] = alpha * op(A) * op(B) + beta * C, where op(A) is m x k and op(B) is k x n.
  /// A is stored m x k (or k x m when trans_a), B is stored k x n (or n x k when trans_b);
  /// all row-major with leading dimensions lda, ldb, ldc (elements between rows).
  /// As in BLAS, C is not read when beta == 0 (it may hold NaN).
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) = 0;

  /// y[r, c] += bias[c] for a rows x cols matrix y.
  virtual void bias_add(float* y, const float* bias, int rows, int cols) = 0;

  /// out[c] = beta * out[c] + sum_r x[r, c] (column sums; the bias gradient). out is not read
  /// when beta == 0.
  virtual void column_sum(const float* x, int rows, int cols, float beta, float* out) = 0;

  /// y = max(x, 0), elementwise; y may alias x.
  virtual void relu(const float* x, float* y, std::size_t n) = 0;
  /// dx = dy where y > 0 else 0 (y is relu's output); dx may alias dy.
  virtual void relu_grad(const float* y, const float* dy, float* dx, std::size_t n) = 0;

  /// Softmax cross-entropy over rows of logits (rows x cols) with integer labels in [0, cols).
  /// Writes dlogits = softmax(logits) - onehot(label) (the gradient of the SUM of row losses;
  /// may alias logits) and returns the sum of the row losses -log softmax(logits)[label].
  /// REQUIRES: every label in [0, cols).
  virtual double softmax_xent(const float* logits, const std::int32_t* labels, int rows, int cols,
                              float* dlogits) = 0;

  /// Number of rows whose largest logit sits at the row's label.
  virtual std::int64_t count_correct(const float* logits, const std::int32_t* labels, int rows,
                                     int cols) = 0;

  /// y = alpha * x + y.
  virtual void axpy(std::size_t n, float alpha, const float* x, float* y) = 0;
  /// x = alpha * x.
  virtual void scale(std::size_t n, float alpha, float* x) = 0;
  /// Sum of all n elements (accumulated in double).
  virtual double sum(const float* x, std::size_t n) = 0;
  /// Sum of squares of all n elements (accumulated in double).
  virtual double sum_squares(const float* x, std::size_t n) = 0;

  // --- fused optimizer updates (elementwise, so sharding never changes the result) --------
  /// With g' = grad_scale * g + weight_decay * w:  v = momentum * v + g';  w -= lr * v.
  /// When momentum == 0, v is not read or written and may be nullptr.
  virtual void sgd_update(float* w, float* v, const float* g, std::size_t n, float grad_scale,
                          const sgd_options& opt) = 0;

  /// Adam step number t (1-based) with g' = grad_scale * g + weight_decay * w:
  /// m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;
  /// w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
  virtual void adam_update(float* w, float* m, float* v, const float* g, std::size_t n,
                           float grad_scale, std::int64_t t, const adam_options& opt) = 0;
};

/// Makes a backend. cuda (or auto on a host with a device) needs a build with COACH_ENABLE_CUDA;
/// otherwise: errc::unsupported naming the reason. auto falls back to cpu without a device.
result<std::unique_ptr<backend>> make_backend(backend_kind kind);

/// Backends compiled into this build, e.g. "cpu" or "cpu,cuda".
std::string_view compiled_backends() noexcept;

/// True when this build has CUDA and a device is visible.
bool cuda_device_present() noexcept;

}  // namespace coach::kernels
