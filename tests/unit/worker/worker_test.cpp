// worker/: the MLP's gradient against finite differences and its initialization.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "worker/network.hpp"

namespace coach::worker {
namespace {

dataset random_data(std::size_t rows, std::size_t features, int classes, unsigned seed) {
  dataset d;
  d.rows = rows;
  d.features = features;
  d.classes = classes;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  d.x.resize(rows * features);
  for (auto& v : d.x) v = u(rng);
  for (std::size_t i = 0; i < rows; ++i) d.y.push_back(std::int32_t(rng() % unsigned(classes)));
  return d;
}

TEST(mlp, layout_matches_the_documented_flat_order) {
  model_config cfg;
  cfg.hidden = {5, 4};
  auto m = network::build(cfg, {1, 1, 3}, 2).value();
  ASSERT_EQ(m.layers().size(), 5u);  // dense relu dense relu dense
  EXPECT_EQ(m.num_params(), 3u * 5 + 5 + 5 * 4 + 4 + 4 * 2 + 2);
  EXPECT_EQ(m.layers()[2].param_offset, 20u);
  EXPECT_EQ(m.layers()[2].param_count, 5u * 4 + 4);
  const auto t = m.tensors();
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[2].name, "2.weight");
  EXPECT_EQ(t[2].shape, (std::vector<std::int64_t>{4, 5}));  // PyTorch's out x in
  EXPECT_EQ(t[3].offset, 40u);
}

TEST(mlp, init_is_a_pure_function_of_the_seed) {
  model_config cfg;
  cfg.hidden = {16};
  auto m = network::build(cfg, {1, 1, 8}, 3).value();
  std::vector<float> a(m.num_params()), b(m.num_params()), c(m.num_params());
  m.init_params(a, 42);
  m.init_params(b, 42);
  m.init_params(c, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const float limit = std::sqrt(6.0f / 8.0f);
  for (std::size_t i = 0; i < 8 * 16; ++i) EXPECT_LE(std::abs(a[i]), limit);
  for (std::size_t i = 8 * 16; i < 8 * 16 + 16; ++i) EXPECT_EQ(a[i], 0.0f);
}

TEST(mlp, gradient_matches_finite_differences) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  model_config cfg;
  cfg.hidden = {7, 5};
  auto m = network::build(cfg, {1, 1, 6}, 4).value();
  auto data = random_data(9, 6, 4, 3);
  std::vector<float> params(m.num_params()), grad(m.num_params());
  m.init_params(params, 5);
  for (std::size_t i = 0; i < params.size(); ++i)
    params[i] += 0.01f * float(i % 7);  // non-zero biases
  network_runner run(m, *be, 16);
  std::vector<std::uint32_t> idx{0, 1, 2, 3, 4, 5, 6, 7, 8};
  run.forward_backward(params.data(), data, idx, grad.data());
  std::vector<float> scratch(m.num_params());
  auto loss_at = [&](std::size_t i, float delta) {
    auto p = params;
    p[i] += delta;
    return run.forward_backward(p.data(), data, idx, scratch.data());
  };
  std::size_t checked = 0;
  for (std::size_t i = 0; i < params.size(); i += 3) {
    // ReLU has kinks: where a perturbation crosses one, the central difference depends on the
    // step. Compare only where two steps agree (the loss is smooth there).
    const auto fd_at = [&](float h) { return (loss_at(i, h) - loss_at(i, -h)) / (2.0 * h); };
    const double fd = fd_at(1e-3f), fd_half = fd_at(5e-4f);
    if (std::abs(fd - fd_half) > 1e-3 + 1e-3 * std::abs(fd)) continue;
    EXPECT_NEAR(grad[i], fd, 5e-3 + 1e-2 * std::abs(fd)) << "param " << i;
    ++checked;
  }
  EXPECT_GT(checked, 30u);
}

TEST(mlp, empty_batch_gives_zero_gradient_and_loss) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  auto m = network::build(model_config{}, {1, 1, 4}, 3).value();
  auto data = random_data(4, 4, 3, 1);
  std::vector<float> params(m.num_params(), 0.5f), grad(m.num_params(), 7.0f);
  network_runner run(m, *be, 4);
  EXPECT_EQ(run.forward_backward(params.data(), data, {}, grad.data()), 0.0);
  for (float g : grad) EXPECT_EQ(g, 0.0f);
}

}  // namespace
}  // namespace coach::worker
