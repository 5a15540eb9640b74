#pragma once
// kernels::backend: the one math interface of Coach. Workers run forward and backward on it,
// shards run the fused optimizer updates on it. Implementations: cpu (Eigen, always built) and
// cuda (cuBLAS + own kernels, built with COACH_ENABLE_CUDA).
//
// Memory: every float* passed to an op is memory of this backend (host memory for cpu, device
// memory for cuda); integer label arrays are host memory (a device backend copies them itself).
// alloc/free/upload/download move data between host and backend memory. All matrices are row-major
// and dense unless a leading dimension says otherwise; the layer ops take batch-major NCHW tensors
// (kernels/layer_shapes.hpp).
//
// Determinism: every op gives the same bits for the same inputs on the same backend (no atomics
// on floats, fixed reduction orders). Between backends, elementwise ops agree bit for bit except
// where a transcendental function rounds differently (tanh, sigmoid, gelu); reductions and GEMMs
// agree to rounding (docs/cuda.md lists the tolerances).
//
// Threads: a backend object is used by one thread at a time (each worker owns its own).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "common/error.hpp"
#include "kernels/layer_shapes.hpp"
#include "kernels/layer_shapes_check.hpp"
#include "kernels/precision.hpp"

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

/// Hyper-parameters of Adam (Kingma & Ba, with bias correction), or of AdamW (Loshchilov &
/// Hutter, as PyTorch's AdamW) when `decoupled`.
struct adam_options {
  float learning_rate = 0.001f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  /// Adam: L2 added to the gradient. AdamW (decoupled): w *= 1 - learning_rate * weight_decay
  /// before the Adam step, the gradient left alone.
  float weight_decay = 0.0f;
  bool decoupled = false;  ///< AdamW: weight decay decoupled from the gradient
};

class backend {
 public:
  virtual ~backend() = default;

  /// "cpu" or "cuda".
  virtual std::string_view name() const noexcept = 0;
  /// The device this backend's memory is on: a CUDA device index, or -1 for host memory.
  virtual int device() const noexcept { return -1; }
  /// Waits until every op enqueued so far has finished (a host backend's ops finish in the call).
  virtual void synchronize() {}
  /// Host memory for download_async (pinned on cuda, so the copy needs no staging); n floats.
  /// Errors: throws as alloc does.
  virtual float* alloc_host(std::size_t n) { return new float[n == 0 ? 1 : n]; }
  /// Releases memory from alloc_host (nullptr is a no-op).
  virtual void free_host(float* p) noexcept { delete[] p; }
  /// Copies n floats of backend memory into `host_dst` (from alloc_host) once the ops enqueued
  /// so far have written them, without holding up the ops enqueued after (on cuda, a copy
  /// stream of its own); finish_downloads() waits for every such copy. A host backend copies at
  /// once. REQUIRES: nothing enqueued later writes `src` before finish_downloads().
  virtual void download_async(float* host_dst, const float* src, std::size_t n) {
    download(host_dst, src, n);
  }
  /// Waits for every download_async so far. Throws as the copies would.
  virtual void finish_downloads() {}

  /// How gemm and the convolutions' products treat their operands (kernels/precision.hpp):
  /// fp32 (the default) as they are; tf32 or bf16 each operand rounded to that format first
  /// (on cuda: cuBLAS's FAST_TF32 / FAST_16BF compute types, on the tensor cores), products
  /// accumulated in float. Everything else stays float32 whatever the precision.
  void set_precision(math_precision p) noexcept { precision_ = p; }
  math_precision precision() const noexcept { return precision_; }

  // --- memory -----------------------------------------------------------------------------
  /// Allocates n floats of backend memory (zeroed).
  virtual float* alloc(std::size_t n) = 0;
  /// Releases memory from alloc (nullptr is a no-op).
  virtual void free(float* p) noexcept = 0;
  /// Copies n floats from host memory into backend memory.
  virtual void upload(float* dst, const float* host_src, std::size_t n) = 0;
  /// Copies n floats from backend memory into host memory (waits for pending work).
  virtual void download(float* host_dst, const float* src, std::size_t n) = 0;
  /// dst = src, both backend memory (no overlap).
  virtual void copy(float* dst, const float* src, std::size_t n) = 0;
  /// Allocates n int32 values of backend memory (zeroed), for max_pool2d's argmax indices.
  virtual std::int32_t* alloc_indices(std::size_t n) = 0;
  /// Releases memory from alloc_indices (nullptr is a no-op).
  virtual void free_indices(std::int32_t* p) noexcept = 0;

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

  /// y = tanh(x), elementwise; y may alias x.
  virtual void tanh(const float* x, float* y, std::size_t n) = 0;
  /// dx = dy * (1 - y * y), where y is tanh's output; dx may alias dy.
  virtual void tanh_grad(const float* y, const float* dy, float* dx, std::size_t n) = 0;
  /// y = 1 / (1 + exp(-x)), elementwise; y may alias x.
  virtual void sigmoid(const float* x, float* y, std::size_t n) = 0;
  /// dx = dy * y * (1 - y), where y is sigmoid's output; dx may alias dy.
  virtual void sigmoid_grad(const float* y, const float* dy, float* dx, std::size_t n) = 0;
  /// GELU in its tanh approximation (Hendrycks & Gimpel; GPT-2's and PyTorch's
  /// approximate="tanh"): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). y may alias x.
  virtual void gelu(const float* x, float* y, std::size_t n) = 0;
  /// dx = dy * d gelu(x) / dx of the same approximation. Takes gelu's INPUT x (its output does
  /// not determine the derivative); dx may alias dy (not x).
  virtual void gelu_grad(const float* x, const float* dy, float* dx, std::size_t n) = 0;

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

  // --- layers (NCHW; kernels/layer_shapes.hpp) -------------------------------------------
  // A shape that fails validate() (layer_shapes_check.hpp) is a programming error (COACH_ENFORCE):
  // the model layer validates its configuration once and reports an error there. Outputs are
  // overwritten (never accumulated into) and not read, except the running statistics that
  // batch_norm_forward_train updates; no output may alias an input unless the op says so.

  /// y = conv(x, w) + bias, x N x C x H x W, w K x C x R x S, bias K (nullptr: no bias),
  /// y N x K x out_h x out_w. The column matrix (C R S x out_h out_w per image) lives in a
  /// workspace the backend owns and keeps between calls (grown to the largest request; see each
  /// backend's header for its size); callers pass none.
  virtual void conv2d_forward(const conv2d_shape& s, const float* x, const float* w,
                              const float* bias, float* y) = 0;
  /// dx = the gradient of the convolution with respect to its input, from dy (N x K x out_h x
  /// out_w) and w; dx is N x C x H x W. Uses the backend's workspace as conv2d_forward.
  virtual void conv2d_backward_data(const conv2d_shape& s, const float* dy, const float* w,
                                    float* dx) = 0;
  /// dw (K x C x R x S) = the gradient with respect to the weights, summed over the batch in
  /// image order; db (K) = dy summed per filter over batch and positions (nullptr: not
  /// computed). Uses the backend's workspace as conv2d_forward.
  virtual void conv2d_backward_filter(const conv2d_shape& s, const float* x, const float* dy,
                                      float* dw, float* db) = 0;

  /// y = the maximum of each window (N x C x out_h x out_w); argmax (backend memory from
  /// alloc_indices, one per output) = where it sits in its input plane, h * W + w. A tie goes to
  /// the first maximum in row-major window order; a NaN wins (the first one), so a divergence
  /// shows, as in PyTorch; a pad is never picked.
  virtual void max_pool2d_forward(const pool2d_shape& s, const float* x, float* y,
                                  std::int32_t* argmax) = 0;
  /// dx (N x C x H x W) = each dy routed to its window's argmax and summed where windows overlap
  /// (in output order: deterministic), zero elsewhere.
  /// REQUIRES: argmax as written by max_pool2d_forward with the same shape.
  virtual void max_pool2d_backward(const pool2d_shape& s, const float* dy,
                                   const std::int32_t* argmax, float* dx) = 0;
  /// y = the sum of each window's inputs divided by the window's area R S, a pad counting as a
  /// zero (PyTorch's count_include_pad=True).
  virtual void avg_pool2d_forward(const pool2d_shape& s, const float* x, float* y) = 0;
  /// dx = for each input, the sum of dy over the windows that hold it (in output order), divided
  /// by the window's area.
  virtual void avg_pool2d_backward(const pool2d_shape& s, const float* dy, float* dx) = 0;

  /// Inverted dropout: y[i] = x[i] / (1 - p) where counter_rng::keeps(seed, step, i, p), else 0.
  /// The mask is a pure function of (seed, step, i) (kernels/counter_rng.hpp): the same on every
  /// backend, and recomputed by dropout_backward rather than stored. The model layer makes each
  /// (layer, worker, step) a distinct (seed, step). The scale is the float 1.0f / (1.0f - p).
  /// y may alias x. REQUIRES: 0 <= p < 1.
  virtual void dropout_forward(const float* x, float* y, std::size_t n, float p, std::uint64_t seed,
                               std::uint64_t step) = 0;
  /// dx[i] = dy[i] / (1 - p) where forward with the same (p, seed, step) kept element i, else 0.
  /// dx may alias dy. REQUIRES: 0 <= p < 1.
  virtual void dropout_backward(const float* dy, float* dx, std::size_t n, float p,
                                std::uint64_t seed, std::uint64_t step) = 0;

  /// Training-mode batch norm of x (N x C x S) per channel c: mean and biased variance over the
  /// N S elements (accumulated in double), inv_std = 1 / sqrt(var + eps),
  /// y = gamma[c] * ((x - mean) * inv_std) + beta[c]. Writes saved_mean[c] and saved_inv_std[c]
  /// (for batch_norm_backward) and updates running_mean / running_var with o.momentum, the
  /// variance unbiased (times N S / (N S - 1); biased when N S == 1), as PyTorch does.
  /// gamma, beta, the running and saved statistics are C floats each. y may alias x.
  virtual void batch_norm_forward_train(const batch_norm_shape& s, const batch_norm_options& o,
                                        const float* x, const float* gamma, const float* beta,
                                        float* y, float* running_mean, float* running_var,
                                        float* saved_mean, float* saved_inv_std) = 0;
  /// Inference-mode batch norm from the running statistics:
  /// y = gamma[c] * ((x - running_mean[c]) * inv_std[c]) + beta[c] with the float
  /// inv_std = 1.0f / sqrt(running_var[c] + eps). Nothing is updated. y may alias x.
  virtual void batch_norm_forward_inference(const batch_norm_shape& s, const batch_norm_options& o,
                                            const float* x, const float* gamma, const float* beta,
                                            const float* running_mean, const float* running_var,
                                            float* y) = 0;
  /// Gradients of batch_norm_forward_train (the batch statistics' own dependence on x included):
  /// with xhat = (x - saved_mean) * saved_inv_std and M = N S, per channel dbeta = sum dy and
  /// dgamma = sum dy xhat (accumulated in double), and
  /// dx = (gamma inv_std) * (dy - dbeta / M - xhat * (dgamma / M)). dx may alias dy.
  virtual void batch_norm_backward(const batch_norm_shape& s, const float* x, const float* dy,
                                   const float* gamma, const float* saved_mean,
                                   const float* saved_inv_std, float* dx, float* dgamma,
                                   float* dbeta) = 0;

  // --- fused optimizer updates (elementwise, so sharding never changes the result) --------
  /// With g' = grad_scale * g + weight_decay * w:  v = momentum * v + g';  w -= lr * v.
  /// When momentum == 0, v is not read or written and may be nullptr.
  virtual void sgd_update(float* w, float* v, const float* g, std::size_t n, float grad_scale,
                          const sgd_options& opt) = 0;

  /// Adam step number t (1-based) with g' = grad_scale * g + weight_decay * w:
  /// m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;
  /// w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
  /// With opt.decoupled (AdamW): first w *= d, with the float d = 1 - lr * weight_decay computed
  /// in double, then the same step with g' = grad_scale * g.
  virtual void adam_update(float* w, float* m, float* v, const float* g, std::size_t n,
                           float grad_scale, std::int64_t t, const adam_options& opt) = 0;

 protected:
  math_precision precision_ = math_precision::fp32;
};

/// Makes a backend. cuda (or auto on a host with a device) needs the CUDA plugin
/// (kernels/cuda_plugin.hpp); otherwise: errc::unsupported naming the reason. auto falls back to
/// cpu without a device. A cpu backend runs the kernel COACH_CPU_KERNEL names
/// (cpu_kernel_from_environment in kernels/cpu/cpu_backend.hpp; unset: the widest this CPU has);
/// a bad name is invalid_argument, a kernel this CPU lacks unsupported. `device`: the CUDA device
/// (an index among those this process sees, so CUDA_VISIBLE_DEVICES applies) a cuda backend runs
/// on; a cpu backend ignores it. Errors: invalid_argument for a device that does not exist.
result<std::unique_ptr<backend>> make_backend(backend_kind kind, int device = 0);

/// CUDA devices visible to this process (0 without the CUDA plugin or without a device).
int device_count() noexcept;

/// Sums one buffer per device across the devices, in place: afterwards every buffer holds the
/// sum (NCCL's all-reduce on CUDA devices). Made for a fixed list of backends, one per device;
/// each call passes their buffers in the same order.
class device_all_reduce {
 public:
  virtual ~device_all_reduce() = default;
  /// Enqueues the sum of bufs[i] (n floats of ranks[i]'s memory) on each backend's own stream
  /// and returns; the backends' next ops see the sum. Throws kernels::cuda_error on failure.
  virtual void sum(std::span<float* const> bufs, std::size_t n) = 0;
};

/// A device_all_reduce over `ranks` (CUDA backends on distinct devices; one is a group of one).
/// Errors: unsupported (a host backend, no CUDA plugin, a plugin without NCCL), invalid_argument
/// (two backends on one device), internal (NCCL could not set the group up).
result<std::unique_ptr<device_all_reduce>> make_device_all_reduce(std::span<backend* const> ranks);

/// Backends this program can make: "cpu", or "cpu,cuda" when the CUDA plugin loads.
std::string_view compiled_backends() noexcept;

/// True when the CUDA plugin loads and a device is visible.
bool cuda_device_present() noexcept;

}  // namespace coach::kernels
