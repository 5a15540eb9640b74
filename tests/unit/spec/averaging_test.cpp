// Model averaging (consistency averaging:K): a worker's local rounds (worker/local_averaging) and
// the shard's samples-weighted mean of the members' models (ps::shard with
// scheduler::shard_optimizer), with known deltas and a known result.
#include <gtest/gtest.h>

#include <random>

#include "ps/shard.hpp"
#include "spec/job_spec.hpp"
#include "worker/local_averaging.hpp"

namespace coach {
namespace {

std::unique_ptr<kernels::backend> cpu() {
  return std::move(*kernels::make_backend(kernels::backend_kind::cpu));
}

scheduler::job_spec averaging_spec() {
  scheduler::job_spec spec;
  spec.consistency = {scheduler::consistency_kind::averaging, 0, 4};
  spec.optimizer.kind = ps::optimizer_kind::momentum;
  spec.optimizer.sgd = {0.1f, 0.9f, 0.01f};
  return spec;
}

ps::contribution delta(std::uint32_t rank, std::uint64_t samples, std::vector<float> d) {
  auto keep = std::make_shared<std::vector<float>>(std::move(d));
  ps::contribution c;
  c.rank = rank;
  c.samples = samples;
  c.parts.push_back(std::span<const float>(*keep));
  c.keep_alive = keep;
  return c;
}

TEST(averaging, the_shard_averages_the_members_models_weighted_by_their_samples_exactly) {
  auto be = cpu();
  const std::vector<float> w0{1.0f, -2.0f, 0.5f, 8.0f};
  ps::shard s(0, scheduler::shard_optimizer(averaging_spec()), *be, {{0, 4}}, w0);
  s.set_members({0, 1, 2});
  // The members' models after their local steps, and the samples each trained on.
  const std::vector<std::vector<float>> w{
      {2.0f, -2.0f, 0.5f, 0.0f}, {1.0f, 2.0f, 1.5f, 8.0f}, {0.0f, -6.0f, 0.5f, 4.0f}};
  const std::uint64_t n[] = {1, 2, 5};  // weights 1/8, 2/8, 5/8: exact in binary
  for (std::uint32_t r = 0; r < 3; ++r) {
    std::vector<float> d(4);
    for (std::size_t i = 0; i < 4; ++i) d[i] = float(n[r]) * (w0[i] - w[r][i]);
    ASSERT_TRUE(s.push(0, delta(r, n[r], d)));
  }
  ASSERT_EQ(s.applied_steps(), 1);
  for (std::size_t i = 0; i < 4; ++i) {
    const float expected = (1.0f * w[0][i] + 2.0f * w[1][i] + 5.0f * w[2][i]) / 8.0f;
    EXPECT_EQ(s.values()[i], expected) << "key " << i;
  }
  EXPECT_EQ(s.values()[0], 0.5f);  // 1/8 * 2 + 2/8 * 1 + 5/8 * 0
  EXPECT_EQ(s.values()[3], 4.5f);  // 1/8 * 0 + 2/8 * 8 + 5/8 * 4
  EXPECT_EQ(s.last_step_samples(), 8u);
}

TEST(averaging, a_member_without_data_does_not_weigh) {
  auto be = cpu();
  const std::vector<float> w0{4.0f, 4.0f};
  ps::shard s(0, scheduler::shard_optimizer(averaging_spec()), *be, {{0, 2}}, w0);
  s.set_members({0, 1});
  ASSERT_TRUE(s.push(0, delta(0, 0, {})));
  ASSERT_TRUE(s.push(0, delta(1, 4, {4.0f * (4.0f - 1.0f), 4.0f * (4.0f - 3.0f)})));
  EXPECT_EQ(s.values()[0], 1.0f);
  EXPECT_EQ(s.values()[1], 3.0f);
}

/// A small data set and model whose local steps are checked against plain SGD written out.
struct fixture {
  std::unique_ptr<kernels::backend> be = cpu();
  worker::dataset data;
  worker::network model =
      worker::network::build(worker::model_config{.hidden = {6}}, {1, 1, 5}, 3).value();
  fixture() {
    data.rows = 12;
    data.features = 5;
    data.classes = 3;
    std::mt19937 rng(4);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (std::size_t i = 0; i < data.rows * data.features; ++i) data.x.push_back(u(rng));
    for (std::size_t i = 0; i < data.rows; ++i) data.y.push_back(std::int32_t(i % 3));
  }
};

TEST(averaging, local_steps_are_sgd_one_per_chunk_and_the_push_is_n_times_the_models_delta) {
  fixture f;
  const std::size_t n = f.model.num_params();
  std::vector<float> w0(n);
  f.model.init_params(w0, 7);
  const kernels::sgd_options opt{0.2f, 0.0f, 0.0f};
  worker::network_runner runner(f.model, *f.be, 4);
  worker::local_averaging avg(*f.be, n, opt);
  const std::vector<std::uint32_t> idx{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<std::uint32_t> sizes{4, 4, 2};
  std::vector<float> d(n);
  const auto o = avg.run(runner, w0.data(), f.data, idx, sizes, d.data());
  EXPECT_EQ(o.samples, 10u);

  // The same three SGD steps written out.
  std::vector<float> w = w0, g(n);
  double loss = 0;
  std::size_t at = 0;
  for (auto size : sizes) {
    loss += runner.forward_backward(w.data(), f.data, std::span(idx).subspan(at, size), g.data());
    for (std::size_t i = 0; i < n; ++i) w[i] -= opt.learning_rate * (g[i] * (1.0f / float(size)));
    at += size;
  }
  EXPECT_NEAR(o.loss_sum, loss, 1e-9 * std::abs(loss));
  double moved = 0;
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(d[i], 10.0f * (w0[i] - w[i]), 1e-5f) << "param " << i;
    moved += std::abs(d[i]);
  }
  EXPECT_GT(moved, 0.1) << "the local steps changed the model";
  // Two passes over the same chunks: the same six steps written out.
  std::vector<float> twice(n), w2 = w0;
  const auto o2 = avg.run(runner, w0.data(), f.data, idx, sizes, twice.data(), 2);
  EXPECT_EQ(o2.samples, 20u);
  for (int pass = 0; pass < 2; ++pass) {
    std::size_t off = 0;
    for (auto size : sizes) {
      runner.forward_backward(w2.data(), f.data, std::span(idx).subspan(off, size), g.data());
      for (std::size_t i = 0; i < n; ++i)
        w2[i] -= opt.learning_rate * (g[i] * (1.0f / float(size)));
      off += size;
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_NEAR(twice[i], 20.0f * (w0[i] - w2[i]), 2e-5f) << "param " << i;
  // w0 is only read, and a second round starts from it again: the same push.
  std::vector<float> again(n);
  avg.run(runner, w0.data(), f.data, idx, sizes, again.data());
  EXPECT_EQ(again, d);
}

TEST(averaging, one_local_step_averaged_over_members_is_the_bsp_sgd_step) {
  fixture f;
  const std::size_t n = f.model.num_params();
  std::vector<float> w0(n);
  f.model.init_params(w0, 9);
  const kernels::sgd_options opt{0.1f, 0.0f, 0.0f};
  worker::network_runner runner(f.model, *f.be, 8);
  worker::local_averaging avg(*f.be, n, opt);
  // Two members, one chunk each: the average of their models is w0 - lr * (g0 + g1) / N.
  const std::vector<std::uint32_t> a{0, 1, 2, 3, 4}, b{5, 6, 7};
  const std::uint32_t sa[] = {5}, sb[] = {3};
  std::vector<float> da(n), db(n), ga(n), gb(n);
  avg.run(runner, w0.data(), f.data, a, sa, da.data());
  avg.run(runner, w0.data(), f.data, b, sb, db.data());
  runner.forward_backward(w0.data(), f.data, a, ga.data());
  runner.forward_backward(w0.data(), f.data, b, gb.data());
  ps::shard s(0, scheduler::shard_optimizer(averaging_spec()), *f.be, {{0, n}}, w0);
  s.set_members({0, 1});
  ASSERT_TRUE(s.push(0, delta(0, 5, da)));
  ASSERT_TRUE(s.push(0, delta(1, 3, db)));
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_NEAR(s.values()[i], w0[i] - opt.learning_rate * (ga[i] + gb[i]) / 8.0f, 1e-5f)
        << "param " << i;
}

}  // namespace
}  // namespace coach
