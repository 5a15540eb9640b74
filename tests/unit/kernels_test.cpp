// kernels::backend: every op against a direct reference computed in double, on every backend of
// the build (the same suite for each implementation of the seam), plus the factory functions.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"

namespace coach::kernels {
namespace {

constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();

/// Backends the parameterized suite runs on. The cuda backend joins this list once it is built
/// (COACH_HAVE_CUDA) and make_backend(backend_kind::cuda) returns one.
/// Every op's finite-difference and reference checks run on each backend this host can make
/// (cuda where a device is visible: the GPU machine).
std::vector<backend_kind> tested_backends() {
  std::vector<backend_kind> out{backend_kind::cpu};
  if (cuda_device_present()) out.push_back(backend_kind::cuda);
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
class backend_test : public ::testing::TestWithParam<backend_kind> {
 protected:
  void SetUp() override {
    auto made = make_backend(GetParam());
    ASSERT_TRUE(made) << made.error().to_string();
    be_ = std::move(*made);
  }

  void TearDown() override {
    for (float* p : owned_) be_->free(p);
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

  /// Runs one gemm against a double reference (defined with the gemm tests).
  void check_gemm(bool ta, bool tb, const gemm_case& g, float alpha, float beta,
                  std::uint32_t seed);

  std::unique_ptr<backend> be_;
  std::vector<float*> owned_;
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

INSTANTIATE_TEST_SUITE_P(all, backend_test, ::testing::ValuesIn(tested_backends()),
                         [](const ::testing::TestParamInfo<backend_kind>& info) {
                           return std::string(to_string(info.param));
                         });

// --- factory --------------------------------------------------------------------------------

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

TEST(backend_factory, cuda_is_unsupported_without_cuda_in_the_build) {
#ifdef COACH_HAVE_CUDA
  GTEST_SKIP() << "this build has CUDA";
#else
  EXPECT_EQ(compiled_backends(), "cpu");
  EXPECT_FALSE(cuda_device_present());
  auto cuda = make_backend(backend_kind::cuda);
  ASSERT_FALSE(cuda);
  EXPECT_EQ(cuda.error().code, errc::unsupported);
  EXPECT_NE(cuda.error().message.find("COACH_ENABLE_CUDA"), std::string::npos)
      << cuda.error().message;
#endif
}

}  // namespace
}  // namespace coach::kernels
