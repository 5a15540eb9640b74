// AdaScale's gain (ps/adascale.hpp) with numbers worked by hand: the noise and signal estimated
// from a step's contributions, the sums adding up shard by shard, the gain and its bounds, the
// worker adding up the shards' sums, and shards that fold in the same totals stepping every key
// with the same rate, the estimate moving with the keys.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ps/adascale.hpp"
#include "ps/shard.hpp"

namespace coach {
namespace {

using ps::adascale_gain;
using ps::grad_stats;
using ps::key_range;
using ps::shard;

// Three workers of one sample each, two keys: s1 = (1, 0), s2 = (3, 0), s3 = (2, 3). Mean (2, 1);
// deviations (-1, -1), (1, -1), (0, 2): squared 2 + 2 + 4 = 8 over K - 1 = 2: var = 4.
// |mean|^2 = 5, less var / N = 4 / 3: mu2 = 11 / 3.
const std::vector<std::vector<float>> grads{{1, 0}, {3, 0}, {2, 3}};

grad_stats stats_over(std::size_t begin, std::size_t end) {
  grad_stats st;
  st.version = 1;
  st.samples = 3;
  st.contributions = 3;
  std::vector<const float*> parts;
  std::vector<float> sum(end - begin, 0.0f);
  for (const auto& g : grads) {
    parts.push_back(g.data() + begin);
    for (std::size_t i = begin; i < end; ++i) sum[i - begin] += g[i];
  }
  const std::vector<std::uint64_t> samples(grads.size(), 1);
  ps::add_to_stats(st, parts, samples, sum.data(), end - begin);
  return st;
}

TEST(adascale, the_noise_and_the_signal_are_estimated_from_the_contributions) {
  const auto st = stats_over(0, 2);
  EXPECT_DOUBLE_EQ(st.parts_sq, 1 + 9 + 4 + 9);
  EXPECT_DOUBLE_EQ(st.sum_sq, 36 + 9);
  adascale_gain g;
  EXPECT_EQ(g.gain(2, 3), 1.0) << "nothing observed yet";
  ASSERT_TRUE(g.observe(st));
  EXPECT_DOUBLE_EQ(g.variance(), 4);
  EXPECT_DOUBLE_EQ(g.mean_sq(), 11.0 / 3);
  // Against a reference batch of 2, a step of 3: (11/3 + 4/2) / (11/3 + 4/3) = 17/15.
  EXPECT_DOUBLE_EQ(g.gain(2, 3), 17.0 / 15);
  EXPECT_DOUBLE_EQ(g.gain(3, 3), 1.0) << "at the reference batch";
  EXPECT_LT(g.gain(3, 2), 1.0) << "fewer samples than the reference: a smaller rate";
}

TEST(adascale, the_sums_of_the_shards_add_up_to_those_of_the_whole_gradient) {
  auto a = stats_over(0, 1);
  const auto b = stats_over(1, 2);
  a.add(b);
  const auto whole = stats_over(0, 2);
  EXPECT_DOUBLE_EQ(a.parts_sq, whole.parts_sq);
  EXPECT_DOUBLE_EQ(a.sum_sq, whole.sum_sq);
}

TEST(adascale, the_gain_stays_between_one_and_the_scale) {
  adascale_gain pure_signal, pure_noise;
  // Every contribution the same gradient: no noise, nothing gained by averaging more.
  ASSERT_TRUE(pure_signal.observe({1, 2 * 4.0 / 2, 16, 4, 2}));  // s_k = (2) twice, n_k = 2
  EXPECT_DOUBLE_EQ(pure_signal.variance(), 0);
  EXPECT_DOUBLE_EQ(pure_signal.gain(4, 16), 1.0);
  // Opposite gradients: only noise, the gain is the whole scale.
  ASSERT_TRUE(pure_noise.observe({1, 1 + 1, 0, 2, 2}));  // s_1 = (1), s_2 = (-1)
  EXPECT_DOUBLE_EQ(pure_noise.gain(2, 16), 8.0);
}

TEST(adascale, the_estimate_is_an_average_over_steps_and_a_step_counts_once) {
  adascale_gain g;
  ASSERT_TRUE(g.observe({1, 2, 0, 2, 2}));  // var 2, mu2 -1
  EXPECT_FALSE(g.observe({1, 100, 0, 2, 2})) << "the same version again (another push)";
  EXPECT_FALSE(g.observe({0, 100, 0, 2, 2})) << "an older one";
  ASSERT_TRUE(g.observe({2, 4, 0, 2, 2}));  // var 4
  EXPECT_DOUBLE_EQ(g.variance(), 0.9 * 2 + 0.1 * 4);
  EXPECT_EQ(grad_stats::from_list(std::vector<double>{1, 2, 0, 2, 1}), std::nullopt)
      << "one contribution says nothing of the noise";
  EXPECT_EQ(grad_stats::from_list(std::vector<double>{1, 2, 0}), std::nullopt);
  const auto back = grad_stats::from_list(grad_stats{7, 1, 2, 3, 4}.to_list());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->version, 7);
  EXPECT_EQ(back->contributions, 4);
}

TEST(adascale, a_worker_adds_up_every_shards_sums_of_a_version) {
  ps::stats_gatherer w;
  w.take(20, stats_over(1, 2).to_list());
  w.take(10, stats_over(0, 1).to_list());
  w.take(30, std::vector<double>{1, 2});  // malformed: ignored
  const auto t = w.total(1);
  ASSERT_TRUE(t);
  EXPECT_DOUBLE_EQ(t->parts_sq, 23);
  EXPECT_DOUBLE_EQ(t->sum_sq, 45);
  EXPECT_EQ(w.total(2), std::nullopt);
  w.forget_before(2);
  EXPECT_EQ(w.total(1), std::nullopt);
}

ps::contribution push_of(std::uint32_t rank, const std::vector<float>& g, const shard& s,
                         std::optional<grad_stats> totals = std::nullopt) {
  auto full = std::make_shared<const std::vector<float>>(g);
  ps::contribution c;
  c.rank = rank;
  c.samples = 1;
  for (const auto& r : s.ranges()) c.parts.emplace_back(full->data() + r.begin, r.size());
  c.keep_alive = full;
  c.stats = totals;
  return c;
}

TEST(adascale, shards_given_the_same_totals_step_every_key_with_the_same_gain) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  ps::optimizer_config o;  // plain sgd
  o.sgd.learning_rate = 1.0f;
  o.lr_scaling = ps::lr_scaling_kind::adascale;
  o.reference_batch = 2;  // the rate as configured holds at 2 samples a step
  shard a(0, o, *be, {{0, 1}}, std::vector<float>{0});
  shard b(1, o, *be, {{1, 2}}, std::vector<float>{0});
  for (auto* s : {&a, &b}) {
    s->set_members({0, 1, 2});
    // Step 0: no totals yet: gain 1, the mean gradient (2, 1) at rate 1.
    for (std::uint32_t k = 0; k < 3; ++k) ASSERT_TRUE(s->push(0, push_of(k, grads[k], *s)));
  }
  EXPECT_EQ(a.values()[0], -2.0f);
  EXPECT_EQ(b.values()[0], -1.0f);
  // Each shard's sums of the step that made version 1; a worker adds them up.
  ASSERT_TRUE(a.step_stats(1) && b.step_stats(1));
  EXPECT_EQ(a.step_stats(2), std::nullopt);
  ps::stats_gatherer w;
  w.take(0, a.step_stats(1)->to_list());
  w.take(1, b.step_stats(1)->to_list());
  const auto totals = w.total(1);
  ASSERT_TRUE(totals);
  EXPECT_DOUBLE_EQ(totals->parts_sq, 23);
  // Step 1: mean gradient (1, 1); the totals come with rank 1's push only, enough: gain 17/15.
  for (auto* s : {&a, &b}) {
    ASSERT_TRUE(s->push(1, push_of(0, {1, 1}, *s)));
    ASSERT_TRUE(s->push(1, push_of(1, {1, 1}, *s, totals)));
    ASSERT_TRUE(s->push(1, push_of(2, {1, 1}, *s)));
  }
  EXPECT_FLOAT_EQ(a.values()[0], -2.0f - 17.0f / 15);
  EXPECT_FLOAT_EQ(b.values()[0], -1.0f - 17.0f / 15);
  EXPECT_EQ(a.gain().variance(), b.gain().variance());
  // The estimate goes with keys handed to a new shard.
  shard c(2, o, *be, {}, std::vector<float>{});
  auto t = a.release({{0, 1}}, 2);
  ASSERT_TRUE(t);
  ASSERT_TRUE(c.adopt(std::move(*t)));
  EXPECT_EQ(c.gain().variance(), a.gain().variance());
  EXPECT_EQ(c.gain().mean_sq(), a.gain().mean_sq());
}

}  // namespace
}  // namespace coach
