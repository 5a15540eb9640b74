// kernels::backend: every op against a direct reference computed in double, on every backend of
// the build (the same suite for each implementation of the seam), plus the factory functions.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/counter_rng.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/cpu_gemm.hpp"
#include "kernels/layer_geometry.hpp"

namespace coach::kernels {
namespace {

constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();

/// Backends the parameterized suite runs on. The cuda backend joins this list once it is built
/// (COACH_HAVE_CUDA) and make_backend(backend_kind::cuda) returns one.
/// Every op's finite-difference and reference checks run on each backend this host can make
/// (cuda where a device is visible: the GPU machine).
/// The cpu backend runs once per matrix product this CPU has (Eigen's, and the AVX2/FMA kernel
/// where the CPU has AVX2 and FMA), since convolutions and dense layers go through it.
struct tested_backend {
  backend_kind kind;
  cpu_gemm gemm;  ///< for the cpu backend
  std::string name;
};

std::vector<tested_backend> tested_backends() {
  std::vector<tested_backend> out{{backend_kind::cpu, cpu_gemm::eigen, "cpu_eigen"}};
  if (detail::cpu_has_avx2_fma())
    out.push_back({backend_kind::cpu, cpu_gemm::avx2_fma, "cpu_avx2_fma"});
  if (detail::cpu_has_avx512f()) out.push_back({backend_kind::cpu, cpu_gemm::avx512, "cpu_avx512"});
  if (cuda_device_present()) out.push_back({backend_kind::cuda, cpu_gemm::best, "cuda"});
  return out;
}

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                 float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& x : out) x = dist(gen);
  return out;
}

struct gemm_case {
  int m, n, k;
  int pad_a, pad_b, pad_c;  ///< leading dimension minus stored row length
};

/// Fixture: one backend per test, and backend memory that is freed when the test ends.
class backend_test : public ::testing::TestWithParam<tested_backend> {
 protected:
  void SetUp() override {
    if (GetParam().kind == backend_kind::cpu) {
      be_ = std::make_unique<cpu_backend>(GetParam().gemm);
      return;
    }
    auto made = make_backend(GetParam().kind);
    ASSERT_TRUE(made) << made.error().to_string();
    be_ = std::move(*made);
  }

  void TearDown() override {
    for (float* p : owned_) be_->free(p);
    for (std::int32_t* p : owned_indices_) be_->free_indices(p);
  }

  /// Backend memory holding a copy of `host`.
  float* dev(const std::vector<float>& host) {
    float* p = be_->alloc(host.size());
    owned_.push_back(p);
    be_->upload(p, host.data(), host.size());
    return p;
  }

  /// Host copy of n floats of backend memory.
  std::vector<float> host(const float* p, std::size_t n) {
    std::vector<float> out(n);
    be_->download(out.data(), p, n);
    return out;
  }

  /// Backend memory for n int32 indices, filled with -7 (a value no op writes).
  std::int32_t* dev_indices(std::size_t n) {
    std::int32_t* p = be_->alloc_indices(n);
    owned_indices_.push_back(p);
    const std::vector<std::int32_t> fill(n, -7);
    std::vector<float> bits(n);
    std::memcpy(bits.data(), fill.data(), n * sizeof(float));
    be_->upload(reinterpret_cast<float*>(p), bits.data(), n);  // a byte copy either way
    return p;
  }

  /// Host copy of n int32 indices of backend memory.
  std::vector<std::int32_t> host_indices(const std::int32_t* p, std::size_t n) {
    const auto bits = host(reinterpret_cast<const float*>(p), n);
    std::vector<std::int32_t> out(n);
    std::memcpy(out.data(), bits.data(), n * sizeof(float));
    return out;
  }

  /// Runs one gemm against a double reference (defined with the gemm tests).
  void check_gemm(bool ta, bool tb, const gemm_case& g, float alpha, float beta,
                  std::uint32_t seed);

  /// Checks `analytic` against central differences of `loss` at x0, element by element:
  /// |analytic[i] - fd[i]| <= abs_tol + rel_tol * |fd[i]|.
  void expect_matches_differences(const std::function<double(const std::vector<float>&)>& loss,
                                  const std::vector<float>& x0, const std::vector<float>& analytic,
                                  float h, double abs_tol, double rel_tol, const std::string& what);

  std::unique_ptr<backend> be_;
  std::vector<float*> owned_;
  std::vector<std::int32_t*> owned_indices_;
};

// --- memory ---------------------------------------------------------------------------------

TEST_P(backend_test, alloc_returns_zeroed_memory_and_copies_round_trip) {
  float* p = be_->alloc(1000);
  owned_.push_back(p);
  ASSERT_NE(p, nullptr);
  for (float x : host(p, 1000)) ASSERT_EQ(x, 0.0f);
  const auto data = random_floats(1000, 1);
  be_->upload(p, data.data(), data.size());
  EXPECT_EQ(host(p, 1000), data);
  be_->free(nullptr);  // a no-op
  float* empty = be_->alloc(0);
  be_->free(empty);
}

// --- gemm -----------------------------------------------------------------------------------

/// Runs one gemm against a double reference. Padding between rows holds NaN, and so does C when
/// beta == 0: reading either would poison the result.
void backend_test::check_gemm(bool ta, bool tb, const gemm_case& g, float alpha, float beta,
                              std::uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb << " m=" << g.m << " n="
                                  << g.n << " k=" << g.k << " alpha=" << alpha << " beta=" << beta);
  const int a_rows = ta ? g.k : g.m, a_cols = ta ? g.m : g.k;
  const int b_rows = tb ? g.n : g.k, b_cols = tb ? g.k : g.n;
  const int lda = a_cols + g.pad_a, ldb = b_cols + g.pad_b, ldc = g.n + g.pad_c;
  auto fill = [](int rows, int cols, int ld, std::uint32_t s, bool values_nan) {
    auto v = random_floats(std::size_t(rows) * ld, s);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < ld; ++c)
        if (c >= cols || values_nan) v[std::size_t(r) * ld + c] = nan_f;
    return v;
  };
  const auto a = fill(a_rows, a_cols, lda, seed, false);
  const auto b = fill(b_rows, b_cols, ldb, seed + 1, false);
  const auto c0 = fill(g.m, g.n, ldc, seed + 2, beta == 0.0f);
  float* da = dev(a);
  float* db = dev(b);
  float* dc = dev(c0);
  be_->gemm(ta, tb, g.m, g.n, g.k, alpha, da, lda, db, ldb, beta, dc, ldc);
  const auto c = host(dc, c0.size());

  auto op_a = [&](int i, int p) {
    return double(ta ? a[std::size_t(p) * lda + i] : a[std::size_t(i) * lda + p]);
  };
  auto op_b = [&](int p, int j) {
    return double(tb ? b[std::size_t(j) * ldb + p] : b[std::size_t(p) * ldb + j]);
  };
  for (int i = 0; i < g.m; ++i) {
    for (int j = 0; j < g.n; ++j) {
      double dot = 0.0, magnitude = 0.0;
      for (int p = 0; p < g.k; ++p) {
        dot += op_a(i, p) * op_b(p, j);
        magnitude += std::abs(op_a(i, p) * op_b(p, j));
      }
      const double old = beta == 0.0f ? 0.0 : double(c0[std::size_t(i) * ldc + j]);
      const double want = double(alpha) * dot + double(beta) * old;
      const double bound = std::abs(double(alpha)) * magnitude + std::abs(double(beta) * old);
      const double tol = 2.0 * (g.k + 2) * FLT_EPSILON * bound + 1e-30;
      ASSERT_NEAR(c[std::size_t(i) * ldc + j], want, tol) << "at C[" << i << ", " << j << "]";
    }
    for (int j = g.n; j < ldc; ++j)
      ASSERT_TRUE(std::isnan(c[std::size_t(i) * ldc + j])) << "padding of C written at row " << i;
  }
}

TEST_P(backend_test, gemm_matches_reference_for_all_transposes_shapes_and_scalars) {
  const std::vector<gemm_case> cases{
      {1, 1, 1, 0, 0, 0},    {3, 5, 7, 0, 0, 0},     {5, 3, 7, 2, 1, 3},
      {1, 40, 3, 0, 4, 0},   {40, 1, 3, 1, 0, 2},    {17, 9, 33, 3, 5, 1},
      {64, 48, 80, 0, 0, 0}, {65, 31, 129, 7, 2, 4}, {128, 10, 784, 0, 0, 0}};
  const std::vector<std::pair<float, float>> scalars{
      {1.0f, 0.0f}, {0.5f, 0.0f}, {1.0f, 1.0f}, {-2.0f, 0.25f}, {1.5f, -1.0f}};
  std::uint32_t seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& g : cases)
        for (auto [alpha, beta] : scalars) {
          check_gemm(ta, tb, g, alpha, beta, seed += 3);
          if (HasFatalFailure()) return;
        }
}

TEST_P(backend_test, gemm_matches_reference_across_block_boundaries) {
  // Past the AVX2 kernel's blocks: 300 > KC = 256 inner terms, 130 > MC = 120 rows, 3,100 >
  // NC = 3,072 columns, with partial register tiles at every edge.
  const std::vector<gemm_case> cases{{130, 40, 300, 1, 2, 3}, {7, 3100, 20, 0, 1, 5}};
  std::uint32_t seed = 900;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& g : cases) {
        check_gemm(ta, tb, g, 0.5f, 0.0f, seed += 3);
        check_gemm(ta, tb, g, -1.5f, 0.75f, seed += 3);
        if (HasFatalFailure()) return;
      }
}

TEST_P(backend_test, gemm_with_empty_inner_dimension_only_scales_c) {
  const std::vector<float> c0{1, 2, 3, 4, 5, 6};
  float* c = dev(c0);
  float* a = dev({0.0f});
  be_->gemm(false, false, 2, 3, 0, 1.0f, a, 1, a, 3, 0.5f, c, 3);
  EXPECT_EQ(host(c, 6), (std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, 3}));
  be_->gemm(true, true, 2, 3, 0, 1.0f, a, 2, a, 1, 0.0f, c, 3);
  EXPECT_EQ(host(c, 6), std::vector<float>(6, 0.0f));
}

// --- rows and columns -----------------------------------------------------------------------

TEST_P(backend_test, bias_add_adds_the_bias_to_every_row) {
  const int rows = 5, cols = 37;
  const auto y0 = random_floats(std::size_t(rows) * cols, 2);
  const auto bias = random_floats(cols, 3);
  float* y = dev(y0);
  be_->bias_add(y, dev(bias), rows, cols);
  const auto out = host(y, y0.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      ASSERT_EQ(out[std::size_t(r) * cols + c], y0[std::size_t(r) * cols + c] + bias[c]);
}

TEST_P(backend_test, column_sum_sums_rows_with_beta_zero_one_and_general) {
  const int rows = 13, cols = 37;
  const auto x = random_floats(std::size_t(rows) * cols, 4);
  float* dx = dev(x);
  const auto old = random_floats(cols, 5);
  for (float beta : {0.0f, 1.0f, 0.5f}) {
    SCOPED_TRACE(testing::Message() << "beta=" << beta);
    // beta == 0 must not read out (it may be uninitialized): NaN there must not survive.
    float* out = dev(beta == 0.0f ? std::vector<float>(cols, nan_f) : old);
    be_->column_sum(dx, rows, cols, beta, out);
    const auto got = host(out, cols);
    for (int c = 0; c < cols; ++c) {
      double want = beta == 0.0f ? 0.0 : double(beta) * old[c];
      double magnitude = std::abs(want);
      for (int r = 0; r < rows; ++r) {
        want += x[std::size_t(r) * cols + c];
        magnitude += std::abs(x[std::size_t(r) * cols + c]);
      }
      ASSERT_NEAR(got[c], want, 2.0 * (rows + 2) * FLT_EPSILON * magnitude) << "column " << c;
    }
  }
}

// --- elementwise ----------------------------------------------------------------------------

TEST_P(backend_test, relu_clamps_negatives_out_of_place_and_in_place) {
  auto x = random_floats(1003, 6);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1e-30f;
  x[3] = -1e-30f;
  float* dx = dev(x);
  float* y = dev(std::vector<float>(x.size(), nan_f));
  be_->relu(dx, y, x.size());
  auto out = host(y, x.size());
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(out[i], x[i] > 0 ? x[i] : 0.0f) << i;
  EXPECT_EQ(host(dx, x.size()), x);  // input untouched
  be_->relu(dx, dx, x.size());
  EXPECT_EQ(host(dx, x.size()), out);
}

TEST_P(backend_test, relu_grad_passes_gradient_where_output_is_positive) {
  auto y = random_floats(1003, 7);
  for (float& v : y) v = v > 0 ? v : 0.0f;  // a relu output
  y[5] = 1e-30f;
  const auto dy = random_floats(y.size(), 8);
  float* dy_dev = dev(dy);
  float* y_dev = dev(y);
  float* dx = dev(std::vector<float>(y.size(), nan_f));
  be_->relu_grad(y_dev, dy_dev, dx, y.size());
  const auto out = host(dx, y.size());
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(out[i], y[i] > 0 ? dy[i] : 0.0f) << i;
  be_->relu_grad(y_dev, dy_dev, dy_dev, y.size());  // dx aliasing dy
  EXPECT_EQ(host(dy_dev, y.size()), out);
}

TEST_P(backend_test, axpy_and_scale_match_reference) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1029}}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const auto x = random_floats(n, 9);
    const auto y0 = random_floats(n, 10);
    float* y = dev(y0);
    be_->axpy(n, -1.5f, dev(x), y);
    auto got = host(y, n);
    for (std::size_t i = 0; i < n; ++i) {
      const double want = double(y0[i]) - 1.5 * double(x[i]);
      ASSERT_NEAR(got[i], want, 2 * FLT_EPSILON * (std::abs(y0[i]) + 1.5 * std::abs(x[i])));
    }
    be_->scale(n, 0.3f, y);
    const auto scaled = host(y, n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(scaled[i], got[i] * 0.3f);
  }
}

TEST_P(backend_test, sum_and_sum_squares_match_reference) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8},
                        std::size_t{9}, std::size_t{1000}, std::size_t{100003}}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const auto x = random_floats(n, 11, -3.0f, 2.0f);
    double s = 0.0, ss = 0.0, magnitude = 0.0;
    for (float v : x) {
      s += v;
      ss += double(v) * v;
      magnitude += std::abs(v);
    }
    float* d = dev(x);
    EXPECT_NEAR(be_->sum(d, n), s, 1e-12 * magnitude);
    EXPECT_NEAR(be_->sum_squares(d, n), ss, 1e-12 * ss);
  }
}

TEST_P(backend_test, sum_accumulates_in_double) {
  // In float, 1e8 + 1 == 1e8: a float accumulator would lose every one of the 1000 ones.
  std::vector<float> x(1001, 1.0f);
  x[0] = 1e8f;
  EXPECT_EQ(be_->sum(dev(x), x.size()), 1e8 + 1000.0);
  x[0] = 1e4f;  // squared: 1e8 again
  EXPECT_EQ(be_->sum_squares(dev(x), x.size()), 1e8 + 1000.0);
}

// --- softmax cross-entropy ------------------------------------------------------------------

/// Sum over rows of -log softmax(x)[label], and the gradient softmax - onehot, in double.
double reference_xent(const std::vector<float>& x, const std::vector<std::int32_t>& labels,
                      int cols, std::vector<double>* grad) {
  double loss = 0.0;
  grad->assign(x.size(), 0.0);
  for (std::size_t r = 0; r < labels.size(); ++r) {
    const float* row = x.data() + r * cols;
    double mx = row[0];
    for (int c = 1; c < cols; ++c) mx = std::max(mx, double(row[c]));
    double s = 0.0;
    for (int c = 0; c < cols; ++c) s += std::exp(double(row[c]) - mx);
    loss += std::log(s) + mx - double(row[labels[r]]);
    for (int c = 0; c < cols; ++c)
      (*grad)[r * cols + c] = std::exp(double(row[c]) - mx) / s - (c == labels[r] ? 1.0 : 0.0);
  }
  return loss;
}

TEST_P(backend_test, softmax_xent_matches_direct_formula_also_in_place) {
  const int rows = 4, cols = 7;
  const auto x = random_floats(std::size_t(rows) * cols, 12, -3.0f, 3.0f);
  const std::vector<std::int32_t> labels{0, 6, 3, 2};
  std::vector<double> want_grad;
  const double want = reference_xent(x, labels, cols, &want_grad);
  float* logits = dev(x);
  float* grad = dev(std::vector<float>(x.size(), nan_f));
  const double loss = be_->softmax_xent(logits, labels.data(), rows, cols, grad);
  EXPECT_NEAR(loss, want, 1e-6 * want);
  const auto g = host(grad, x.size());
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(g[i], want_grad[i], 1e-6) << i;
  EXPECT_EQ(host(logits, x.size()), x);  // input untouched when not aliased
  // dlogits aliasing logits: same loss and gradient.
  EXPECT_EQ(be_->softmax_xent(logits, labels.data(), rows, cols, logits), loss);
  EXPECT_EQ(host(logits, x.size()), g);
}

TEST_P(backend_test, softmax_xent_gradient_matches_central_differences) {
  const int rows = 3, cols = 5;
  const auto x = random_floats(std::size_t(rows) * cols, 13, -2.0f, 2.0f);
  const std::vector<std::int32_t> labels{4, 0, 2};
  float* logits = dev(x);
  float* grad = dev(std::vector<float>(x.size()));
  be_->softmax_xent(logits, labels.data(), rows, cols, grad);
  const auto g = host(grad, x.size());
  float* probe = dev(x);
  float* scratch = dev(std::vector<float>(x.size()));
  auto loss_at = [&](const std::vector<float>& v) {
    be_->upload(probe, v.data(), v.size());
    return be_->softmax_xent(probe, labels.data(), rows, cols, scratch);
  };
  // h = 1e-2: the truncation error (h^2/6 * f''' < 1e-5) and the float rounding of the loss
  // divided by 2h (~1e-5) both stay well below the tolerance.
  const float h = 1e-2f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto plus = x, minus = x;
    plus[i] += h;
    minus[i] -= h;
    const double fd = (loss_at(plus) - loss_at(minus)) / (double(plus[i]) - double(minus[i]));
    EXPECT_NEAR(g[i], fd, 2e-4) << "logit " << i;
  }
}

TEST_P(backend_test, softmax_xent_is_stable_for_large_logits) {
  const int rows = 3, cols = 3;
  const std::vector<float> x{1000,  1000,  -1000,   // label 0: loss log 2
                             1000,  0,     -5,      // label 1: loss 1000
                             -1000, -1000, -1000};  // label 2: loss log 3
  const std::vector<std::int32_t> labels{0, 1, 2};
  float* logits = dev(x);
  const double loss = be_->softmax_xent(logits, labels.data(), rows, cols, logits);
  ASSERT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, std::log(2.0) + 1000.0 + std::log(3.0), 1e-9 * 1000);
  const auto g = host(logits, x.size());
  const std::vector<double> want{-0.5, 0.5, 0, 1, -1, 0, 1.0 / 3, 1.0 / 3, -2.0 / 3};
  for (std::size_t i = 0; i < g.size(); ++i) {
    ASSERT_TRUE(std::isfinite(g[i])) << i;
    EXPECT_NEAR(g[i], want[i], 1e-6) << i;
  }
}

TEST_P(backend_test, count_correct_counts_argmax_hits_with_ties_to_the_first) {
  const std::vector<float> x{0.1f, 0.9f, 0.3f,   // argmax 1
                             2,    2,    1,      // tie: argmax 0
                             2,    2,    1,      // tie: argmax 0
                             -1,   -2,   -0.5f,  // argmax 2
                             5,    5,    5};     // tie: argmax 0
  const std::vector<std::int32_t> labels{1, 0, 1, 2, 2};
  EXPECT_EQ(be_->count_correct(dev(x), labels.data(), 5, 3), 3);
  EXPECT_EQ(be_->count_correct(dev(x), labels.data(), 0, 3), 0);
}

// --- optimizers -----------------------------------------------------------------------------

constexpr std::size_t opt_n = 2053;  // odd, and more than two blocks of 1024

TEST_P(backend_test, sgd_update_matches_scalar_reference_over_three_steps) {
  struct variant {
    float momentum, weight_decay;
  };
  for (variant var :
       {variant{0.0f, 0.0f}, variant{0.0f, 0.01f}, variant{0.9f, 0.0f}, variant{0.9f, 0.01f}}) {
    SCOPED_TRACE(testing::Message()
                 << "momentum=" << var.momentum << " weight_decay=" << var.weight_decay);
    sgd_options opt;
    opt.learning_rate = 0.1f;
    opt.momentum = var.momentum;
    opt.weight_decay = var.weight_decay;
    const float grad_scale = 0.25f;
    const auto w0 = random_floats(opt_n, 20);
    std::vector<double> w(w0.begin(), w0.end()), v(opt_n, 0.0);
    float* dw = dev(w0);
    // With momentum 0, v must be neither read nor written: pass nullptr, or a sentinel buffer.
    const std::vector<float> sentinel(opt_n, 42.0f);
    float* dv = dev(var.momentum == 0.0f ? sentinel : std::vector<float>(opt_n, 0.0f));
    for (int step = 1; step <= 3; ++step) {
      const auto g = random_floats(opt_n, 30 + step, -4.0f, 4.0f);
      for (std::size_t i = 0; i < opt_n; ++i) {
        const double gp = double(grad_scale) * g[i] + double(opt.weight_decay) * w[i];
        v[i] = double(opt.momentum) * v[i] + gp;
        w[i] -= double(opt.learning_rate) * v[i];
      }
      float* v_arg = (var.momentum == 0.0f && step == 2) ? nullptr : dv;
      be_->sgd_update(dw, v_arg, dev(g), opt_n, grad_scale, opt);
      const auto got_w = host(dw, opt_n);
      const auto got_v = host(dv, opt_n);
      for (std::size_t i = 0; i < opt_n; ++i) {
        ASSERT_NEAR(got_w[i], w[i], 2e-6) << "w[" << i << "] at step " << step;
        if (var.momentum == 0.0f)
          ASSERT_EQ(got_v[i], 42.0f) << "v touched at " << i;
        else
          ASSERT_NEAR(got_v[i], v[i], 2e-6 * (1 + std::abs(v[i]))) << "v[" << i << "]";
      }
    }
  }
}

TEST_P(backend_test, adam_update_matches_scalar_reference_over_three_steps) {
  for (float weight_decay : {0.0f, 0.01f}) {
    SCOPED_TRACE(testing::Message() << "weight_decay=" << weight_decay);
    adam_options opt;
    opt.learning_rate = 0.01f;
    opt.weight_decay = weight_decay;
    const float grad_scale = 0.5f;
    const auto w0 = random_floats(opt_n, 40);
    std::vector<double> w(w0.begin(), w0.end()), m(opt_n, 0.0), v(opt_n, 0.0);
    // m cancels when gradients change sign: its rounding error scales with the sum of the
    // magnitudes of its terms, not with |m|.
    std::vector<double> m_scale(opt_n, 0.0);
    float* dw = dev(w0);
    float* dm = dev(std::vector<float>(opt_n, 0.0f));
    float* dv = dev(std::vector<float>(opt_n, 0.0f));
    for (std::int64_t t = 1; t <= 3; ++t) {
      const auto g = random_floats(opt_n, 50 + std::uint32_t(t), -2.0f, 2.0f);
      const double b1 = opt.beta1, b2 = opt.beta2;
      for (std::size_t i = 0; i < opt_n; ++i) {
        const double gp = double(grad_scale) * g[i] + double(opt.weight_decay) * w[i];
        m[i] = b1 * m[i] + (1 - b1) * gp;
        m_scale[i] = b1 * m_scale[i] + (1 - b1) * std::abs(gp);
        v[i] = b2 * v[i] + (1 - b2) * gp * gp;
        const double m_hat = m[i] / (1 - std::pow(b1, double(t)));
        const double v_hat = v[i] / (1 - std::pow(b2, double(t)));
        w[i] -= double(opt.learning_rate) * m_hat / (std::sqrt(v_hat) + double(opt.epsilon));
      }
      be_->adam_update(dw, dm, dv, dev(g), opt_n, grad_scale, t, opt);
      const auto got_w = host(dw, opt_n);
      const auto got_m = host(dm, opt_n);
      const auto got_v = host(dv, opt_n);
      for (std::size_t i = 0; i < opt_n; ++i) {
        ASSERT_NEAR(got_w[i], w[i], 1e-6) << "w[" << i << "] at t=" << t;
        ASSERT_NEAR(got_m[i], m[i], 8 * FLT_EPSILON * m_scale[i]) << "m[" << i << "] at t=" << t;
        ASSERT_NEAR(got_v[i], v[i], 1e-6 * v[i] + 1e-12) << "v[" << i << "] at t=" << t;
      }
    }
  }
}

TEST_P(backend_test, optimizer_updates_in_pieces_equal_one_update_bit_for_bit) {
  // The parameter server cuts the vector into shards at arbitrary offsets; the result must not
  // depend on where the cuts fall.
  const auto w0 = random_floats(opt_n, 60);
  const auto g = random_floats(opt_n, 61);
  const std::vector<std::size_t> cuts{0, 13, 1500, 1501, opt_n};
  sgd_options sgd;
  sgd.momentum = 0.9f;
  sgd.weight_decay = 0.01f;
  adam_options adam;
  adam.weight_decay = 0.01f;
  auto run = [&](bool pieces, bool use_adam) {
    float* w = dev(w0);
    float* a = dev(std::vector<float>(opt_n, 0.0f));
    float* b = dev(std::vector<float>(opt_n, 0.0f));
    float* dg = dev(g);
    for (std::int64_t t = 1; t <= 2; ++t)
      for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
        const std::size_t off = pieces ? cuts[c] : 0;
        const std::size_t n = pieces ? cuts[c + 1] - cuts[c] : (c == 0 ? opt_n : 0);
        if (use_adam)
          be_->adam_update(w + off, a + off, b + off, dg + off, n, 0.5f, t, adam);
        else
          be_->sgd_update(w + off, a + off, dg + off, n, 0.5f, sgd);
      }
    return host(w, opt_n);
  };
  EXPECT_EQ(run(true, false), run(false, false));
  EXPECT_EQ(run(true, true), run(false, true));
}

TEST_P(backend_test, optimizer_updates_element_by_element_equal_one_update_bit_for_bit) {
  // The harshest cut: every element on its own (a slice or piece may start anywhere).
  constexpr std::size_t n = 300;
  const auto w0 = random_floats(n, 70);
  const auto g = random_floats(n, 71);
  adam_options adam;
  adam.weight_decay = 0.01f;
  sgd_options sgd;
  sgd.momentum = 0.9f;
  for (bool use_adam : {false, true}) {
    auto run = [&](std::size_t step) {
      float* w = dev(w0);
      float* a = dev(std::vector<float>(n, 0.0f));
      float* b = dev(std::vector<float>(n, 0.0f));
      float* dg = dev(g);
      for (std::int64_t t = 1; t <= 2; ++t)
        for (std::size_t off = 0; off < n; off += step) {
          const std::size_t len = std::min(step, n - off);
          if (use_adam)
            be_->adam_update(w + off, a + off, b + off, dg + off, len, 0.5f, t, adam);
          else
            be_->sgd_update(w + off, a + off, dg + off, len, 0.5f, sgd);
        }
      return host(w, n);
    };
    const auto whole = run(n);
    for (std::size_t step : {std::size_t(1), std::size_t(3), std::size_t(7)})
      EXPECT_EQ(run(step), whole) << (use_adam ? "adam" : "sgd") << " in pieces of " << step;
  }
}

// --- layers: helpers ------------------------------------------------------------------------

void backend_test::expect_matches_differences(
    const std::function<double(const std::vector<float>&)>& loss, const std::vector<float>& x0,
    const std::vector<float>& analytic, float h, double abs_tol, double rel_tol,
    const std::string& what) {
  ASSERT_EQ(analytic.size(), x0.size()) << what;
  for (std::size_t i = 0; i < x0.size(); ++i) {
    auto plus = x0, minus = x0;
    plus[i] += h;
    minus[i] -= h;
    const double fd = (loss(plus) - loss(minus)) / (double(plus[i]) - double(minus[i]));
    ASSERT_NEAR(analytic[i], fd, abs_tol + rel_tol * std::abs(fd)) << what << " at " << i;
  }
}

/// sum_i y[i] g[i] in double: the scalar loss whose gradient with respect to y is g.
double dot(const std::vector<float>& y, const std::vector<float>& g) {
  double acc = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) acc += double(y[i]) * double(g[i]);
  return acc;
}

/// Direct convolution in double (the definition, no im2col).
std::vector<double> reference_conv(const conv2d_shape& s, const std::vector<float>& x,
                                   const std::vector<float>& w, const std::vector<float>& b) {
  const int oh_n = s.out_h(), ow_n = s.out_w();
  std::vector<double> y(s.output_size());
  for (int n = 0; n < s.batch; ++n)
    for (int k = 0; k < s.filters; ++k)
      for (int oh = 0; oh < oh_n; ++oh)
        for (int ow = 0; ow < ow_n; ++ow) {
          double acc = b.empty() ? 0.0 : double(b[std::size_t(k)]);
          for (int c = 0; c < s.channels; ++c)
            for (int r = 0; r < s.kernel_h; ++r)
              for (int q = 0; q < s.kernel_w; ++q) {
                const int ih = oh * s.stride_h - s.pad_h + r;
                const int iw = ow * s.stride_w - s.pad_w + q;
                if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
                acc +=
                    double(x[((std::size_t(n) * s.channels + c) * s.height + ih) * s.width + iw]) *
                    double(
                        w[((std::size_t(k) * s.channels + c) * s.kernel_h + r) * s.kernel_w + q]);
              }
          y[((std::size_t(n) * s.filters + k) * oh_n + oh) * ow_n + ow] = acc;
        }
  return y;
}

conv2d_shape make_conv(int n, int c, int h, int w, int k, int r, int s, int stride_h, int stride_w,
                       int pad_h, int pad_w) {
  conv2d_shape out;
  out.batch = n;
  out.channels = c;
  out.height = h;
  out.width = w;
  out.filters = k;
  out.kernel_h = r;
  out.kernel_w = s;
  out.stride_h = stride_h;
  out.stride_w = stride_w;
  out.pad_h = pad_h;
  out.pad_w = pad_w;
  return out;
}

pool2d_shape make_pool(int n, int c, int h, int w, int wh, int ww, int sh, int sw, int ph, int pw) {
  pool2d_shape out;
  out.batch = n;
  out.channels = c;
  out.height = h;
  out.width = w;
  out.window_h = wh;
  out.window_w = ww;
  out.stride_h = sh;
  out.stride_w = sw;
  out.pad_h = ph;
  out.pad_w = pw;
  return out;
}

// --- activations ----------------------------------------------------------------------------

TEST_P(backend_test, tanh_sigmoid_gelu_match_their_formulas_also_in_place) {
  auto x = random_floats(1001, 80, -6.0f, 6.0f);
  x[0] = 0.0f;
  x[1] = 30.0f;  // saturation: no NaN from exp overflow
  x[2] = -30.0f;
  x[3] = -100.0f;
  struct activation {
    const char* name;
    void (backend::*op)(const float*, float*, std::size_t);
    double (*want)(double);
  };
  const activation ops[] = {
      {"tanh", &backend::tanh, [](double v) { return std::tanh(v); }},
      {"sigmoid", &backend::sigmoid, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }},
      {"gelu", &backend::gelu,
       [](double v) {
         return 0.5 * v *
                (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
       }},
  };
  for (const auto& a : ops) {
    SCOPED_TRACE(a.name);
    float* in = dev(x);
    float* out = dev(std::vector<float>(x.size(), nan_f));  // the output is not read
    (be_.get()->*a.op)(in, out, x.size());
    const auto got = host(out, x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      ASSERT_NEAR(got[i], a.want(x[i]), 4 * FLT_EPSILON * (1.0 + std::abs(a.want(x[i]))))
          << "x = " << x[i];
    (be_.get()->*a.op)(in, in, x.size());
    EXPECT_EQ(host(in, x.size()), got) << "in place";
  }
}

TEST_P(backend_test, activation_gradients_match_central_differences) {
  const std::size_t n = 64;
  const auto x = random_floats(n, 81, -3.0f, 3.0f);
  const auto g = random_floats(n, 82);
  float* dg = dev(g);
  float* y = dev(std::vector<float>(n));
  float* probe_out = dev(std::vector<float>(n));
  float* probe_in = dev(x);
  auto loss_of = [&](void (backend::*op)(const float*, float*, std::size_t)) {
    return [&, op](const std::vector<float>& v) {
      be_->upload(probe_in, v.data(), n);
      (be_.get()->*op)(probe_in, probe_out, n);
      return dot(host(probe_out, n), g);
    };
  };
  // tanh and sigmoid take their output, gelu its input.
  float* dx = dev(std::vector<float>(n, nan_f));
  be_->tanh(dev(x), y, n);
  be_->tanh_grad(y, dg, dx, n);
  expect_matches_differences(loss_of(&backend::tanh), x, host(dx, n), 1e-2f, 1e-4, 1e-3, "tanh");
  be_->sigmoid(dev(x), y, n);
  be_->sigmoid_grad(y, dg, dx, n);
  expect_matches_differences(loss_of(&backend::sigmoid), x, host(dx, n), 1e-2f, 1e-4, 1e-3,
                             "sigmoid");
  be_->gelu_grad(dev(x), dg, dx, n);
  expect_matches_differences(loss_of(&backend::gelu), x, host(dx, n), 1e-2f, 1e-4, 1e-3, "gelu");
  // dx aliasing dy.
  const auto want = host(dx, n);
  float* inplace = dev(g);
  be_->gelu_grad(dev(x), inplace, inplace, n);
  EXPECT_EQ(host(inplace, n), want);
}

// --- convolution ----------------------------------------------------------------------------

TEST_P(backend_test, conv2d_forward_matches_hand_computed_values) {
  // x = 1..9 as a 3 x 3 image; a 2 x 2 kernel of ones sums each 2 x 2 block, plus the bias.
  const std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto s = make_conv(1, 1, 3, 3, 1, 2, 2, 1, 1, 0, 0);
  float* y = dev(std::vector<float>(4, nan_f));
  be_->conv2d_forward(s, dev(x), dev({1, 1, 1, 1}), dev({0.5f}), y);
  EXPECT_EQ(host(y, 4), (std::vector<float>{12.5f, 16.5f, 24.5f, 28.5f}));
  // 3 x 3 kernel, stride 2, padding 1: each output sees a corner block of the image; a second
  // filter (all twos, no bias) doubles it.
  s = make_conv(1, 1, 3, 3, 2, 3, 3, 2, 2, 1, 1);
  std::vector<float> w(18, 1.0f);
  std::fill(w.begin() + 9, w.end(), 2.0f);
  float* y2 = dev(std::vector<float>(8, nan_f));
  be_->conv2d_forward(s, dev(x), dev(w), nullptr, y2);
  EXPECT_EQ(host(y2, 8), (std::vector<float>{12, 16, 24, 28, 24, 32, 48, 56}));
  // Two channels, a 1 x 1 kernel (the pointwise path): y = 2 x_0 - x_1 per position.
  s = make_conv(1, 2, 1, 3, 1, 1, 1, 1, 1, 0, 0);
  float* y3 = dev(std::vector<float>(3, nan_f));
  be_->conv2d_forward(s, dev({1, 2, 3, 10, 20, 30}), dev({2, -1}), nullptr, y3);
  EXPECT_EQ(host(y3, 3), (std::vector<float>{-8, -16, -24}));
}

TEST_P(backend_test, conv2d_backward_matches_hand_computed_values) {
  // 1 x 1 x 3 x 3 input, 2 x 2 kernel, stride 1: dy of ones spreads the kernel over the image.
  const auto s = make_conv(1, 1, 3, 3, 1, 2, 2, 1, 1, 0, 0);
  float* dx = dev(std::vector<float>(9, nan_f));
  be_->conv2d_backward_data(s, dev({1, 1, 1, 1}), dev({1, 2, 3, 4}), dx);
  // Input (h, w) gets w[r, q] for each output (h - r, w - q) in range.
  EXPECT_EQ(host(dx, 9), (std::vector<float>{1, 3, 2, 4, 10, 6, 3, 7, 4}));
  float* dw = dev(std::vector<float>(4, nan_f));
  float* db = dev(std::vector<float>(1, nan_f));
  be_->conv2d_backward_filter(s, dev({1, 2, 3, 4, 5, 6, 7, 8, 9}), dev({1, 0, 0, 2}), dw, db);
  // dw[r, q] = x[r, q] * 1 + x[r + 1, q + 1] * 2.
  EXPECT_EQ(host(dw, 4), (std::vector<float>{11, 14, 20, 23}));
  EXPECT_EQ(host(db, 1), (std::vector<float>{3}));
}

TEST_P(backend_test, conv2d_matches_direct_convolution_and_central_differences) {
  struct conv_case {
    conv2d_shape s;
    const char* name;
  };
  const conv_case cases[] = {
      {make_conv(2, 3, 5, 4, 2, 3, 2, 1, 1, 0, 0), "3x2 kernel, stride 1"},
      {make_conv(2, 2, 5, 6, 3, 3, 3, 2, 2, 1, 1), "stride 2, padding 1"},
      {make_conv(3, 2, 4, 7, 2, 2, 3, 1, 2, 1, 0), "non-square stride and padding"},
      {make_conv(2, 3, 3, 4, 2, 1, 1, 1, 1, 0, 0), "pointwise"},
      {make_conv(1, 1, 6, 6, 1, 3, 3, 3, 3, 0, 0), "stride equal to kernel"},
  };
  std::uint32_t seed = 300;
  for (const auto& cc : cases) {
    SCOPED_TRACE(cc.name);
    const auto& s = cc.s;
    ASSERT_TRUE(validate(s).has_value()) << validate(s).error().to_string();
    const auto x = random_floats(s.input_size(), ++seed);
    const auto w = random_floats(s.weight_size(), ++seed);
    const auto b = random_floats(std::size_t(s.filters), ++seed);
    const auto g = random_floats(s.output_size(), ++seed);  // dL/dy
    float* y = dev(std::vector<float>(s.output_size(), nan_f));
    be_->conv2d_forward(s, dev(x), dev(w), dev(b), y);
    const auto got = host(y, s.output_size());
    const auto want = reference_conv(s, x, w, b);
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * (1.0 + double(s.column_rows()))) << "y at " << i;

    float* dx = dev(std::vector<float>(s.input_size(), nan_f));
    float* dw = dev(std::vector<float>(s.weight_size(), nan_f));
    float* db = dev(std::vector<float>(std::size_t(s.filters), nan_f));
    float* dg = dev(g);
    be_->conv2d_backward_data(s, dg, dev(w), dx);
    be_->conv2d_backward_filter(s, dev(x), dg, dw, db);
    // L = <conv(x, w) + b, g> is linear in each argument: central differences have no
    // truncation error, so a wide step (h = 0.25) keeps the float rounding of the affected
    // outputs (~1e-6) small against 2h.
    float* px = dev(x);
    float* pw = dev(w);
    float* pb = dev(b);
    float* py = dev(std::vector<float>(s.output_size()));
    auto loss = [&](float* param, std::size_t n) {
      return [&, param, n](const std::vector<float>& v) {
        be_->upload(param, v.data(), n);
        be_->conv2d_forward(s, px, pw, pb, py);
        const double l = dot(host(py, s.output_size()), g);
        return l;
      };
    };
    auto restore = [&] {
      be_->upload(px, x.data(), x.size());
      be_->upload(pw, w.data(), w.size());
      be_->upload(pb, b.data(), b.size());
    };
    expect_matches_differences(loss(px, x.size()), x, host(dx, x.size()), 0.25f, 1e-4, 1e-4, "dx");
    restore();
    expect_matches_differences(loss(pw, w.size()), w, host(dw, w.size()), 0.25f, 1e-4, 1e-4, "dw");
    restore();
    expect_matches_differences(loss(pb, b.size()), b, host(db, b.size()), 0.25f, 1e-4, 1e-4, "db");
    if (HasFatalFailure()) return;
  }
}

TEST_P(backend_test, conv2d_backward_filter_skips_the_bias_gradient_when_db_is_null) {
  const auto s = make_conv(2, 2, 4, 4, 3, 3, 3, 1, 1, 1, 1);
  const auto x = random_floats(s.input_size(), 320);
  const auto dy = random_floats(s.output_size(), 321);
  float* dw1 = dev(std::vector<float>(s.weight_size(), nan_f));
  float* dw2 = dev(std::vector<float>(s.weight_size(), nan_f));
  float* db = dev(std::vector<float>(std::size_t(s.filters)));
  be_->conv2d_backward_filter(s, dev(x), dev(dy), dw1, nullptr);
  be_->conv2d_backward_filter(s, dev(x), dev(dy), dw2, db);
  EXPECT_EQ(host(dw1, s.weight_size()), host(dw2, s.weight_size()));  // and deterministic
}

TEST(layer_shapes, validate_rejects_impossible_shapes_naming_the_field) {
  auto s = make_conv(1, 1, 3, 3, 1, 3, 3, 1, 1, 0, 0);
  EXPECT_TRUE(validate(s).has_value());
  EXPECT_EQ(s.out_h(), 1);
  s.filters = 0;
  ASSERT_FALSE(validate(s).has_value());
  EXPECT_EQ(validate(s).error().code, errc::invalid_argument);
  EXPECT_NE(validate(s).error().message.find("'filters'"), std::string::npos);
  s = make_conv(1, 1, 2, 2, 1, 3, 3, 1, 1, 0, 0);  // kernel larger than the input
  EXPECT_FALSE(validate(s).has_value());
  s.pad_h = s.pad_w = 1;  // now it fits
  EXPECT_TRUE(validate(s).has_value());
  s.pad_h = 3;  // a window entirely in the padding
  EXPECT_FALSE(validate(s).has_value());
  s = make_conv(1 << 20, 1 << 10, 64, 64, 1, 1, 1, 1, 1, 0, 0);  // 2^42 elements
  ASSERT_FALSE(validate(s).has_value());
  EXPECT_NE(validate(s).error().message.find("int index range"), std::string::npos);
  auto p = make_pool(1, 1, 4, 4, 2, 2, 2, 2, 0, 0);
  EXPECT_TRUE(validate(p).has_value());
  EXPECT_EQ(p.out_h(), 2);
  p.pad_w = 2;
  EXPECT_FALSE(validate(p).has_value());
  batch_norm_shape bn;
  EXPECT_TRUE(validate(bn).has_value());
  bn.spatial = -1;
  EXPECT_FALSE(validate(bn).has_value());
}

// --- pooling --------------------------------------------------------------------------------

TEST_P(backend_test, max_and_avg_pool_match_hand_computed_values) {
  const std::vector<float> x{1,  2,  5, 3,   //
                             4,  0,  6, -1,  //
                             -2, -3, 7, 7,   //
                             -5, -4, 8, 9};
  const auto s = make_pool(1, 1, 4, 4, 2, 2, 2, 2, 0, 0);
  float* y = dev(std::vector<float>(4, nan_f));
  std::int32_t* arg = dev_indices(4);
  float* dx = dev(x);
  be_->max_pool2d_forward(s, dev(x), y, arg);
  EXPECT_EQ(host(y, 4), (std::vector<float>{4, 6, -2, 9}));
  EXPECT_EQ(host_indices(arg, 4), (std::vector<std::int32_t>{4, 6, 8, 15}));
  be_->max_pool2d_backward(s, dev({10, 20, 30, 40}), arg, dx);
  EXPECT_EQ(host(dx, 16), (std::vector<float>{0, 0, 0, 0, 10, 0, 20, 0, 30, 0, 0, 0, 0, 0, 0, 40}));
  be_->avg_pool2d_forward(s, dev(x), y);
  EXPECT_EQ(host(y, 4), (std::vector<float>{7.0f / 4, 13.0f / 4, -14.0f / 4, 31.0f / 4}));
  be_->avg_pool2d_backward(s, dev({4, 8, 12, 16}), dx);
  EXPECT_EQ(host(dx, 16), (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));

  // Ties go to the first maximum; a 3 x 3 window with stride 1 and padding 1 over a 2 x 2 image
  // never picks a pad even where every input is negative, and overlapping windows add up.
  const auto t = make_pool(1, 1, 2, 2, 3, 3, 1, 1, 1, 1);
  float* ty = dev(std::vector<float>(4, nan_f));
  std::int32_t* targ = dev_indices(4);
  be_->max_pool2d_forward(t, dev({-3, -1, -1, -2}), ty, targ);
  EXPECT_EQ(host(ty, 4), (std::vector<float>{-1, -1, -1, -1}));
  EXPECT_EQ(host_indices(targ, 4), (std::vector<std::int32_t>{1, 1, 1, 1}));
  float* tdx = dev(std::vector<float>(4, nan_f));
  be_->max_pool2d_backward(t, dev({1, 2, 3, 4}), targ, tdx);
  EXPECT_EQ(host(tdx, 4), (std::vector<float>{0, 10, 0, 0}));
  // Average with padding: pads count as zeros, the divisor is always 9.
  be_->avg_pool2d_forward(t, dev({9, 18, 27, 36}), ty);
  EXPECT_EQ(host(ty, 4), (std::vector<float>{10, 10, 10, 10}));
  // A NaN wins its window.
  be_->max_pool2d_forward(t, dev({1, nan_f, 3, 4}), ty, targ);
  for (float v : host(ty, 4)) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(host_indices(targ, 4), (std::vector<std::int32_t>{1, 1, 1, 1}));
}

TEST_P(backend_test, conv_backward_data_adds_in_the_gather_order_of_the_geometry) {
  // dx of each input is the sum of its column entries in geometry::col2im_sum's order (the
  // order the cuda kernel repeats): the cpu's scatter must give those bits exactly.
  for (const auto& s :
       {make_conv(2, 3, 9, 11, 4, 5, 3, 1, 1, 2, 1), make_conv(1, 2, 8, 7, 3, 3, 3, 2, 2, 1, 1),
        make_conv(1, 1, 6, 6, 2, 2, 2, 2, 1, 0, 1)}) {
    SCOPED_TRACE(testing::Message() << s.height << "x" << s.width << " kernel " << s.kernel_h << "x"
                                    << s.kernel_w << " stride " << s.stride_h << "," << s.stride_w);
    const auto w = random_floats(std::size_t(s.filters) * s.column_rows(), 31);
    const auto dy = random_floats(s.output_size(), 32);
    float* dx = dev(std::vector<float>(s.input_size(), nan_f));
    be_->conv2d_backward_data(s, dev(dy), dev(w), dx);
    const auto got = host(dx, s.input_size());
    const int plane = s.out_h() * s.out_w();
    const int crs = int(s.column_rows());
    const std::size_t image = std::size_t(s.channels) * s.height * s.width;
    for (int n = 0; n < s.batch; ++n) {
      // The columns W^T dy_n, from this backend's own product.
      float* col = dev(std::vector<float>(std::size_t(crs) * plane));
      be_->gemm(true, false, crs, plane, s.filters, 1.0f, dev(w), crs,
                dev(std::vector<float>(dy.begin() + std::ptrdiff_t(n) * s.filters * plane,
                                       dy.begin() + std::ptrdiff_t(n + 1) * s.filters * plane)),
                plane, 0.0f, col, plane);
      const auto cols = host(col, std::size_t(crs) * plane);
      for (int c = 0; c < s.channels; ++c)
        for (int ih = 0; ih < s.height; ++ih)
          for (int iw = 0; iw < s.width; ++iw) {
            const float want = geometry::col2im_sum(s, cols.data(), std::size_t(plane), c, ih, iw);
            const std::size_t i = n * image + (std::size_t(c) * s.height + ih) * s.width + iw;
            ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want))
                << "image " << n << " at " << c << "," << ih << "," << iw;
          }
    }
  }
}

TEST_P(backend_test, max_pool_2x2_equals_the_window_rule_with_ties_and_nans) {
  // The 2 x 2, stride 2 layer has a vector path four windows wide on the cpu: 13 columns give
  // six windows a row (one block of four and two alone) and one column never read. Values from
  // a small set make ties; a few NaNs must win their windows.
  const auto s = make_pool(2, 3, 9, 13, 2, 2, 2, 2, 0, 0);
  std::vector<float> x(s.input_size());
  std::mt19937 gen(77);
  for (auto& v : x) v = float(int(gen() % 5)) - 2.0f;
  for (std::size_t i = 0; i < x.size(); i += 37) x[i] = nan_f;
  float* y = dev(std::vector<float>(s.output_size(), 7.0f));
  std::int32_t* arg = dev_indices(s.output_size());
  be_->max_pool2d_forward(s, dev(x), y, arg);
  const auto got = host(y, s.output_size());
  const auto got_arg = host_indices(arg, s.output_size());
  const std::size_t in_plane = std::size_t(s.height) * s.width;
  const std::size_t out_plane = std::size_t(s.out_h()) * s.out_w();
  for (std::size_t nc = 0; nc < std::size_t(s.batch) * s.channels; ++nc)
    for (std::size_t o = 0; o < out_plane; ++o) {
      const auto want = geometry::max_window(s, x.data() + nc * in_plane, int(o));
      const std::size_t i = nc * out_plane + o;
      ASSERT_EQ(got_arg[i], want.index) << "plane " << nc << " output " << o;
      if (std::isnan(want.value))
        ASSERT_TRUE(std::isnan(got[i])) << "plane " << nc << " output " << o;
      else
        ASSERT_EQ(got[i], want.value) << "plane " << nc << " output " << o;
    }
}

TEST_P(backend_test, pooling_gradients_match_central_differences) {
  const pool2d_shape shapes[] = {
      make_pool(2, 3, 5, 6, 2, 2, 2, 2, 0, 0),  // disjoint windows, odd height
      make_pool(2, 2, 5, 5, 3, 3, 2, 2, 1, 1),  // overlapping, padded
      make_pool(1, 2, 4, 7, 3, 2, 1, 2, 1, 0),  // non-square window, stride and pad
  };
  std::uint32_t seed = 400;
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message()
                 << s.height << "x" << s.width << " window " << s.window_h << "x" << s.window_w);
    // Distinct inputs 0.1 apart (a shuffled ladder): a step of h = 0.01 never changes an argmax.
    std::vector<float> x(s.input_size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * float(i) - 3.0f;
    std::shuffle(x.begin(), x.end(), std::mt19937(++seed));
    const auto g = random_floats(s.output_size(), ++seed);
    float* dg = dev(g);
    float* probe = dev(x);
    float* y = dev(std::vector<float>(s.output_size()));
    std::int32_t* arg = dev_indices(s.output_size());
    float* dx = dev(std::vector<float>(s.input_size(), nan_f));

    be_->max_pool2d_forward(s, probe, y, arg);
    be_->max_pool2d_backward(s, dg, arg, dx);
    std::int32_t* scratch_arg = dev_indices(s.output_size());
    auto max_loss = [&](const std::vector<float>& v) {
      be_->upload(probe, v.data(), v.size());
      be_->max_pool2d_forward(s, probe, y, scratch_arg);
      return dot(host(y, s.output_size()), g);
    };
    expect_matches_differences(max_loss, x, host(dx, x.size()), 1e-2f, 1e-4, 1e-4, "max");

    be_->avg_pool2d_backward(s, dg, dx);
    auto avg_loss = [&](const std::vector<float>& v) {
      be_->upload(probe, v.data(), v.size());
      be_->avg_pool2d_forward(s, probe, y);
      return dot(host(y, s.output_size()), g);
    };
    // Linear: a wide step, as for the convolution.
    expect_matches_differences(avg_loss, x, host(dx, x.size()), 0.25f, 1e-4, 1e-4, "avg");
    if (HasFatalFailure()) return;
  }
}

// --- dropout --------------------------------------------------------------------------------

TEST_P(backend_test, dropout_mask_depends_on_seed_and_step_only_and_scales_kept_elements) {
  const std::size_t n = 100003;
  const float p = 0.3f;
  const float scale = 1.0f / (1.0f - p);
  const auto x = random_floats(n, 500, 0.5f, 1.5f);  // never zero: a zero output means dropped
  float* dx_in = dev(x);
  auto run = [&](std::uint64_t seed, std::uint64_t step) {
    float* y = dev(std::vector<float>(n, nan_f));
    be_->dropout_forward(dx_in, y, n, p, seed, step);
    return host(y, n);
  };
  const auto a = run(42, 7);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool keep = counter_rng::keeps(42, 7, i, p);  // the documented generator
    ASSERT_EQ(a[i], keep ? x[i] * scale : 0.0f) << "element " << i;
    kept += keep;
  }
  // Binomial(n, 0.7): the standard deviation of the kept fraction is 0.0015.
  EXPECT_NEAR(double(kept) / double(n), 1.0 - p, 0.01);
  EXPECT_EQ(run(42, 7), a);  // same seed and step: same mask
  auto differing = [&](const std::vector<float>& b) {
    std::size_t d = 0;
    for (std::size_t i = 0; i < n; ++i) d += (a[i] == 0.0f) != (b[i] == 0.0f);
    return double(d) / double(n);
  };
  // Independent masks disagree on 2 p (1 - p) = 42 % of elements.
  EXPECT_NEAR(differing(run(43, 7)), 2 * p * (1 - p), 0.02) << "another seed";
  EXPECT_NEAR(differing(run(42, 8)), 2 * p * (1 - p), 0.02) << "another step";

  // Backward: the same mask and scale, on the gradient; in place too.
  const auto dy = random_floats(n, 501);
  float* ddy = dev(dy);
  float* dxo = dev(std::vector<float>(n, nan_f));
  be_->dropout_backward(ddy, dxo, n, p, 42, 7);
  const auto got = host(dxo, n);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(got[i], a[i] != 0.0f ? dy[i] * scale : 0.0f) << "element " << i;
  be_->dropout_backward(ddy, ddy, n, p, 42, 7);
  EXPECT_EQ(host(ddy, n), got);

  // p = 0 keeps everything unscaled.
  float* y0 = dev(std::vector<float>(n, nan_f));
  be_->dropout_forward(dx_in, y0, n, 0.0f, 1, 1);
  EXPECT_EQ(host(y0, n), x);
}

TEST_P(backend_test, dropout_gradient_matches_central_differences) {
  const std::size_t n = 50;
  const auto x = random_floats(n, 510);
  const auto g = random_floats(n, 511);
  float* dx = dev(std::vector<float>(n, nan_f));
  be_->dropout_backward(dev(g), dx, n, 0.5f, 9, 3);
  float* probe = dev(x);
  float* y = dev(std::vector<float>(n));
  auto loss = [&](const std::vector<float>& v) {
    be_->upload(probe, v.data(), n);
    be_->dropout_forward(probe, y, n, 0.5f, 9, 3);
    return dot(host(y, n), g);
  };
  expect_matches_differences(loss, x, host(dx, n), 1e-2f, 1e-4, 1e-4, "dropout");
}

// --- batch norm -----------------------------------------------------------------------------

TEST_P(backend_test, batch_norm_training_normalizes_each_channel_and_updates_running_stats) {
  struct bn_case {
    batch_norm_shape s;
    const char* name;
  };
  const bn_case cases[] = {{{4, 3, 10}, "N x C x H W"}, {{16, 5, 1}, "dense layer (H = W = 1)"}};
  std::uint32_t seed = 600;
  for (const auto& bc : cases) {
    SCOPED_TRACE(bc.name);
    const auto& s = bc.s;
    const std::size_t total = s.size(), m = s.per_channel();
    const std::size_t c_n = std::size_t(s.channels), sp = std::size_t(s.spatial);
    // Channel c: values around 3 c with spread 1 + c.
    auto x = random_floats(total, ++seed, -2.0f, 2.0f);
    for (std::size_t i = 0; i < total; ++i) {
      const std::size_t c = (i / sp) % c_n;
      x[i] = 3.0f * float(c) + (1.0f + float(c)) * x[i];
    }
    const batch_norm_options o;  // momentum 0.1, eps 1e-5
    const std::vector<float> ones(c_n, 1.0f), zeros(c_n, 0.0f);
    const auto rm0 = random_floats(c_n, ++seed), rv0 = random_floats(c_n, ++seed, 0.5f, 2.0f);
    float* rm = dev(rm0);
    float* rv = dev(rv0);
    float* sm = dev(std::vector<float>(c_n, nan_f));
    float* si = dev(std::vector<float>(c_n, nan_f));
    float* y = dev(std::vector<float>(total, nan_f));
    be_->batch_norm_forward_train(s, o, dev(x), dev(ones), dev(zeros), y, rm, rv, sm, si);
    const auto out = host(y, total);
    const auto got_rm = host(rm, c_n), got_rv = host(rv, c_n);
    const auto got_sm = host(sm, c_n), got_si = host(si, c_n);
    for (std::size_t c = 0; c < c_n; ++c) {
      double mean = 0, var = 0, out_mean = 0, out_var = 0;
      auto each = [&](auto f) {
        for (std::size_t n = 0; n < std::size_t(s.batch); ++n)
          for (std::size_t i = 0; i < sp; ++i) f((n * c_n + c) * sp + i);
      };
      each([&](std::size_t i) { mean += x[i]; });
      mean /= double(m);
      each([&](std::size_t i) { var += (x[i] - mean) * (x[i] - mean); });
      var /= double(m);
      each([&](std::size_t i) { out_mean += out[i]; });
      out_mean /= double(m);
      each([&](std::size_t i) { out_var += (out[i] - out_mean) * (out[i] - out_mean); });
      out_var /= double(m);
      EXPECT_NEAR(out_mean, 0.0, 1e-5) << "channel " << c;
      EXPECT_NEAR(out_var, var / (var + 1e-5), 1e-5) << "channel " << c;  // ~1
      EXPECT_NEAR(got_sm[c], mean, 1e-6 * (1 + std::abs(mean)));
      EXPECT_NEAR(got_si[c], 1.0 / std::sqrt(var + 1e-5), 1e-6 / std::sqrt(var));
      EXPECT_NEAR(got_rm[c], 0.9 * rm0[c] + 0.1 * mean, 1e-6 * (1 + std::abs(mean)));
      const double unbiased = var * double(m) / double(m - 1);
      EXPECT_NEAR(got_rv[c], 0.9 * rv0[c] + 0.1 * unbiased, 1e-6 * (1 + unbiased));
    }
    // gamma and beta scale and shift the normalized output; y may alias x.
    const auto gamma = random_floats(c_n, ++seed, 0.5f, 2.0f);
    const auto beta = random_floats(c_n, ++seed);
    float* inplace = dev(x);
    be_->batch_norm_forward_train(s, o, inplace, dev(gamma), dev(beta), inplace, rm, rv, sm, si);
    const auto affine = host(inplace, total);
    for (std::size_t i = 0; i < total; ++i) {
      const std::size_t c = (i / sp) % c_n;
      ASSERT_NEAR(affine[i], gamma[c] * out[i] + beta[c], 1e-5 * (1 + std::abs(out[i])));
    }
  }
}

TEST_P(backend_test, batch_norm_inference_uses_the_running_statistics) {
  const batch_norm_shape s{3, 2, 4};
  const auto x = random_floats(s.size(), 620, -3.0f, 3.0f);
  const std::vector<float> gamma{2.0f, -1.0f}, beta{0.5f, 1.0f};
  const std::vector<float> rm{1.0f, -2.0f}, rv{4.0f, 0.25f};
  batch_norm_options o;
  o.epsilon = 0.0f;  // 1 / sqrt(4) and 1 / sqrt(0.25) are exact
  float* y = dev(std::vector<float>(s.size(), nan_f));
  float* drm = dev(rm);
  float* drv = dev(rv);
  be_->batch_norm_forward_inference(s, o, dev(x), dev(gamma), dev(beta), drm, drv, y);
  const auto got = host(y, s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const std::size_t c = (i / 4) % 2;
    const float inv = c == 0 ? 0.5f : 2.0f;
    ASSERT_EQ(got[i], gamma[c] * ((x[i] - rm[c]) * inv) + beta[c]) << i;
  }
  EXPECT_EQ(host(drm, 2), rm);  // nothing updated
  EXPECT_EQ(host(drv, 2), rv);
}

TEST_P(backend_test, batch_norm_gradients_match_central_differences) {
  const batch_norm_shape shapes[] = {{3, 2, 5}, {6, 3, 1}};
  std::uint32_t seed = 700;
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message() << s.batch << " x " << s.channels << " x " << s.spatial);
    const std::size_t total = s.size(), c_n = std::size_t(s.channels);
    const auto x = random_floats(total, ++seed, -2.0f, 2.0f);
    const auto gamma = random_floats(c_n, ++seed, 0.5f, 1.5f);
    const auto beta = random_floats(c_n, ++seed);
    const auto g = random_floats(total, ++seed);
    const batch_norm_options o;
    float* rm = dev(std::vector<float>(c_n));
    float* rv = dev(std::vector<float>(c_n, 1.0f));
    float* sm = dev(std::vector<float>(c_n));
    float* si = dev(std::vector<float>(c_n));
    float* px = dev(x);
    float* pg = dev(gamma);
    float* pb = dev(beta);
    float* y = dev(std::vector<float>(total));
    be_->batch_norm_forward_train(s, o, px, pg, pb, y, rm, rv, sm, si);
    float* dx = dev(std::vector<float>(total, nan_f));
    float* dgamma = dev(std::vector<float>(c_n, nan_f));
    float* dbeta = dev(std::vector<float>(c_n, nan_f));
    be_->batch_norm_backward(s, px, dev(g), pg, sm, si, dx, dgamma, dbeta);
    auto loss = [&](float* param, std::size_t n) {
      return [&, param, n](const std::vector<float>& v) {
        be_->upload(param, v.data(), n);
        be_->batch_norm_forward_train(s, o, px, pg, pb, y, rm, rv, sm, si);
        return dot(host(y, total), g);
      };
    };
    // Non-linear in x: h = 1e-2 leaves a truncation error of order h^2.
    expect_matches_differences(loss(px, total), x, host(dx, total), 1e-2f, 2e-3, 1e-2, "dx");
    be_->upload(px, x.data(), total);
    expect_matches_differences(loss(pg, c_n), gamma, host(dgamma, c_n), 1e-2f, 1e-3, 1e-3,
                               "dgamma");
    be_->upload(pg, gamma.data(), c_n);
    expect_matches_differences(loss(pb, c_n), beta, host(dbeta, c_n), 1e-2f, 1e-3, 1e-3, "dbeta");
    // dx aliasing dy gives the same gradient.
    float* inplace = dev(g);
    be_->batch_norm_forward_train(s, o, px, pg, pb, y, rm, rv, sm, si);
    be_->batch_norm_backward(s, px, inplace, pg, sm, si, inplace, dgamma, dbeta);
    EXPECT_EQ(host(inplace, total), host(dx, total));
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(all, backend_test, ::testing::ValuesIn(tested_backends()),
                         [](const ::testing::TestParamInfo<tested_backend>& info) {
                           return info.param.name;
                         });

// --- factory --------------------------------------------------------------------------------

TEST(cpu_gemm_choice, best_takes_the_widest_packed_kernel_the_cpu_has) {
  const cpu_backend best;
  const cpu_gemm expected = detail::cpu_has_avx512f()    ? cpu_gemm::avx512
                            : detail::cpu_has_avx2_fma() ? cpu_gemm::avx2_fma
                                                         : cpu_gemm::eigen;
  EXPECT_EQ(best.gemm_kind(), expected);
  EXPECT_EQ(cpu_backend(cpu_gemm::eigen).gemm_kind(), cpu_gemm::eigen);
  EXPECT_EQ(to_string(cpu_gemm::avx2_fma), "avx2");
  EXPECT_EQ(to_string(cpu_gemm::avx512), "avx512");
}

TEST(cpu_gemm_choice, avx512_products_are_the_avx2_products_bit_for_bit) {
  if (!detail::cpu_has_avx512f()) GTEST_SKIP() << "this CPU has no AVX-512F";
  // Shapes around both tiles' edges (6 x 16 and 8 x 32), k across the 256-term block, every
  // transpose, and alpha/beta that read C: an AVX2 machine and an AVX-512 one train to the same
  // bits.
  cpu_backend avx2(cpu_gemm::avx2_fma), avx512(cpu_gemm::avx512);
  const int shapes[][3] = {{1, 1, 1},      {7, 33, 5},     {8, 32, 256},  {9, 17, 257},
                           {32, 196, 400}, {400, 196, 32}, {130, 70, 600}};
  std::uint32_t seed = 100;
  for (const auto& [m, n, k] : shapes)
    for (int tr = 0; tr < 4; ++tr) {
      const bool ta = (tr & 1) != 0, tb = (tr & 2) != 0;
      const auto a = random_floats(std::size_t(m) * k, ++seed);
      const auto b = random_floats(std::size_t(k) * n, ++seed);
      const auto c0 = random_floats(std::size_t(m) * n, ++seed);
      for (const auto& [alpha, beta] :
           {std::pair{1.0f, 0.0f}, std::pair{0.5f, 1.0f}, std::pair{-1.5f, 0.25f}}) {
        auto x = c0, y = c0;
        avx2.gemm(ta, tb, m, n, k, alpha, a.data(), ta ? m : k, b.data(), tb ? k : n, beta,
                  x.data(), n);
        avx512.gemm(ta, tb, m, n, k, alpha, a.data(), ta ? m : k, b.data(), tb ? k : n, beta,
                    y.data(), n);
        ASSERT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float)))
            << m << "x" << n << "x" << k << " trans " << ta << tb << " alpha " << alpha << " beta "
            << beta;
      }
    }
}

TEST(cpu_gemm_choice, an_avx2_element_depends_only_on_its_row_and_column) {
  if (!detail::cpu_has_avx2_fma()) GTEST_SKIP() << "this CPU has no AVX2 and FMA";
  // Row 3 of a 40 x 50 product, computed alone (m = 1) and inside the whole: the same bits, so a
  // sample's activations do not depend on the batch around it.
  const int m = 40, n = 50, k = 300;
  const auto a = random_floats(std::size_t(m) * k, 11);
  const auto b = random_floats(std::size_t(k) * n, 12);
  cpu_backend be(cpu_gemm::avx2_fma);
  std::vector<float> whole(std::size_t(m) * n), one(n);
  be.gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, whole.data(), n);
  be.gemm(false, false, 1, n, k, 1.0f, a.data() + 3 * k, k, b.data(), n, 0.0f, one.data(), n);
  EXPECT_TRUE(std::equal(one.begin(), one.end(), whole.begin() + 3 * n));
}

// The convolutions' packed paths (columns from the image, weights packed once per batch) on
// both tiles: cpu_kernel_test.cpp.

TEST(backend_factory, parses_and_prints_every_kind) {
  for (backend_kind kind : {backend_kind::auto_select, backend_kind::cpu, backend_kind::cuda}) {
    auto parsed = parse_backend_kind(to_string(kind));
    ASSERT_TRUE(parsed) << parsed.error().to_string();
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_EQ(to_string(backend_kind::auto_select), "auto");
}

TEST(backend_factory, rejects_an_unknown_kind_naming_it) {
  auto parsed = parse_backend_kind("gpu");
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.error().code, errc::invalid_argument);
  EXPECT_NE(parsed.error().message.find("'gpu'"), std::string::npos) << parsed.error().message;
}

TEST(backend_factory, makes_cpu_and_auto_falls_back_to_it) {
  auto cpu = make_backend(backend_kind::cpu);
  ASSERT_TRUE(cpu) << cpu.error().to_string();
  EXPECT_EQ((*cpu)->name(), "cpu");
  auto any = make_backend(backend_kind::auto_select);
  ASSERT_TRUE(any) << any.error().to_string();
  EXPECT_EQ((*any)->name(), cuda_device_present() ? "cuda" : "cpu");
}

}  // namespace
}  // namespace coach::kernels
