// kernels::backend's dense ops on every backend of the build (tests/helpers/backend_fixture.hpp),
// each against a direct reference computed in double: memory, gemm, rows and columns, the
// elementwise ops, softmax cross-entropy; and the choice of the cpu's matrix product and of the
// backend (the factory functions).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tests/helpers/backend_fixture.hpp"

namespace coach::kernels::backend_testing {

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

}  // namespace coach::kernels::backend_testing

namespace coach::kernels {
namespace {

using namespace backend_testing;

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

INSTANTIATE_TEST_SUITE_P(all, backend_test, ::testing::ValuesIn(tested_backends()), backend_name);

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
