// kernels::backend's activations, dropout and batch norm on every backend of the build
// (tests/helpers/backend_fixture.hpp): against their formulas, hand-computed statistics and
// central differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "kernels/counter_rng.hpp"
#include "kernels/layer_geometry.hpp"

#include "tests/helpers/backend_fixture.hpp"

namespace coach::kernels {
namespace {

using namespace backend_testing;

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

INSTANTIATE_TEST_SUITE_P(all, backend_test, ::testing::ValuesIn(tested_backends()), backend_name);

}  // namespace
}  // namespace coach::kernels
