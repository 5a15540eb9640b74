// kernels::backend's optimizer updates (SGD, momentum, Adam) on every backend of the build
// (tests/helpers/backend_fixture.hpp): against a scalar reference over three steps, and an update
// cut into pieces equal to one update bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/helpers/backend_fixture.hpp"

namespace coach::kernels {
namespace {

using namespace backend_testing;

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

INSTANTIATE_TEST_SUITE_P(all, backend_test, ::testing::ValuesIn(tested_backends()), backend_name);

}  // namespace
}  // namespace coach::kernels
