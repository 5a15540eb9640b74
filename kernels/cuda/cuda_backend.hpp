#pragma once
// kernels::cuda_backend: the device implementation of kernels::backend, for one CUDA device.
// GEMM runs on cuBLAS (FP32, no TF32: results within BLAS's usual bound of the exact product);
// every other op is an own kernel (cuda_kernels.cu) that does the cpu backend's arithmetic in
// the cpu backend's order, so elementwise ops and optimizer updates agree with the cpu bit for bit
// and reductions agree to rounding (docs/cuda.md lists the tolerances the tests hold them to).
//
// Memory: alloc gives device memory (cudaMalloc, zeroed). upload copies the host data into a
// pinned staging buffer and enqueues the copy to the device, so it returns before the data has
// reached the device and the caller may reuse its host buffer at once; download enqueues the copy
// back and waits for it, i.e. for every op enqueued before. Large copies go through two staging
// buffers of 4 MiB in turn, so the device copies one chunk while the host fills or drains the
// other. Integer labels (host memory, as backend.hpp says) go through a pinned buffer too, into a
// device buffer reused across calls. Ops that return a number (softmax_xent, count_correct, sum,
// sum_squares) wait for their result; the rest only enqueue.
//
// Layers (cuda_backend_layers.cpp, cuda_layers.cu): convolution runs through cuDNN when the build
// has it (cudnn_conv.hpp; COACH_CUDNN=0 in the environment turns it off), else it is im2col of a
// chunk of images
// into a column workspace the object owns (up to max(one image, 2^23 floats = 32 MiB) per chunk,
// grown on demand and kept until the object dies), one strided-batched cublasSgemm per chunk for
// forward and backward data, and one cublasSgemm per image (in image order, accumulating) for the
// filter gradient. Pooling, col2im, dropout and the per-channel steps of batch norm do the cpu
// backend's arithmetic in its order; per-channel sums accumulate in double in a fixed tree order
// (one block per channel), so they agree with the cpu's to double rounding.
//
// Errors: preconditions (negative sizes, a label out of range) are COACH_ENFORCE'd as on the cpu.
// A failing CUDA or cuBLAS call throws kernels::cuda_error (cuda_error.hpp says why throwing, and
// what the codes mean); an error of a kernel that already ran surfaces at the next call that
// waits. Nothing in this class aborts the process on a CUDA error.
//
// Threads: the stream, the cuBLAS handle, the staging buffers and the scratch memory belong to the
// object; as for every backend, one thread at a time uses it. The thread may change between calls
// (CAF moves an actor between threads): every call makes the object's device current first.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "kernels/backend.hpp"

// The CUDA handle types, declared so that this header needs no CUDA include (cudaStream_t is
// CUstream_st*, cudaEvent_t CUevent_st*, cublasHandle_t cublasContext*).
struct CUstream_st;
struct CUevent_st;
struct cublasContext;

namespace coach::kernels::detail {
class cudnn_convolutions;
}

namespace coach::kernels {

/// Number of CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies); 0 when there is no
/// device or no usable driver. Probed on the first call, then cached.
int cuda_device_count() noexcept;

/// Why cuda_device_count() is 0, in words from the CUDA runtime ("" when a device is visible).
std::string_view cuda_unavailable_reason() noexcept;

/// The cuBLAS + own-kernels backend on one device. Made by make_backend(backend_kind::cuda)
/// (device 0) or cuda_backend::make(device).
class cuda_backend final : public backend {
 public:
  /// Makes a backend on `device` (an index below cuda_device_count()), with its own stream.
  /// Errors: unsupported (no device visible; the message says why), invalid_argument (no such
  /// device index), resource_exhausted / internal (the stream, cuBLAS or memory cannot be set up).
  static result<std::unique_ptr<cuda_backend>> make(int device = 0);

  /// Waits for pending work, then releases the stream, cuBLAS and every buffer of the object
  /// (memory from alloc stays the caller's to free). Never throws.
  ~cuda_backend() override;
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;

  /// "cuda".
  std::string_view name() const noexcept override { return "cuda"; }

  /// Allocates n zeroed floats of device memory (at least one, so every call returns a distinct
  /// pointer). Throws cuda_error (resource_exhausted) when the device is full.
  float* alloc(std::size_t n) override;
  /// Releases memory from alloc after the device has finished with it (nullptr is a no-op).
  void free(float* p) noexcept override;
  /// Copies n floats from host memory to the device through pinned staging; returns once the
  /// host data is staged (the copy itself is ordered before every later op of this backend).
  void upload(float* dst, const float* host_src, std::size_t n) override;
  void copy(float* dst, const float* src, std::size_t n) override;
  /// Copies n floats from the device to host memory, after every op enqueued before; returns
  /// when they are there. n == 0 only waits.
  void download(float* host_dst, const float* src, std::size_t n) override;

  /// See backend::gemm; cublasSgemm on the row-major operands (C^T = op(B)^T op(A)^T in cuBLAS's
  /// column-major terms). k == 0 only scales C (zeroes it when beta == 0), without cuBLAS.
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override;
  /// See backend::bias_add.
  void bias_add(float* y, const float* bias, int rows, int cols) override;
  /// See backend::column_sum. Rows are added in order, as on the cpu.
  void column_sum(const float* x, int rows, int cols, float beta, float* out) override;
  /// See backend::relu.
  void relu(const float* x, float* y, std::size_t n) override;
  /// See backend::relu_grad.
  void relu_grad(const float* y, const float* dy, float* dx, std::size_t n) override;
  /// See backend::tanh (tanhf: within 2 ulp of the cpu's std::tanh, not bitwise).
  void tanh(const float* x, float* y, std::size_t n) override;
  /// See backend::tanh_grad (bitwise as the cpu).
  void tanh_grad(const float* y, const float* dy, float* dx, std::size_t n) override;
  /// See backend::sigmoid (expf: within a few ulp of the cpu, not bitwise).
  void sigmoid(const float* x, float* y, std::size_t n) override;
  /// See backend::sigmoid_grad (bitwise as the cpu).
  void sigmoid_grad(const float* y, const float* dy, float* dx, std::size_t n) override;
  /// See backend::gelu (tanhf: within a few ulp of the cpu, not bitwise).
  void gelu(const float* x, float* y, std::size_t n) override;
  /// See backend::gelu_grad (tanhf: within a few ulp of the cpu, not bitwise).
  void gelu_grad(const float* x, const float* dy, float* dx, std::size_t n) override;
  /// See backend::softmax_xent. Labels are host memory; waits for the loss.
  double softmax_xent(const float* logits, const std::int32_t* labels, int rows, int cols,
                      float* dlogits) override;
  /// See backend::count_correct. Labels are host memory; ties go to the first largest logit.
  std::int64_t count_correct(const float* logits, const std::int32_t* labels, int rows,
                             int cols) override;
  /// See backend::axpy.
  void axpy(std::size_t n, float alpha, const float* x, float* y) override;
  /// See backend::scale.
  void scale(std::size_t n, float alpha, float* x) override;
  /// See backend::sum. Accumulated in double, in an order that depends on n only.
  double sum(const float* x, std::size_t n) override;
  /// See backend::sum_squares. As sum.
  double sum_squares(const float* x, std::size_t n) override;
  /// See backend::sgd_update.
  void sgd_update(float* w, float* v, const float* g, std::size_t n, float grad_scale,
                  const sgd_options& opt) override;
  /// See backend::adam_update. The bias corrections are computed in double on the host, once per
  /// call, exactly as the cpu backend computes them.
  void adam_update(float* w, float* m, float* v, const float* g, std::size_t n, float grad_scale,
                   std::int64_t t, const adam_options& opt) override;

  /// Allocates n zeroed int32 values of device memory (at least one). Throws cuda_error.
  std::int32_t* alloc_indices(std::size_t n) override;
  /// Releases memory from alloc_indices after the device has finished with it.
  void free_indices(std::int32_t* p) noexcept override;

  /// Convolutions through cuDNN with GEMM-like algorithms only (true), or with any
  /// deterministic one, Winograd and FFT included (false, the default: faster, but their
  /// transforms round beyond the GEMM bound the cpu-reference tests hold). No effect without cuDNN.
  void set_gemm_like_convolutions(bool on);
  /// The cuDNN algorithms this backend picked for s at its precision (cudnn_conv.hpp), or why
  /// none: "im2col" without cuDNN, "" before s ran.
  std::string describe_convolution(const conv2d_shape& s) const;

  /// See backend::conv2d_forward. Workspace: the column matrices of a chunk of images.
  void conv2d_forward(const conv2d_shape& s, const float* x, const float* w, const float* bias,
                      float* y) override;
  /// See backend::conv2d_backward_data; col2im gathers in the cpu's order.
  void conv2d_backward_data(const conv2d_shape& s, const float* dy, const float* w,
                            float* dx) override;
  /// See backend::conv2d_backward_filter; db sums in double per filter.
  void conv2d_backward_filter(const conv2d_shape& s, const float* x, const float* dy, float* dw,
                              float* db) override;
  /// See backend::max_pool2d_forward (bitwise as the cpu, indices included).
  void max_pool2d_forward(const pool2d_shape& s, const float* x, float* y,
                          std::int32_t* argmax) override;
  /// See backend::max_pool2d_backward (bitwise as the cpu).
  void max_pool2d_backward(const pool2d_shape& s, const float* dy, const std::int32_t* argmax,
                           float* dx) override;
  /// See backend::avg_pool2d_forward (bitwise as the cpu).
  void avg_pool2d_forward(const pool2d_shape& s, const float* x, float* y) override;
  /// See backend::avg_pool2d_backward (bitwise as the cpu).
  void avg_pool2d_backward(const pool2d_shape& s, const float* dy, float* dx) override;
  /// See backend::dropout_forward (bitwise as the cpu: the same mask and scale).
  void dropout_forward(const float* x, float* y, std::size_t n, float p, std::uint64_t seed,
                       std::uint64_t step) override;
  /// See backend::dropout_backward (bitwise as the cpu).
  void dropout_backward(const float* dy, float* dx, std::size_t n, float p, std::uint64_t seed,
                        std::uint64_t step) override;
  /// See backend::batch_norm_forward_train.
  void batch_norm_forward_train(const batch_norm_shape& s, const batch_norm_options& o,
                                const float* x, const float* gamma, const float* beta, float* y,
                                float* running_mean, float* running_var, float* saved_mean,
                                float* saved_inv_std) override;
  /// See backend::batch_norm_forward_inference (bitwise as the cpu).
  void batch_norm_forward_inference(const batch_norm_shape& s, const batch_norm_options& o,
                                    const float* x, const float* gamma, const float* beta,
                                    const float* running_mean, const float* running_var,
                                    float* y) override;
  /// See backend::batch_norm_backward.
  void batch_norm_backward(const batch_norm_shape& s, const float* x, const float* dy,
                           const float* gamma, const float* saved_mean, const float* saved_inv_std,
                           float* dx, float* dgamma, float* dbeta) override;

  /// The device index this backend runs on.
  int device() const noexcept override { return device_; }
  /// The stream every op of this backend is enqueued on (a cudaStream_t). Work enqueued on it
  /// by others (an NCCL all-reduce, say) is ordered with this backend's ops.
  CUstream_st* stream() const noexcept { return stream_; }
  /// Waits until every op enqueued so far has finished. Throws cuda_error when one failed.
  void synchronize() override;
  /// Pinned host memory (cudaMallocHost).
  float* alloc_host(std::size_t n) override;
  void free_host(float* p) noexcept override;
  /// On the copy stream, after an event recorded on the compute stream: the copy runs while
  /// the ops enqueued after it compute.
  void download_async(float* host_dst, const float* src, std::size_t n) override;
  /// Waits for the copy stream.
  void finish_downloads() override;

 private:
  /// A pinned host buffer and the event recorded after the last copy that used it.
  struct staging_buffer {
    float* host = nullptr;
    std::size_t capacity = 0;  ///< floats
    CUevent_st* done = nullptr;
  };
  /// Device results of the ops that return a number, fetched through a pinned twin.
  struct results {
    double sum = 0.0;
    unsigned long long count = 0;
  };

  /// Sets everything up on `device`; throws cuda_error (after releasing what it made).
  explicit cuda_backend(int device);
  /// Releases every resource held (the destructor's and the failed constructor's work).
  void release() noexcept;
  /// Makes this object's device current on the calling thread.
  void activate();
  /// Throws cuda_error naming `what` when `status` (a cudaError_t) is not cudaSuccess.
  void check(int status, std::string_view what) const;
  /// The next staging buffer, once its last copy has finished, holding at least `floats`.
  staging_buffer& take_staging(std::size_t floats);
  /// Device copy of `rows` host labels (pinned staging, then an async copy on the stream).
  const std::int32_t* device_labels(const std::int32_t* labels, int rows);
  /// Copies results_dev_ to results_host_ after the work enqueued so far, waits, returns it.
  const results& fetch_results();
  /// The convolution workspace, at least `floats` long (device memory).
  float* columns(std::size_t floats);
  /// The per-image filter gradients of a chunk, at least `floats` long (device memory).
  float* filter_parts(std::size_t floats);
  /// Images per chunk of a convolution: as many as fit the workspace cap, at least one.
  int conv_chunk(const conv2d_shape& s) const;
  /// The inputs of a product at precision() (tf32 or bf16): under tf32 the floats themselves
  /// (cuBLAS's FAST_TF32 rounds them to nearest, as the cpu does); under bf16 bfloat16 copies in
  /// the backend's scratch, rounded to nearest-even here (cuBLAS's FAST_16BF does not round as
  /// the cpu does: measured on an H200, its products sat between TF32's and float's), with the
  /// data type (cudaDataType_t) and compute type (cublasComputeType_t) to pass with them.
  /// `a_extent`, `b_extent`: the floats each operand spans.
  struct product_inputs {
    const void* a;
    const void* b;
    int type;
    int compute;
  };
  product_inputs operands(const float* a, std::size_t a_extent, const float* b,
                          std::size_t b_extent);
  /// C_i = op(A_i) op(B_i) for i < count (row-major, element strides between the matrices, 0
  /// repeats one) at precision(): cuBLAS's strided-batched product, as gemm.
  void batched_product(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
                       long long stride_a, const float* b, int ldb, long long stride_b, float* c,
                       int ldc, long long stride_c, int count);
  /// The cuDNN convolutions, made on first use; null without cuDNN (not built, turned off, or it
  /// failed to start: then logged once, and the im2col path serves).
  detail::cudnn_convolutions* dnn();
  /// At bf16, rounds n floats of a convolution's output to bfloat16 in place (the im2col path;
  /// cuDNN's bf16 output is rounded already).
  void round_output(float* out, std::size_t n);

  int device_ = 0;
  int max_blocks_ = 1;
  CUstream_st* stream_ = nullptr;
  CUstream_st* copy_stream_ = nullptr;  ///< download_async's copies, made on first use
  CUevent_st* copy_after_ = nullptr;    ///< recorded on stream_ before each such copy
  cublasContext* blas_ = nullptr;
  staging_buffer staging_[2];
  int next_staging_ = 0;
  std::int32_t* labels_host_ = nullptr;  ///< pinned
  std::int32_t* labels_dev_ = nullptr;
  std::size_t labels_capacity_ = 0;
  CUevent_st* labels_done_ = nullptr;  ///< recorded after the copy out of labels_host_
  double* row_loss_ = nullptr;         ///< device, one double per row of softmax_xent
  std::size_t row_loss_capacity_ = 0;
  double* partials_ = nullptr;       ///< device, detail::cuda_max_partials doubles
  results* results_dev_ = nullptr;   ///< device
  results* results_host_ = nullptr;  ///< pinned
  float* columns_ = nullptr;         ///< device, the convolution workspace
  std::size_t columns_capacity_ = 0;
  float* parts_ = nullptr;  ///< device, conv2d_backward_filter's per-image gradients
  std::size_t parts_capacity_ = 0;
  std::uint16_t* bf16_[2] = {nullptr, nullptr};  ///< device, bfloat16 copies of product inputs
  std::size_t bf16_size_[2] = {0, 0};
  std::unique_ptr<detail::cudnn_convolutions> dnn_;
  bool dnn_failed_ = false;
  bool gemm_like_convolutions_ = false;
};

}  // namespace coach::kernels
