#include "kernels/cuda/cuda_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/enforce.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_error.hpp"
#include "kernels/cuda/cuda_kernels.hpp"
#include "kernels/cuda/cudnn_conv.hpp"

namespace coach::kernels {
namespace {

/// Floats per staging buffer (4 MiB): large enough that a copy runs near the bus's speed, small
/// enough that each of the many backends of a process (one per worker) pins little memory.
constexpr std::size_t staging_floats = std::size_t{1} << 20;
/// Smallest staging allocation: the many small uploads of parameter pieces share one size.
constexpr std::size_t min_staging_floats = std::size_t{1} << 14;
/// Blocks per SM of the grid-stride kernels: 8 blocks of 256 threads fill an SM's 2048 threads.
constexpr int blocks_per_sm = 8;

struct device_probe {
  int count = 0;
  std::string reason;  ///< why count is 0
};

const device_probe& probe() noexcept {
  // Devices cannot appear in a running process (the runtime reads CUDA_VISIBLE_DEVICES once),
  // so one probe serves every caller; a static's initialization is thread-safe.
  static const device_probe p = [] {
    device_probe d;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      d.reason = "cudaGetDeviceCount: " + detail::describe(e);
      return d;
    }
    d.count = n;
    if (n == 0) d.reason = "cudaGetDeviceCount found 0 devices";
    return d;
  }();
  return p;
}

}  // namespace

int cuda_device_count() noexcept {
  return probe().count;
}

std::string_view cuda_unavailable_reason() noexcept {
  return probe().reason;
}

// --- life cycle -----------------------------------------------------------------------------

result<std::unique_ptr<cuda_backend>> cuda_backend::make(int device) {
  const int count = cuda_device_count();
  if (count == 0)
    return fail(errc::unsupported,
                "no CUDA device visible to this process ({}); use backend cpu, or auto to fall "
                "back to it",
                cuda_unavailable_reason());
  if (device < 0 || device >= count)
    return fail(errc::invalid_argument,
                "CUDA device {} does not exist: this process sees {} device(s) "
                "(CUDA_VISIBLE_DEVICES applies)",
                device, count);
  try {
    return std::unique_ptr<cuda_backend>(new cuda_backend(device));
  } catch (const cuda_error& e) {
    return std::unexpected(e.error());
  }
}

cuda_backend::cuda_backend(int device) : device_(device) {
  try {
    activate();
    int sms = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_),
          "cudaDeviceGetAttribute(multiProcessorCount)");
    max_blocks_ = std::max(1, sms * blocks_per_sm);
    // Non-blocking: the stream never waits for work on the legacy default stream of others.
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    detail::check_cublas(cublasCreate(&blas_), device_, "cublasCreate");
    detail::check_cublas(cublasSetStream(blas_, stream_), device_, "cublasSetStream");
    // FP32 throughout: the default math mode never rounds inputs to TF32, which would put GEMM
    // results far outside the float error bound the tests (and the cpu backend) hold to.
    detail::check_cublas(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH), device_,
                         "cublasSetMathMode");
    for (auto& buf : staging_)
      check(cudaEventCreateWithFlags(&buf.done, cudaEventDisableTiming),
            "cudaEventCreateWithFlags");
    check(cudaEventCreateWithFlags(&labels_done_, cudaEventDisableTiming),
          "cudaEventCreateWithFlags");
    check(cudaMalloc(reinterpret_cast<void**>(&partials_),
                     sizeof(double) * std::size_t(detail::cuda_max_partials)),
          "cudaMalloc (reduction scratch)");
    check(cudaMalloc(reinterpret_cast<void**>(&results_dev_), sizeof(results)),
          "cudaMalloc (results)");
    check(cudaHostAlloc(reinterpret_cast<void**>(&results_host_), sizeof(results),
                        cudaHostAllocDefault),
          "cudaHostAlloc (results)");
  } catch (...) {
    release();
    throw;
  }
}

cuda_backend::~cuda_backend() {
  release();
}

void cuda_backend::release() noexcept {
  // Errors are ignored here: there is nobody to report them to, and each release below is
  // independent of the others. Pending work finishes first, as it may still use the buffers.
  (void)cudaSetDevice(device_);
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  dnn_.reset();
  for (auto*& p : bf16_) {
    if (p != nullptr) (void)cudaFree(p);
    p = nullptr;
  }
  bf16_size_[0] = bf16_size_[1] = 0;
  if (copy_stream_ != nullptr) {
    (void)cudaStreamSynchronize(copy_stream_);
    (void)cudaStreamDestroy(copy_stream_);
    copy_stream_ = nullptr;
  }
  if (copy_after_ != nullptr) (void)cudaEventDestroy(copy_after_);
  copy_after_ = nullptr;
  for (auto& s : staging_) {
    if (s.host != nullptr) (void)cudaFreeHost(s.host);
    if (s.done != nullptr) (void)cudaEventDestroy(s.done);
    s = staging_buffer{};
  }
  if (labels_host_ != nullptr) (void)cudaFreeHost(labels_host_);
  if (labels_dev_ != nullptr) (void)cudaFree(labels_dev_);
  if (labels_done_ != nullptr) (void)cudaEventDestroy(labels_done_);
  if (row_loss_ != nullptr) (void)cudaFree(row_loss_);
  if (partials_ != nullptr) (void)cudaFree(partials_);
  if (results_dev_ != nullptr) (void)cudaFree(results_dev_);
  if (results_host_ != nullptr) (void)cudaFreeHost(results_host_);
  if (columns_ != nullptr) (void)cudaFree(columns_);
  if (parts_ != nullptr) (void)cudaFree(parts_);
  if (blas_ != nullptr) (void)cublasDestroy(blas_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  labels_host_ = nullptr;
  labels_dev_ = nullptr;
  labels_done_ = nullptr;
  labels_capacity_ = 0;
  row_loss_ = nullptr;
  row_loss_capacity_ = 0;
  partials_ = nullptr;
  results_dev_ = nullptr;
  results_host_ = nullptr;
  columns_ = nullptr;
  columns_capacity_ = 0;
  parts_ = nullptr;
  parts_capacity_ = 0;
  blas_ = nullptr;
  stream_ = nullptr;
  (void)cudaGetLastError();
}

void cuda_backend::activate() {
  check(cudaSetDevice(device_), "cudaSetDevice");
}

void cuda_backend::check(int status, std::string_view what) const {
  detail::check_cuda(static_cast<cudaError_t>(status), device_, what);
}

void cuda_backend::synchronize() {
  activate();
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

float* cuda_backend::alloc_host(std::size_t n) {
  activate();
  void* p = nullptr;
  check(cudaMallocHost(&p, std::max<std::size_t>(n, 1) * sizeof(float)),
        coach::format("cudaMallocHost of {} bytes", n * sizeof(float)));
  return static_cast<float*>(p);
}

void cuda_backend::free_host(float* p) noexcept {
  if (p == nullptr) return;
  (void)cudaSetDevice(device_);
  (void)cudaFreeHost(p);
}

void cuda_backend::download_async(float* host_dst, const float* src, std::size_t n) {
  activate();
  if (copy_stream_ == nullptr) {
    check(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking),
          "cudaStreamCreateWithFlags (copies)");
    check(cudaEventCreateWithFlags(&copy_after_, cudaEventDisableTiming),
          "cudaEventCreateWithFlags (copies)");
  }
  if (n == 0) return;
  // The wait takes the event as recorded now: one event serves every copy.
  check(cudaEventRecord(copy_after_, stream_), "cudaEventRecord (download_async)");
  check(cudaStreamWaitEvent(copy_stream_, copy_after_, 0), "cudaStreamWaitEvent (download_async)");
  check(cudaMemcpyAsync(host_dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, copy_stream_),
        "cudaMemcpyAsync (download_async)");
}

void cuda_backend::finish_downloads() {
  if (copy_stream_ == nullptr) return;
  activate();
  check(cudaStreamSynchronize(copy_stream_), "cudaStreamSynchronize (downloads)");
}

// --- memory ---------------------------------------------------------------------------------

float* cuda_backend::alloc(std::size_t n) {
  COACH_ENFORCE(n <= std::numeric_limits<std::size_t>::max() / sizeof(float),
                "alloc size overflows");
  activate();
  const std::size_t bytes = std::max<std::size_t>(n, 1) * sizeof(float);
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), coach::format("cudaMalloc of {} bytes", bytes));
  // Zeroed on this backend's stream: ordered before every later op and copy of the backend.
  const cudaError_t e = cudaMemsetAsync(p, 0, bytes, stream_);
  if (e != cudaSuccess) {
    (void)cudaFree(p);
    check(e, "cudaMemsetAsync (alloc)");
  }
  return static_cast<float*>(p);
}

void cuda_backend::free(float* p) noexcept {
  if (p == nullptr) return;
  // Ops enqueued on this backend's stream may still read or write p: they finish first. A
  // failure cannot be reported from a noexcept function, and leaves nothing to undo.
  (void)cudaSetDevice(device_);
  (void)cudaStreamSynchronize(stream_);
  (void)cudaFree(p);
  (void)cudaGetLastError();
}

cuda_backend::staging_buffer& cuda_backend::take_staging(std::size_t floats) {
  staging_buffer& s = staging_[next_staging_];
  next_staging_ ^= 1;
  // The buffer's last copy must be over before the host writes or reads it again.
  check(cudaEventSynchronize(s.done), "cudaEventSynchronize (staging buffer)");
  if (s.capacity < floats) {
    if (s.host != nullptr) check(cudaFreeHost(s.host), "cudaFreeHost (staging buffer)");
    s.host = nullptr;
    s.capacity = 0;
    const std::size_t want = std::min(staging_floats, std::max(floats, min_staging_floats));
    check(cudaHostAlloc(reinterpret_cast<void**>(&s.host), want * sizeof(float),
                        cudaHostAllocDefault),
          coach::format("cudaHostAlloc of {} bytes (staging buffer)", want * sizeof(float)));
    s.capacity = want;
  }
  return s;
}

void cuda_backend::upload(float* dst, const float* host_src, std::size_t n) {
  activate();
  for (std::size_t off = 0; off < n; off += staging_floats) {
    const std::size_t len = std::min(staging_floats, n - off);
    staging_buffer& s = take_staging(len);
    std::memcpy(s.host, host_src + off, len * sizeof(float));
    check(cudaMemcpyAsync(dst + off, s.host, len * sizeof(float), cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync (upload)");
    check(cudaEventRecord(s.done, stream_), "cudaEventRecord (upload)");
  }
}

void cuda_backend::copy(float* dst, const float* src, std::size_t n) {
  activate();
  if (n > 0)
    check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync (copy)");
}

void cuda_backend::download(float* host_dst, const float* src, std::size_t n) {
  activate();
  if (n == 0) {
    synchronize();
    return;
  }
  // Pipelined through the two staging buffers: while the device copies chunk i + 1, the host
  // copies chunk i out of the other buffer.
  staging_buffer* prev = nullptr;
  std::size_t prev_off = 0, prev_len = 0;
  auto drain = [&] {
    check(cudaEventSynchronize(prev->done), "cudaEventSynchronize (download)");
    std::memcpy(host_dst + prev_off, prev->host, prev_len * sizeof(float));
  };
  for (std::size_t off = 0; off < n; off += staging_floats) {
    const std::size_t len = std::min(staging_floats, n - off);
    staging_buffer& s = take_staging(len);
    check(cudaMemcpyAsync(s.host, src + off, len * sizeof(float), cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync (download)");
    check(cudaEventRecord(s.done, stream_), "cudaEventRecord (download)");
    if (prev != nullptr) drain();
    prev = &s;
    prev_off = off;
    prev_len = len;
  }
  drain();
}

const std::int32_t* cuda_backend::device_labels(const std::int32_t* labels, int rows) {
  const std::size_t n = std::size_t(rows);
  // The copy out of the pinned buffer by the previous call must be over before it is rewritten.
  check(cudaEventSynchronize(labels_done_), "cudaEventSynchronize (labels)");
  if (labels_capacity_ < n) {
    if (labels_host_ != nullptr) check(cudaFreeHost(labels_host_), "cudaFreeHost (labels)");
    if (labels_dev_ != nullptr) check(cudaFree(labels_dev_), "cudaFree (labels)");
    labels_host_ = nullptr;
    labels_dev_ = nullptr;
    labels_capacity_ = 0;
    const std::size_t want = std::max<std::size_t>(n, 1024);
    check(cudaHostAlloc(reinterpret_cast<void**>(&labels_host_), want * sizeof(std::int32_t),
                        cudaHostAllocDefault),
          "cudaHostAlloc (labels)");
    check(cudaMalloc(reinterpret_cast<void**>(&labels_dev_), want * sizeof(std::int32_t)),
          "cudaMalloc (labels)");
    labels_capacity_ = want;
  }
  std::memcpy(labels_host_, labels, n * sizeof(std::int32_t));
  check(cudaMemcpyAsync(labels_dev_, labels_host_, n * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                        stream_),
        "cudaMemcpyAsync (labels)");
  check(cudaEventRecord(labels_done_, stream_), "cudaEventRecord (labels)");
  return labels_dev_;
}

const cuda_backend::results& cuda_backend::fetch_results() {
  check(cudaMemcpyAsync(results_host_, results_dev_, sizeof(results), cudaMemcpyDeviceToHost,
                        stream_),
        "cudaMemcpyAsync (result)");
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (result)");
  return *results_host_;
}

// --- dense algebra --------------------------------------------------------------------------

void cuda_backend::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                        const float* a, int lda, const float* b, int ldb, float beta, float* c,
                        int ldc) {
  COACH_ENFORCE(m >= 0 && n >= 0 && k >= 0, "gemm dimensions must be >= 0");
  if (m == 0 || n == 0) return;
  const int a_cols = trans_a ? m : k;
  const int b_cols = trans_b ? k : n;
  COACH_ENFORCE(lda >= a_cols && ldb >= b_cols && ldc >= n,
                "gemm leading dimension smaller than the row length");
  activate();
  const detail::launch l{stream_, max_blocks_};
  if (k == 0) {  // op(A) * op(B) is all zeros; cuBLAS is not asked to handle an empty product
    if (beta != 1.0f) check(detail::launch_scale_matrix(l, c, m, n, ldc, beta), "scale (gemm)");
    return;
  }
  // A row-major matrix is its transpose in column-major terms, so the row-major C = op(A) op(B)
  // is the column-major C^T = op(B)^T op(A)^T: swap the operands, keep each one's transpose flag.
  const auto op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (precision_ == math_precision::fp32) {
    detail::check_cublas(
        cublasSgemm(blas_, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc), device_,
        coach::format("cublasSgemm (m={} n={} k={} trans_a={} trans_b={})", m, n, k, trans_a,
                      trans_b));
    return;
  }
  const auto in = operands(a, std::size_t(trans_a ? k - 1 : m - 1) * lda + (trans_a ? m : k), b,
                           std::size_t(trans_b ? n - 1 : k - 1) * ldb + (trans_b ? k : n));
  detail::check_cublas(
      cublasGemmEx(blas_, op_b, op_a, n, m, k, &alpha, in.b, cudaDataType_t(in.type), ldb, in.a,
                   cudaDataType_t(in.type), lda, &beta, c, CUDA_R_32F, ldc,
                   cublasComputeType_t(in.compute), CUBLAS_GEMM_DEFAULT),
      device_,
      coach::format("cublasGemmEx {} (m={} n={} k={} trans_a={} trans_b={})", to_string(precision_),
                    m, n, k, trans_a, trans_b));
}

cuda_backend::product_inputs cuda_backend::operands(const float* a, std::size_t a_extent,
                                                    const float* b, std::size_t b_extent) {
  if (precision_ != math_precision::bf16)
    return {a, b, int(CUDA_R_32F), int(detail::compute_type(precision_))};
  const detail::launch l{stream_, max_blocks_};
  const float* src[2] = {a, b};
  const std::size_t n[2] = {a_extent, b_extent};
  for (int i = 0; i < 2; ++i) {
    if (bf16_size_[i] < n[i]) {
      // The stream may still read the old copy: free it after the work enqueued so far.
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (bf16 scratch)");
      if (bf16_[i] != nullptr) (void)cudaFree(bf16_[i]);
      bf16_[i] = nullptr;
      bf16_size_[i] = 0;
      check(cudaMalloc(reinterpret_cast<void**>(&bf16_[i]), n[i] * sizeof(std::uint16_t)),
            coach::format("cudaMalloc of {} bytes (bf16 scratch)", n[i] * sizeof(std::uint16_t)));
      bf16_size_[i] = n[i];
    }
    check(detail::launch_to_bf16(l, src[i], bf16_[i], n[i]), "to_bf16 kernel launch");
  }
  return {bf16_[0], bf16_[1], int(CUDA_R_16BF), int(CUBLAS_COMPUTE_32F)};
}

void cuda_backend::bias_add(float* y, const float* bias, int rows, int cols) {
  COACH_ENFORCE(rows >= 0 && cols >= 0, "bias_add dimensions must be >= 0");
  activate();
  check(detail::launch_bias_add({stream_, max_blocks_}, y, bias, rows, cols),
        "bias_add kernel launch");
}

void cuda_backend::column_sum(const float* x, int rows, int cols, float beta, float* out) {
  COACH_ENFORCE(rows >= 0 && cols >= 0, "column_sum dimensions must be >= 0");
  activate();
  check(detail::launch_column_sum({stream_, max_blocks_}, x, rows, cols, beta, out),
        "column_sum kernel launch");
}

void cuda_backend::relu(const float* x, float* y, std::size_t n) {
  activate();
  check(detail::launch_relu({stream_, max_blocks_}, x, y, n), "relu kernel launch");
}

void cuda_backend::relu_grad(const float* y, const float* dy, float* dx, std::size_t n) {
  activate();
  check(detail::launch_relu_grad({stream_, max_blocks_}, y, dy, dx, n), "relu_grad kernel launch");
}

double cuda_backend::softmax_xent(const float* logits, const std::int32_t* labels, int rows,
                                  int cols, float* dlogits) {
  COACH_ENFORCE(rows >= 0 && cols > 0, "softmax_xent needs rows >= 0 and cols > 0");
  if (rows == 0) return 0.0;
  // Checked on the host, where the labels are: a label out of range would make the kernel read
  // outside its row.
  for (int r = 0; r < rows; ++r)
    COACH_ENFORCE(labels[r] >= 0 && labels[r] < cols, "softmax_xent label out of range");
  activate();
  const detail::launch l{stream_, max_blocks_};
  const std::int32_t* dev_labels = device_labels(labels, rows);
  if (row_loss_capacity_ < std::size_t(rows)) {
    if (row_loss_ != nullptr) check(cudaFree(row_loss_), "cudaFree (row losses)");
    row_loss_ = nullptr;
    row_loss_capacity_ = 0;
    const std::size_t want = std::max<std::size_t>(std::size_t(rows), 1024);
    check(cudaMalloc(reinterpret_cast<void**>(&row_loss_), want * sizeof(double)),
          "cudaMalloc (row losses)");
    row_loss_capacity_ = want;
  }
  check(detail::launch_softmax_xent(l, logits, dev_labels, rows, cols, dlogits, row_loss_),
        "softmax_xent kernel launch");
  check(detail::launch_sum_doubles(l, row_loss_, std::size_t(rows), &results_dev_->sum),
        "row loss sum kernel launch");
  return fetch_results().sum;
}

std::int64_t cuda_backend::count_correct(const float* logits, const std::int32_t* labels, int rows,
                                         int cols) {
  COACH_ENFORCE(rows >= 0 && cols > 0, "count_correct needs rows >= 0 and cols > 0");
  if (rows == 0) return 0;
  activate();
  const std::int32_t* dev_labels = device_labels(labels, rows);
  check(detail::launch_count_correct({stream_, max_blocks_}, logits, dev_labels, rows, cols,
                                     &results_dev_->count),
        "count_correct kernel launch");
  return static_cast<std::int64_t>(fetch_results().count);
}

void cuda_backend::axpy(std::size_t n, float alpha, const float* x, float* y) {
  activate();
  check(detail::launch_axpy({stream_, max_blocks_}, n, alpha, x, y), "axpy kernel launch");
}

void cuda_backend::scale(std::size_t n, float alpha, float* x) {
  activate();
  check(detail::launch_scale({stream_, max_blocks_}, n, alpha, x), "scale kernel launch");
}

double cuda_backend::sum(const float* x, std::size_t n) {
  activate();
  check(detail::launch_sum({stream_, max_blocks_}, x, n, false, partials_, &results_dev_->sum),
        "sum kernel launch");
  return fetch_results().sum;
}

double cuda_backend::sum_squares(const float* x, std::size_t n) {
  activate();
  check(detail::launch_sum({stream_, max_blocks_}, x, n, true, partials_, &results_dev_->sum),
        "sum_squares kernel launch");
  return fetch_results().sum;
}

// --- fused optimizer updates ----------------------------------------------------------------

void cuda_backend::sgd_update(float* w, float* v, const float* g, std::size_t n, float grad_scale,
                              const sgd_options& opt) {
  COACH_ENFORCE(opt.momentum == 0.0f || v != nullptr,
                "sgd_update with momentum needs a velocity buffer");
  activate();
  check(detail::launch_sgd_update({stream_, max_blocks_}, w, v, g, n, grad_scale, opt.learning_rate,
                                  opt.momentum, opt.weight_decay),
        "sgd_update kernel launch");
}

void cuda_backend::adam_update(float* w, float* m, float* v, const float* g, std::size_t n,
                               float grad_scale, std::int64_t t, const adam_options& opt) {
  COACH_ENFORCE(t >= 1, "adam_update step numbers start at 1");
  // The cpu backend's constants, computed the same way, so both round identically.
  const double bc1 = 1.0 - std::pow(static_cast<double>(opt.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(opt.beta2), static_cast<double>(t));
  detail::adam_constants c;
  c.grad_scale = grad_scale;
  c.step = static_cast<float>(static_cast<double>(opt.learning_rate) / bc1);
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  c.beta1 = opt.beta1;
  c.beta2 = opt.beta2;
  c.epsilon = opt.epsilon;
  c.weight_decay = opt.weight_decay;
  c.decoupled = opt.decoupled;
  c.decay = static_cast<float>(1.0 - static_cast<double>(opt.learning_rate) *
                                         static_cast<double>(opt.weight_decay));
  activate();
  check(detail::launch_adam_update({stream_, max_blocks_}, w, m, v, g, n, c),
        "adam_update kernel launch");
}

}  // namespace coach::kernels
