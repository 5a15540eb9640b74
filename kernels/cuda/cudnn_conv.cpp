#include "kernels/cuda/cudnn_conv.hpp"

#include <cstdlib>
#include <cstring>

#include "common/format.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_error.hpp"
#include "kernels/cuda/cuda_kernels.hpp"

#ifdef COACH_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace coach::kernels::detail {

bool cudnn_convolutions::enabled() noexcept {
#ifdef COACH_HAVE_CUDNN
  static const bool on = [] {
    const char* v = std::getenv("COACH_CUDNN");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
#else
  return false;
#endif
}

cudnn_convolutions::key cudnn_convolutions::key_of(const conv2d_shape& s, math_precision p) const {
  return {s.batch,    s.channels, s.height, s.width, s.filters, s.kernel_h, s.kernel_w,
          s.stride_h, s.stride_w, s.pad_h,  s.pad_w, int(p),    gemm_like_};
}

#ifdef COACH_HAVE_CUDNN

namespace {

/// Workspace cuDNN may ask for, at most (a larger need takes the next algorithm in line).
constexpr std::size_t max_workspace = std::size_t{512} << 20;

void check_cudnn(cudnnStatus_t status, int device, std::string_view what) {
  if (status == CUDNN_STATUS_SUCCESS) [[likely]]
    return;
  const errc code = status == CUDNN_STATUS_ALLOC_FAILED ? errc::resource_exhausted : errc::internal;
  throw cuda_error(coach::error{code, coach::format("cuda: {} on device {} failed: {}", what,
                                                    device, cudnnGetErrorString(status))});
}

cudnnHandle_t as_handle(void* h) {
  return static_cast<cudnnHandle_t>(h);
}

const char* fwd_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM:
      return "implicit gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
      return "implicit precomp gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
      return "gemm";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT:
      return "direct";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
      return "fft";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING:
      return "fft tiling";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD:
      return "winograd";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
      return "winograd nonfused";
    default:
      return "?";
  }
}

/// Whether an algorithm's math type keeps to precision p: fp32 never on tensor cores.
bool math_fits(cudnnMathType_t m, math_precision p) {
  if (p == math_precision::fp32) return m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
  return m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

/// Whether an algorithm sums products as a GEMM does (its rounding within the GEMM bound the
/// tests hold): FFT and Winograd transform the operands first and round otherwise.
bool gemm_like(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}
bool gemm_like(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}
bool gemm_like(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

/// The first of cuDNN's ranked candidates that ran, is deterministic (and GEMM-like when
/// `only_gemm`), fits p and the workspace.
template <class Perf>
const Perf* pick(const Perf* perf, int n, math_precision p, bool only_gemm) {
  for (int i = 0; i < n; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
        (!only_gemm || gemm_like(perf[i].algo)) && math_fits(perf[i].mathType, p) &&
        perf[i].memory <= max_workspace)
      return &perf[i];
  return nullptr;
}

}  // namespace

struct cudnn_convolutions::plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t fwd_conv = nullptr, data_conv = nullptr, filter_conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t data{};
  cudnnConvolutionBwdFilterAlgo_t filter{};
  std::size_t fwd_bytes = 0, data_bytes = 0, filter_bytes = 0;

  ~plan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    for (auto c : {fwd_conv, data_conv, filter_conv})
      if (c) cudnnDestroyConvolutionDescriptor(c);
  }
};

cudnn_convolutions::cudnn_convolutions(int device, cudaStream_t stream, int max_blocks)
    : device_(device), stream_(stream), max_blocks_(max_blocks) {
  cudnnHandle_t h = nullptr;
  check_cudnn(cudnnCreate(&h), device_, "cudnnCreate");
  handle_ = h;
  check_cudnn(cudnnSetStream(h, stream_), device_, "cudnnSetStream");
}

cudnn_convolutions::~cudnn_convolutions() {
  plans_.clear();
  if (workspace_ != nullptr) (void)cudaFree(workspace_);
  for (auto* p : halves_)
    if (p != nullptr) (void)cudaFree(p);
  if (handle_ != nullptr) (void)cudnnDestroy(as_handle(handle_));
}

cudnn_convolutions::plan& cudnn_convolutions::plan_for(const conv2d_shape& s, math_precision p) {
  auto& slot = plans_[key_of(s, p)];
  if (slot) return *slot;
  auto pl = std::make_unique<plan>();
  const auto h = as_handle(handle_);
  const auto type = p == math_precision::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  const auto math = p == math_precision::fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
  const int dev = device_;
  check_cudnn(cudnnCreateTensorDescriptor(&pl->x), dev, "cudnnCreateTensorDescriptor");
  check_cudnn(cudnnCreateTensorDescriptor(&pl->y), dev, "cudnnCreateTensorDescriptor");
  check_cudnn(cudnnCreateFilterDescriptor(&pl->w), dev, "cudnnCreateFilterDescriptor");
  check_cudnn(cudnnSetTensor4dDescriptor(pl->x, CUDNN_TENSOR_NCHW, type, s.batch, s.channels,
                                         s.height, s.width),
              dev, "cudnnSetTensor4dDescriptor (x)");
  check_cudnn(cudnnSetTensor4dDescriptor(pl->y, CUDNN_TENSOR_NCHW, type, s.batch, s.filters,
                                         s.out_h(), s.out_w()),
              dev, "cudnnSetTensor4dDescriptor (y)");
  check_cudnn(cudnnSetFilter4dDescriptor(pl->w, type, CUDNN_TENSOR_NCHW, s.filters, s.channels,
                                         s.kernel_h, s.kernel_w),
              dev, "cudnnSetFilter4dDescriptor");
  // One convolution descriptor per direction: each carries the math type of its algorithm.
  for (auto* c : {&pl->fwd_conv, &pl->data_conv, &pl->filter_conv}) {
    check_cudnn(cudnnCreateConvolutionDescriptor(c), dev, "cudnnCreateConvolutionDescriptor");
    check_cudnn(cudnnSetConvolution2dDescriptor(*c, s.pad_h, s.pad_w, s.stride_h, s.stride_w, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                dev, "cudnnSetConvolution2dDescriptor");
    check_cudnn(cudnnSetConvolutionMathType(*c, math), dev, "cudnnSetConvolutionMathType");
  }
  const std::string what =
      coach::format("convolution {}x{}x{}x{} -> {} filters {}x{} at {}", s.batch, s.channels,
                    s.height, s.width, s.filters, s.kernel_h, s.kernel_w, to_string(p));
  {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(h, pl->x, pl->w, pl->fwd_conv, pl->y,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf),
                dev, "cudnnGetConvolutionForwardAlgorithm_v7");
    const auto* best = pick(perf, n, p, gemm_like_);
    if (best == nullptr)
      throw cuda_error(coach::error{
          errc::unsupported, coach::format("cuda: cuDNN has no forward algorithm for {}", what)});
    pl->fwd = best->algo;
    pl->fwd_bytes = best->memory;
    check_cudnn(cudnnSetConvolutionMathType(pl->fwd_conv, best->mathType), dev,
                "cudnnSetConvolutionMathType");
  }
  {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0;
    check_cudnn(
        cudnnGetConvolutionBackwardDataAlgorithm_v7(
            h, pl->w, pl->y, pl->data_conv, pl->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf),
        dev, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    const auto* best = pick(perf, n, p, gemm_like_);
    if (best == nullptr)
      throw cuda_error(coach::error{
          errc::unsupported,
          coach::format("cuda: cuDNN has no deterministic backward-data algorithm for {}", what)});
    pl->data = best->algo;
    pl->data_bytes = best->memory;
    check_cudnn(cudnnSetConvolutionMathType(pl->data_conv, best->mathType), dev,
                "cudnnSetConvolutionMathType");
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int n = 0;
    check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                    h, pl->x, pl->y, pl->filter_conv, pl->w,
                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf),
                dev, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    const auto* best = pick(perf, n, p, gemm_like_);
    if (best == nullptr)
      throw cuda_error(coach::error{
          errc::unsupported,
          coach::format("cuda: cuDNN has no deterministic backward-filter algorithm for {}",
                        what)});
    pl->filter = best->algo;
    pl->filter_bytes = best->memory;
    check_cudnn(cudnnSetConvolutionMathType(pl->filter_conv, best->mathType), dev,
                "cudnnSetConvolutionMathType");
  }
  slot = std::move(pl);
  return *slot;
}

void* cudnn_convolutions::workspace(std::size_t bytes) {
  if (bytes <= workspace_bytes_) return workspace_;
  // The stream may still use the old workspace: free it only after the work enqueued so far.
  check_cuda(cudaStreamSynchronize(stream_), device_, "cudaStreamSynchronize (cuDNN workspace)");
  if (workspace_ != nullptr) (void)cudaFree(workspace_);
  workspace_ = nullptr;
  workspace_bytes_ = 0;
  check_cuda(cudaMalloc(&workspace_, bytes), device_,
             coach::format("cudaMalloc of {} MiB (cuDNN workspace)", bytes >> 20));
  workspace_bytes_ = bytes;
  return workspace_;
}

std::uint16_t* cudnn_convolutions::halves(int slot, std::size_t n) {
  if (n <= halves_size_[slot]) return halves_[slot];
  check_cuda(cudaStreamSynchronize(stream_), device_, "cudaStreamSynchronize (bf16 scratch)");
  if (halves_[slot] != nullptr) (void)cudaFree(halves_[slot]);
  halves_[slot] = nullptr;
  halves_size_[slot] = 0;
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&halves_[slot]), n * sizeof(std::uint16_t)),
             device_, coach::format("cudaMalloc of {} MiB (bf16 scratch)", (n * 2) >> 20));
  halves_size_[slot] = n;
  return halves_[slot];
}

void cudnn_convolutions::with_operands(
    math_precision p, const float* a, std::size_t na, const float* b, std::size_t nb, float* out,
    std::size_t nout, const std::function<void(const void*, const void*, void*)>& call) {
  if (p != math_precision::bf16) return call(a, b, out);
  const launch l{stream_, max_blocks_};
  auto* ha = halves(0, na);
  auto* hb = halves(1, nb);
  auto* hout = halves(2, nout);
  check_cuda(launch_to_bf16(l, a, ha, na), device_, "to_bf16 kernel launch");
  check_cuda(launch_to_bf16(l, b, hb, nb), device_, "to_bf16 kernel launch");
  call(ha, hb, hout);
  check_cuda(launch_from_bf16(l, hout, out, nout), device_, "from_bf16 kernel launch");
}

void cudnn_convolutions::forward(const conv2d_shape& s, math_precision p, const float* x,
                                 const float* w, float* y) {
  auto& pl = plan_for(s, p);
  void* ws = workspace(pl.fwd_bytes);
  with_operands(
      p, x, s.input_size(), w, s.weight_size(), y, s.output_size(),
      [&](const void* hx, const void* hw, void* hy) {
        const float alpha = 1.0f, beta = 0.0f;
        check_cudnn(cudnnConvolutionForward(as_handle(handle_), &alpha, pl.x, hx, pl.w, hw,
                                            pl.fwd_conv, pl.fwd, ws, pl.fwd_bytes, &beta, pl.y, hy),
                    device_, "cudnnConvolutionForward");
      });
}

void cudnn_convolutions::backward_data(const conv2d_shape& s, math_precision p, const float* dy,
                                       const float* w, float* dx) {
  auto& pl = plan_for(s, p);
  void* ws = workspace(pl.data_bytes);
  with_operands(p, dy, s.output_size(), w, s.weight_size(), dx, s.input_size(),
                [&](const void* hdy, const void* hw, void* hdx) {
                  const float alpha = 1.0f, beta = 0.0f;
                  check_cudnn(cudnnConvolutionBackwardData(as_handle(handle_), &alpha, pl.w, hw,
                                                           pl.y, hdy, pl.data_conv, pl.data, ws,
                                                           pl.data_bytes, &beta, pl.x, hdx),
                              device_, "cudnnConvolutionBackwardData");
                });
}

void cudnn_convolutions::backward_filter(const conv2d_shape& s, math_precision p, const float* x,
                                         const float* dy, float* dw) {
  auto& pl = plan_for(s, p);
  void* ws = workspace(pl.filter_bytes);
  with_operands(p, x, s.input_size(), dy, s.output_size(), dw, s.weight_size(),
                [&](const void* hx, const void* hdy, void* hdw) {
                  const float alpha = 1.0f, beta = 0.0f;
                  check_cudnn(cudnnConvolutionBackwardFilter(as_handle(handle_), &alpha, pl.x, hx,
                                                             pl.y, hdy, pl.filter_conv, pl.filter,
                                                             ws, pl.filter_bytes, &beta, pl.w, hdw),
                              device_, "cudnnConvolutionBackwardFilter");
                });
}

std::string cudnn_convolutions::describe(const conv2d_shape& s, math_precision p) const {
  const auto it = plans_.find(key_of(s, p));
  if (it == plans_.end()) return "";
  const auto& pl = *it->second;
  return coach::format("fwd {} ({}), data {}, filter {}", int(pl.fwd), fwd_name(pl.fwd),
                       int(pl.data), int(pl.filter));
}

#else  // no cuDNN in this build: never made (enabled() is false)

struct cudnn_convolutions::plan {};

cudnn_convolutions::cudnn_convolutions(int device, cudaStream_t stream, int max_blocks)
    : device_(device), stream_(stream), max_blocks_(max_blocks) {
  throw cuda_error(coach::error{errc::unsupported, "cuda: this build has no cuDNN"});
}
cudnn_convolutions::~cudnn_convolutions() = default;
cudnn_convolutions::plan& cudnn_convolutions::plan_for(const conv2d_shape&, math_precision) {
  throw cuda_error(coach::error{errc::unsupported, "cuda: this build has no cuDNN"});
}
void* cudnn_convolutions::workspace(std::size_t) {
  return nullptr;
}
std::uint16_t* cudnn_convolutions::halves(int, std::size_t) {
  return nullptr;
}
void cudnn_convolutions::with_operands(
    math_precision, const float*, std::size_t, const float*, std::size_t, float*, std::size_t,
    const std::function<void(const void*, const void*, void*)>&) {}
void cudnn_convolutions::forward(const conv2d_shape&, math_precision, const float*, const float*,
                                 float*) {}
void cudnn_convolutions::backward_data(const conv2d_shape&, math_precision, const float*,
                                       const float*, float*) {}
void cudnn_convolutions::backward_filter(const conv2d_shape&, math_precision, const float*,
                                         const float*, float*) {}
std::string cudnn_convolutions::describe(const conv2d_shape&, math_precision) const {
  return "";
}

#endif

}  // namespace coach::kernels::detail
