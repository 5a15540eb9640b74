// Eigen stays single-threaded: one worker or shard per thread is the unit of parallelism.
#define EIGEN_DONT_PARALLELIZE

#include "kernels/cpu/cpu_backend.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "common/enforce.hpp"
#include "kernels/cpu/cpu_gemm.hpp"

namespace coach::kernels {
namespace detail {

using row_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using matrix_map = Eigen::Map<row_matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
using const_matrix_map = Eigen::Map<const row_matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
using array_map = Eigen::Map<Eigen::ArrayXf>;
using const_array_map = Eigen::Map<const Eigen::ArrayXf>;

constexpr std::size_t alignment = 64;
/// Width of the fixed-length inner loops that g++ turns into vector code even at -O2.
constexpr std::size_t lanes = 8;

array_map arr(float* p, std::size_t n) {
  return array_map(p, Eigen::Index(n));
}
const_array_map arr(const float* p, std::size_t n) {
  return const_array_map(p, Eigen::Index(n));
}

/// Sum over i of term(x[i]) in double, in `lanes` interleaved accumulators (vectorizable without
/// reassociation, and the same order on every call).
template <class Term>
double lane_sum(const float* x, std::size_t n, Term term) {
  double acc[lanes] = {};
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    for (std::size_t j = 0; j < lanes; ++j) acc[j] += term(static_cast<double>(x[i + j]));
  double tail = 0.0;
  for (; i < n; ++i) tail += term(static_cast<double>(x[i]));
  double total = 0.0;
  for (double a : acc) total += a;
  return total + tail;
}

/// c = alpha * a * b + beta * c with Eigen's GEMM, never allocating a temporary for a, b or c.
template <class A, class B>
void gemm_into(const A& a, const B& b, float alpha, float beta, matrix_map& c) {
  if (beta == 0.0f) {
    c.noalias() = alpha * a * b;
    return;
  }
  if (beta != 1.0f) c *= beta;
  c.noalias() += alpha * a * b;
}

// The optimizer updates: one pass over memory, each element computed with the same IEEE
// operations in the same order as every other element (no approximations, no fused
// multiply-add: the library builds with -ffp-contract=off), so an update does not depend on
// where a call starts or how long it is, and AVX2 lanes give bitwise the scalar result. On the
// shard this loop is on the critical path of every step (ps_bench: the 1 MiB round spent ~20 %
// of its shard's CPU in it); AVX2 made it 1.9x faster than the former Eigen expression at 1 MiB
// (docs/performance.md). The clones are chosen once, at load time, by the CPU.
#define COACH_OPTIMIZER_CLONES __attribute__((target_clones("avx2", "default")))

COACH_OPTIMIZER_CLONES
void sgd_plain(float* __restrict w, const float* __restrict g, std::size_t n, float scale, float lr,
               float wd) {
  for (std::size_t i = 0; i < n; ++i) w[i] -= lr * (scale * g[i] + wd * w[i]);
}

COACH_OPTIMIZER_CLONES
void sgd_momentum(float* __restrict w, float* __restrict v, const float* __restrict g,
                  std::size_t n, float scale, float lr, float wd, float mu) {
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = mu * v[i] + (scale * g[i] + wd * w[i]);
    w[i] -= lr * v[i];
  }
}

struct adam_constants {
  float step, inv_sqrt_bc2, b1, b2, eps, wd;
  float decay;  ///< AdamW: w *= decay before the step (1 - lr * wd, rounded once)
};

COACH_OPTIMIZER_CLONES
void adam(float* __restrict w, float* __restrict m, float* __restrict v, const float* __restrict g,
          std::size_t n, float scale, const adam_constants& c) {
  const float one_minus_b1 = 1.0f - c.b1;
  const float one_minus_b2 = 1.0f - c.b2;
  for (std::size_t i = 0; i < n; ++i) {
    const float gp = scale * g[i] + c.wd * w[i];
    m[i] = c.b1 * m[i] + one_minus_b1 * gp;
    v[i] = c.b2 * v[i] + one_minus_b2 * (gp * gp);
    w[i] -= c.step * m[i] / (std::sqrt(v[i]) * c.inv_sqrt_bc2 + c.eps);
  }
}

// AdamW: the weight decay shrinks w before the step instead of entering the gradient. A loop
// of its own, so that Adam's stays exactly as it was.
COACH_OPTIMIZER_CLONES
void adamw(float* __restrict w, float* __restrict m, float* __restrict v, const float* __restrict g,
           std::size_t n, float scale, const adam_constants& c) {
  const float one_minus_b1 = 1.0f - c.b1;
  const float one_minus_b2 = 1.0f - c.b2;
  for (std::size_t i = 0; i < n; ++i) {
    const float wd = w[i] * c.decay;
    const float gp = scale * g[i];
    m[i] = c.b1 * m[i] + one_minus_b1 * gp;
    v[i] = c.b2 * v[i] + one_minus_b2 * (gp * gp);
    w[i] = wd - c.step * m[i] / (std::sqrt(v[i]) * c.inv_sqrt_bc2 + c.eps);
  }
}

#undef COACH_OPTIMIZER_CLONES

}  // namespace detail

// --- construction ---------------------------------------------------------------------------

std::string_view to_string(cpu_gemm g) noexcept {
  switch (g) {
    case cpu_gemm::best:
      return "auto";
    case cpu_gemm::eigen:
      return "eigen";
    case cpu_gemm::avx2_fma:
      return "avx2";
    case cpu_gemm::avx512:
      return "avx512";
  }
  return "?";
}

result<cpu_gemm> parse_cpu_kernel(std::string_view name) {
  for (cpu_gemm g : {cpu_gemm::best, cpu_gemm::avx512, cpu_gemm::avx2_fma, cpu_gemm::eigen})
    if (name == to_string(g)) return g;
  return fail(errc::invalid_argument, "{}: '{}' is not a CPU kernel (auto, avx512, avx2 or eigen)",
              cpu_kernel_variable, name);
}

cpu_features this_cpu() noexcept {
  return {detail::cpu_has_avx2_fma(), detail::cpu_has_avx512f()};
}

result<cpu_gemm> runnable_cpu_kernel(cpu_gemm g, cpu_features cpu) {
  const bool avx2 = cpu.avx2_fma, avx512 = cpu.avx512f;
  if (g == cpu_gemm::best)
    return avx512 ? cpu_gemm::avx512 : avx2 ? cpu_gemm::avx2_fma : cpu_gemm::eigen;
  if ((g == cpu_gemm::avx512 && !avx512) || (g == cpu_gemm::avx2_fma && !avx2))
    return fail(errc::unsupported, "{}={}: this CPU has no {} (it runs {})", cpu_kernel_variable,
                to_string(g), g == cpu_gemm::avx512 ? "AVX-512F" : "AVX2 and FMA",
                avx2 ? "avx2 and eigen" : "eigen");
  return g;
}

result<cpu_gemm> cpu_kernel_from(const char* value) {
  if (value == nullptr || *value == '\0') return runnable_cpu_kernel(cpu_gemm::best);
  auto g = parse_cpu_kernel(value);
  if (!g) return g;
  return runnable_cpu_kernel(*g);
}

const result<cpu_gemm>& cpu_kernel_from_environment() {
  static const result<cpu_gemm> kernel =
      cpu_kernel_from(std::getenv(std::string(cpu_kernel_variable).c_str()));
  return kernel;
}

cpu_backend::cpu_backend(cpu_gemm gemm) : gemm_(gemm) {
  auto runnable = runnable_cpu_kernel(gemm);
  COACH_ENFORCE(runnable.has_value(), runnable ? "" : runnable.error().message.c_str());
  gemm_ = *runnable;
}

// --- memory ---------------------------------------------------------------------------------

float* cpu_backend::alloc(std::size_t n) {
  COACH_ENFORCE(n <= std::numeric_limits<std::size_t>::max() / sizeof(float),
                "alloc size overflows");
  const std::size_t bytes = n * sizeof(float);
  void* p = ::operator new (bytes, std::align_val_t{detail::alignment});
  if (bytes > 0) std::memset(p, 0, bytes);
  return static_cast<float*>(p);
}

void cpu_backend::free(float* p) noexcept {
  if (p != nullptr) ::operator delete (p, std::align_val_t{detail::alignment});
}

void cpu_backend::upload(float* dst, const float* host_src, std::size_t n) {
  if (n > 0) std::memcpy(dst, host_src, n * sizeof(float));
}

void cpu_backend::copy(float* dst, const float* src, std::size_t n) {
  if (n > 0) std::memcpy(dst, src, n * sizeof(float));
}

void cpu_backend::download(float* host_dst, const float* src, std::size_t n) {
  if (n > 0) std::memcpy(host_dst, src, n * sizeof(float));
}

// --- dense algebra --------------------------------------------------------------------------

void cpu_backend::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                       int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  COACH_ENFORCE(m >= 0 && n >= 0 && k >= 0, "gemm dimensions must be >= 0");
  if (m == 0 || n == 0) return;
  const int a_cols = trans_a ? m : k;
  const int b_cols = trans_b ? k : n;
  COACH_ENFORCE(lda >= a_cols && ldb >= b_cols && ldc >= n,
                "gemm leading dimension smaller than the row length");
  if (precision_ != math_precision::fp32 && k > 0) {
    // The stored span of each operand, from its first element to its last row's end.
    const int a_rows = trans_a ? k : m;
    const int b_rows = trans_b ? n : k;
    a = rounded(0, a, std::size_t(a_rows - 1) * lda + a_cols);
    b = rounded(1, b, std::size_t(b_rows - 1) * ldb + b_cols);
  }
  product(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const float* cpu_backend::rounded(int slot, const float* src, std::size_t n) {
  auto& buf = rounded_[slot];
  if (buf.size() < n) buf.resize(n);
  round_into(precision_, src, n, buf.data());
  return buf.data();
}

void cpu_backend::product(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* a, int lda, const float* b, int ldb, float beta, float* c,
                          int ldc) {
  if (m == 0 || n == 0) return;
  // Stored shapes: A is m x k (k x m when transposed), B is k x n (n x k when transposed).
  const int a_rows = trans_a ? k : m;
  const int a_cols = trans_a ? m : k;
  const int b_rows = trans_b ? n : k;
  const int b_cols = trans_b ? k : n;
  detail::matrix_map cm(c, m, n, Eigen::OuterStride<>(ldc));
  if (k == 0) {  // op(A) * op(B) is all zeros
    if (beta == 0.0f)
      cm.setZero();
    else if (beta != 1.0f)
      cm *= beta;
    return;
  }
  if (gemm_ == cpu_gemm::avx512) {
    detail::avx512_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (gemm_ == cpu_gemm::avx2_fma) {
    detail::avx2_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const detail::const_matrix_map am(a, a_rows, a_cols, Eigen::OuterStride<>(lda));
  const detail::const_matrix_map bm(b, b_rows, b_cols, Eigen::OuterStride<>(ldb));
  // Transposed views of the Maps go straight into Eigen's GEMM kernel (no copies).
  if (!trans_a && !trans_b)
    detail::gemm_into(am, bm, alpha, beta, cm);
  else if (trans_a && !trans_b)
    detail::gemm_into(am.transpose(), bm, alpha, beta, cm);
  else if (!trans_a && trans_b)
    detail::gemm_into(am, bm.transpose(), alpha, beta, cm);
  else
    detail::gemm_into(am.transpose(), bm.transpose(), alpha, beta, cm);
}

void cpu_backend::bias_add(float* y, const float* bias, int rows, int cols) {
  COACH_ENFORCE(rows >= 0 && cols >= 0, "bias_add dimensions must be >= 0");
  const std::size_t width = static_cast<std::size_t>(cols);
  const auto bv = detail::arr(bias, width);
  for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r)
    detail::arr(y + r * width, width) += bv;
}

void cpu_backend::column_sum(const float* x, int rows, int cols, float beta, float* out) {
  COACH_ENFORCE(rows >= 0 && cols >= 0, "column_sum dimensions must be >= 0");
  const std::size_t width = static_cast<std::size_t>(cols);
  auto o = detail::arr(out, width);
  if (beta == 0.0f)
    o.setZero();
  else if (beta != 1.0f)
    o *= beta;
  // Row-major: adding whole rows keeps every access contiguous and vectorized.
  for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r)
    o += detail::arr(x + r * width, width);
}

void cpu_backend::relu(const float* x, float* y, std::size_t n) {
  detail::arr(y, n) = detail::arr(x, n).max(0.0f);
}

void cpu_backend::relu_grad(const float* y, const float* dy, float* dx, std::size_t n) {
  // Eigen 3.4 does not vectorize select(); this fixed-width form vectorizes (compare + and).
  // Every load of a block happens before its stores, which keeps dx == dy correct.
  std::size_t i = 0;
  for (; i + detail::lanes <= n; i += detail::lanes) {
    float t[detail::lanes];
    for (std::size_t j = 0; j < detail::lanes; ++j) {
      const float d = dy[i + j];
      t[j] = y[i + j] > 0.0f ? d : 0.0f;
    }
    for (std::size_t j = 0; j < detail::lanes; ++j) dx[i + j] = t[j];
  }
  for (; i < n; ++i) {
    const float d = dy[i];
    dx[i] = y[i] > 0.0f ? d : 0.0f;
  }
}

double cpu_backend::softmax_xent(const float* logits, const std::int32_t* labels, int rows,
                                 int cols, float* dlogits) {
  COACH_ENFORCE(rows >= 0 && cols > 0, "softmax_xent needs rows >= 0 and cols > 0");
  const std::size_t width = static_cast<std::size_t>(cols);
  double loss = 0.0;
  for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
    const std::int32_t label = labels[r];
    COACH_ENFORCE(label >= 0 && label < cols, "softmax_xent label out of range");
    const auto x = detail::arr(logits + r * width, width);
    auto d = detail::arr(dlogits + r * width, width);
    // Shifting by the row maximum keeps every exponent <= 0: no overflow, and the sum is >= 1.
    const float mx = x.maxCoeff();
    const float x_label = x[label];  // read before d (which may alias x) is written
    d = (x - mx).exp();
    const float s = d.sum();
    d /= s;
    d[label] -= 1.0f;
    loss +=
        std::log(static_cast<double>(s)) - (static_cast<double>(x_label) - static_cast<double>(mx));
  }
  return loss;
}

std::int64_t cpu_backend::count_correct(const float* logits, const std::int32_t* labels, int rows,
                                        int cols) {
  COACH_ENFORCE(rows >= 0 && cols > 0, "count_correct needs rows >= 0 and cols > 0");
  const std::size_t width = static_cast<std::size_t>(cols);
  std::int64_t correct = 0;
  for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
    const float* row = logits + r * width;
    std::size_t best = 0;
    for (std::size_t c = 1; c < width; ++c)
      if (row[c] > row[best]) best = c;  // strict: a tie keeps the first maximum
    if (static_cast<std::int64_t>(best) == labels[r]) ++correct;
  }
  return correct;
}

void cpu_backend::axpy(std::size_t n, float alpha, const float* x, float* y) {
  detail::arr(y, n) += alpha * detail::arr(x, n);
}

void cpu_backend::scale(std::size_t n, float alpha, float* x) {
  detail::arr(x, n) *= alpha;
}

double cpu_backend::sum(const float* x, std::size_t n) {
  return detail::lane_sum(x, n, [](double v) { return v; });
}

double cpu_backend::sum_squares(const float* x, std::size_t n) {
  return detail::lane_sum(x, n, [](double v) { return v * v; });
}

// --- fused optimizer updates ----------------------------------------------------------------

void cpu_backend::sgd_update(float* w, float* v, const float* g, std::size_t n, float grad_scale,
                             const sgd_options& opt) {
  if (opt.momentum == 0.0f) {  // plain SGD: v is neither read nor written
    detail::sgd_plain(w, g, n, grad_scale, opt.learning_rate, opt.weight_decay);
    return;
  }
  COACH_ENFORCE(v != nullptr, "sgd_update with momentum needs a velocity buffer");
  detail::sgd_momentum(w, v, g, n, grad_scale, opt.learning_rate, opt.weight_decay, opt.momentum);
}

void cpu_backend::adam_update(float* w, float* m, float* v, const float* g, std::size_t n,
                              float grad_scale, std::int64_t t, const adam_options& opt) {
  COACH_ENFORCE(t >= 1, "adam_update step numbers start at 1");
  const double bc1 = 1.0 - std::pow(static_cast<double>(opt.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(opt.beta2), static_cast<double>(t));
  // lr * (m / bc1) / (sqrt(v / bc2) + eps) == step * m / (sqrt(v) * inv_sqrt_bc2 + eps).
  detail::adam_constants c;
  c.step = static_cast<float>(static_cast<double>(opt.learning_rate) / bc1);
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  c.b1 = opt.beta1;
  c.b2 = opt.beta2;
  c.eps = opt.epsilon;
  c.wd = opt.weight_decay;
  c.decay = static_cast<float>(1.0 - static_cast<double>(opt.learning_rate) *
                                         static_cast<double>(opt.weight_decay));
  if (opt.decoupled)
    detail::adamw(w, m, v, g, n, grad_scale, c);
  else
    detail::adam(w, m, v, g, n, grad_scale, c);
}

}  // namespace coach::kernels
