// The optimizer extras, each with numbers worked by hand: learning-rate schedules over the epoch
// progress (and their warm-up), AdamW, batch norm's statistic ranges folded in on the shards,
// gradient-norm clipping on the workers; and the elastic property that matters most: the
// parameters are bitwise the same however the vector is cut into shards and whenever slices
// move (the schedule's position travels with them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "ps/job_config.hpp"
#include "ps/optimizer.hpp"
#include "ps/shard.hpp"
#include "spec/job_spec.hpp"
#include "worker/gradient_clip.hpp"

namespace coach {
namespace {

using ps::key_range;
using ps::optimizer_config;
using ps::optimizer_kind;
using ps::schedule_kind;
using ps::shard;
using ps::statistic_range;

std::unique_ptr<kernels::backend> cpu() {
  return std::move(*kernels::make_backend(kernels::backend_kind::cpu));
}

std::vector<float> all_values(const shard& s) {
  return {s.values().begin(), s.values().end()};
}

// --- schedules ------------------------------------------------------------------------------

optimizer_config with_rate(float lr) {
  optimizer_config o;
  o.sgd.learning_rate = lr;
  o.adam.learning_rate = lr;
  o.samples_per_epoch = 100;
  o.epochs = 4;
  return o;
}

TEST(lr_schedule, constant_is_the_configured_rate_bitwise_at_any_progress) {
  auto o = with_rate(0.1f);
  EXPECT_FALSE(o.scheduled());
  for (double p : {0.0, 0.37, 1.0, 3.99, 10.0}) EXPECT_EQ(o.learning_rate_at(p), 0.1f) << p;
  o.kind = optimizer_kind::adam;
  o.adam.learning_rate = 0.003f;
  EXPECT_EQ(o.learning_rate_at(2.5), 0.003f);  // adam's own rate
  EXPECT_EQ(o.progress(250), 2.5);             // 250 samples of 100 per epoch
  o.samples_per_epoch = 0;
  EXPECT_EQ(o.progress(250), 0.0);
}

TEST(lr_schedule, step_multiplies_by_gamma_every_e_epochs) {
  auto o = with_rate(0.1f);
  o.schedule.kind = schedule_kind::step;
  o.schedule.every_epochs = 2;
  o.schedule.gamma = 0.5;
  const double lr = double(0.1f);
  EXPECT_EQ(o.learning_rate_at(0.0), 0.1f);
  EXPECT_EQ(o.learning_rate_at(1.999), 0.1f);
  EXPECT_EQ(o.learning_rate_at(2.0), float(lr * 0.5));   // floor(2 / 2) = 1 decay
  EXPECT_EQ(o.learning_rate_at(4.5), float(lr * 0.25));  // floor(4.5 / 2) = 2 decays
  EXPECT_EQ(o.learning_rate_at(6.0), float(lr * 0.125));
  // The default gamma, 0.1, with a period of half an epoch: 3 decays at p = 1.5, 2 before.
  o.schedule.gamma = 0.1;
  o.schedule.every_epochs = 0.5;
  EXPECT_NEAR(o.learning_rate_at(1.5), 1e-4, 1e-10);
  EXPECT_NEAR(o.learning_rate_at(1.49), 1e-3, 1e-9);
}

TEST(lr_schedule, cosine_falls_from_lr_to_min_lr_over_the_epochs_and_stays) {
  auto o = with_rate(0.1f);
  o.schedule.kind = schedule_kind::cosine;
  o.schedule.min_lr = 0.01;
  o.epochs = 4;
  const double lr = double(0.1f);
  EXPECT_EQ(o.learning_rate_at(0.0), 0.1f);                     // cos 0 = 1
  EXPECT_NEAR(o.learning_rate_at(2.0), (lr + 0.01) / 2, 1e-8);  // half way: cos(pi / 2) = 0
  // p = 1: cos(pi / 4) = 0.7071068, 0.01 + 0.09 * 0.5 * 1.7071068 = 0.0868198.
  EXPECT_NEAR(o.learning_rate_at(1.0), 0.0868198, 1e-7);
  EXPECT_NEAR(o.learning_rate_at(4.0), 0.01, 1e-9);             // the end: cos(pi) = -1
  EXPECT_EQ(o.learning_rate_at(6.0), o.learning_rate_at(4.0));  // after the end: min_lr
  o.schedule.min_lr = 0;
  EXPECT_NEAR(o.learning_rate_at(3.0), lr * 0.5 * (1 - std::sqrt(0.5)), 1e-8);
}

TEST(lr_schedule, warm_up_rises_linearly_from_zero_then_hands_over) {
  auto o = with_rate(0.1f);
  o.schedule.warmup_epochs = 2;
  EXPECT_TRUE(o.scheduled());
  const double lr = double(0.1f);
  EXPECT_EQ(o.learning_rate_at(0.0), 0.0f);  // the first step of a warm-up has rate 0
  EXPECT_EQ(o.learning_rate_at(0.5), float(lr * 0.25));
  EXPECT_EQ(o.learning_rate_at(1.0), float(lr * 0.5));
  EXPECT_EQ(o.learning_rate_at(2.0), 0.1f);
  EXPECT_EQ(o.learning_rate_at(3.0), 0.1f);
  // With a schedule: the schedule's rate times the factor. p = 1 of 4 cosine epochs, half way
  // through the warm-up: lr * 0.5 (1 + cos(pi / 4)) * 0.5.
  o.schedule.kind = schedule_kind::cosine;
  o.epochs = 4;
  EXPECT_NEAR(o.learning_rate_at(1.0), lr * 0.5 * (1 + std::sqrt(0.5)) * 0.5, 1e-8);
  EXPECT_NEAR(o.learning_rate_at(2.0), lr * 0.5, 1e-8);
}

// --- the shard's use of them ----------------------------------------------------------------

/// A contribution of `rank` restricted to `ranges`, from a gradient over the whole vector.
ps::contribution part_of(std::uint32_t rank, std::uint64_t samples,
                         std::shared_ptr<const std::vector<float>> full,
                         const std::vector<key_range>& ranges) {
  ps::contribution c;
  c.rank = rank;
  c.samples = samples;
  if (samples > 0)
    for (const auto& r : ranges) c.parts.emplace_back(full->data() + r.begin, r.size());
  c.keep_alive = std::move(full);
  return c;
}

std::shared_ptr<const std::vector<float>> filled(std::size_t n, float v) {
  return std::make_shared<const std::vector<float>>(n, v);
}

TEST(shard_schedule, each_step_uses_the_rate_at_the_progress_before_its_samples) {
  auto be = cpu();
  optimizer_config o = with_rate(1.0f);
  o.samples_per_epoch = 4;
  o.schedule.kind = schedule_kind::step;
  o.schedule.every_epochs = 1;
  o.schedule.gamma = 0.5;
  const std::vector<float> init{10, 20};
  shard s(0, o, *be, {{0, 2}}, init);
  s.set_members({0});
  // Each step: 2 samples whose gradient sums to 2 per key (mean 1).
  const std::vector<float> expected_after[] = {{9, 19}, {8, 18}, {7.5f, 17.5f}, {7, 17}};
  const float expected_rate[] = {1, 1, 0.5f, 0.5f};  // p = 0, 0.5, 1, 1.5 before each step
  for (int step = 0; step < 4; ++step) {
    EXPECT_EQ(s.next_learning_rate(), expected_rate[step]) << step;
    ASSERT_TRUE(s.push(step, part_of(0, 2, filled(2, 2.0f), s.ranges())));
    EXPECT_EQ(all_values(s), expected_after[step]) << step;
  }
  EXPECT_EQ(s.samples_applied(), 8u);
  // A step without samples is no step of the schedule.
  ASSERT_TRUE(s.push(4, part_of(0, 0, filled(2, 0.0f), s.ranges())));
  EXPECT_EQ(s.samples_applied(), 8u);
  EXPECT_EQ(s.next_learning_rate(), 0.25f);  // p = 2
}

TEST(shard_schedule, the_position_does_not_depend_on_how_many_workers_share_the_samples) {
  auto be = cpu();
  optimizer_config o = with_rate(0.5f);
  o.samples_per_epoch = 6;
  o.schedule.kind = schedule_kind::cosine;
  o.epochs = 2;
  o.schedule.warmup_epochs = 0.5;
  const std::vector<float> init{1, -1, 3};
  shard one(0, o, *be, {{0, 3}}, init), two(0, o, *be, {{0, 3}}, init);
  one.set_members({0});
  two.set_members({0, 1});
  for (int step = 0; step < 5; ++step) {
    const float g = float(step + 1);
    ASSERT_TRUE(one.push(step, part_of(0, 4, filled(3, 2 * g), one.ranges())));
    ASSERT_TRUE(two.push(step, part_of(1, 2, filled(3, g), two.ranges())));
    ASSERT_TRUE(two.push(step, part_of(0, 2, filled(3, g), two.ranges())));
  }
  EXPECT_EQ(one.samples_applied(), two.samples_applied());
  EXPECT_EQ(all_values(one), all_values(two));
}

TEST(lr_scaling, the_rate_follows_the_steps_samples_linearly_or_by_its_square_root) {
  optimizer_config o = with_rate(0.1f);
  EXPECT_EQ(o.scaled_rate(0.1f, 256), 0.1f) << "none: unscaled";
  o.reference_batch = 64;
  o.lr_scaling = ps::lr_scaling_kind::linear;
  EXPECT_EQ(o.scaled_rate(0.1f, 64), 0.1f) << "bitwise at the reference batch";
  EXPECT_FLOAT_EQ(o.scaled_rate(0.1f, 128), 0.2f);
  EXPECT_FLOAT_EQ(o.scaled_rate(0.1f, 32), 0.05f);
  o.lr_scaling = ps::lr_scaling_kind::sqrt;
  EXPECT_FLOAT_EQ(o.scaled_rate(0.1f, 256), 0.2f);
  EXPECT_FLOAT_EQ(o.scaled_rate(0.1f, 16), 0.05f);
}

TEST(lr_scaling, a_shard_steps_with_the_rate_of_its_steps_global_batch) {
  auto be = cpu();
  optimizer_config o = with_rate(1.0f);
  o.lr_scaling = ps::lr_scaling_kind::linear;
  o.reference_batch = 4;  // 2 workers of 2 samples
  const std::vector<float> init{10, 20};
  shard s(0, o, *be, {{0, 2}}, init);
  s.set_members({0, 1});
  // 4 samples, gradient sum 4 per key (mean 1): the configured rate, -1.
  ASSERT_TRUE(s.push(0, part_of(0, 2, filled(2, 2.0f), s.ranges())));
  ASSERT_TRUE(s.push(0, part_of(1, 2, filled(2, 2.0f), s.ranges())));
  EXPECT_EQ(all_values(s), (std::vector<float>{9, 19}));
  // Grown to 4 workers: 8 samples, mean 1 again, twice the rate: -2.
  s.set_members({0, 1, 2, 3});
  for (std::uint32_t r = 0; r < 4; ++r)
    ASSERT_TRUE(s.push(1, part_of(r, 2, filled(2, 2.0f), s.ranges())));
  EXPECT_EQ(all_values(s), (std::vector<float>{7, 17}));
}

// --- AdamW and weight decay -----------------------------------------------------------------

TEST(adamw, one_step_matches_the_hand_computed_values) {
  auto be = cpu();
  kernels::adam_options o;
  o.learning_rate = 0.1f;
  o.weight_decay = 0.01f;
  o.decoupled = true;
  std::vector<float> w{1.0f, -2.0f}, m(2, 0.0f), v(2, 0.0f);
  const std::vector<float> g{0.5f, -1.0f};
  be->adam_update(w.data(), m.data(), v.data(), g.data(), 2, 1.0f, 1, o);
  // w *= 1 - 0.1 * 0.01 = 0.999; at t = 1 the bias-corrected m / sqrt(v) is g / |g|, so
  // w = 0.999 w - 0.1 g / (|g| + 1e-8): 0.999 - 0.1 and -1.998 + 0.1.
  EXPECT_NEAR(w[0], 0.899, 1e-6);
  EXPECT_NEAR(w[1], -1.898, 1e-6);
  // (1 - 0.9) g and (1 - 0.999) g^2, with 1 - beta rounded in float.
  EXPECT_NEAR(m[0], 0.05, 5e-8);
  EXPECT_NEAR(v[1], 0.001, 5e-8);
  // Adam's L2 instead puts the decay into the gradient (g' = 0.51): w = 1 - 0.1 exactly there.
  std::vector<float> w2{1.0f, -2.0f}, m2(2, 0.0f), v2(2, 0.0f);
  o.decoupled = false;
  be->adam_update(w2.data(), m2.data(), v2.data(), g.data(), 2, 1.0f, 1, o);
  EXPECT_NEAR(w2[0], 0.9, 1e-6);
}

TEST(adamw, is_adam_without_decay_on_the_decayed_weights_bitwise) {
  auto be = cpu();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const std::size_t n = 3000;  // several vector blocks and a tail
  std::vector<float> w(n), g(n);
  for (auto& x : w) x = u(rng);
  for (auto& x : g) x = u(rng);
  kernels::adam_options decoupled;
  decoupled.learning_rate = 0.02f;
  decoupled.weight_decay = 0.1f;
  decoupled.decoupled = true;
  kernels::adam_options plain = decoupled;
  plain.decoupled = false;
  plain.weight_decay = 0.0f;
  const float d = float(1.0 - double(0.02f) * double(0.1f));
  std::vector<float> wa = w, ma(n, 0.1f), va(n, 0.2f);
  std::vector<float> wb(n), mb(n, 0.1f), vb(n, 0.2f);
  for (std::size_t i = 0; i < n; ++i) wb[i] = w[i] * d;
  be->adam_update(wa.data(), ma.data(), va.data(), g.data(), n, 0.25f, 3, decoupled);
  be->adam_update(wb.data(), mb.data(), vb.data(), g.data(), n, 0.25f, 3, plain);
  EXPECT_EQ(wa, wb);
  EXPECT_EQ(ma, mb);
  EXPECT_EQ(va, vb);
}

TEST(weight_decay, sgd_and_momentum_keep_l2_on_the_gradient) {
  auto be = cpu();
  kernels::sgd_options o{0.1f, 0.0f, 0.5f};
  std::vector<float> w{2.0f};
  const std::vector<float> g{1.0f};
  be->sgd_update(w.data(), nullptr, g.data(), 1, 1.0f, o);
  EXPECT_EQ(w[0], 2.0f - 0.1f * (1.0f * 1.0f + 0.5f * 2.0f));  // 2 - 0.1 * (1 + 1) = 1.8
  EXPECT_NEAR(w[0], 1.8f, 1e-7);
  o.momentum = 0.9f;
  std::vector<float> w2{2.0f}, vel{1.0f};
  be->sgd_update(w2.data(), vel.data(), g.data(), 1, 1.0f, o);
  EXPECT_EQ(vel[0], 0.9f * 1.0f + (1.0f * 1.0f + 0.5f * 2.0f));  // 0.9 + 2
  EXPECT_EQ(w2[0], 2.0f - 0.1f * vel[0]);
}

// --- statistic ranges -----------------------------------------------------------------------

TEST(statistics, two_ranks_fold_the_samples_weighted_mean_with_the_momentum) {
  auto be = cpu();
  optimizer_config o;
  o.kind = optimizer_kind::momentum;
  o.sgd = {0.5f, 0.9f, 0.0f};
  o.statistics = {{{2, 4}, 0.25f}};
  const std::vector<float> init{1, 1, 4, 8, 1, 1};
  shard s(0, o, *be, {{0, 6}}, init);
  s.set_members({0, 1});
  // Rank 0, 2 rows, batch statistics {2, 6}: pushes them times 2. Rank 1, 6 rows, {10, 2}:
  // times 6. The other keys get gradient sums 2 and 6 (mean 1).
  auto g0 = std::make_shared<const std::vector<float>>(std::vector<float>{2, 2, 4, 12, 2, 2});
  auto g1 = std::make_shared<const std::vector<float>>(std::vector<float>{6, 6, 60, 12, 6, 6});
  ASSERT_TRUE(s.push(0, part_of(1, 6, g1, s.ranges())));
  ASSERT_TRUE(s.push(0, part_of(0, 2, g0, s.ranges())));
  // Statistics: mean {64, 24} / 8 = {8, 3}; 0.75 {4, 8} + 0.25 {8, 3} = {5, 6.75}.
  // Trained keys: w = 1 - 0.5 * 1.
  EXPECT_EQ(all_values(s), (std::vector<float>{0.5f, 0.5f, 5, 6.75f, 0.5f, 0.5f}));
  // The statistics have no optimizer state, and no learning rate acts on them.
  auto t = s.release({{0, 6}}, 1);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->state_a, (std::vector<float>{1, 1, 0, 0, 1, 1}));
}

TEST(statistics, ranges_are_split_across_pieces_and_shard_ranges) {
  // One statistic range straddles the two ranges of a shard and a piece boundary.
  auto be = cpu();
  optimizer_config o;
  o.sgd = {1.0f, 0.0f, 0.0f};
  o.statistics = {{{1020, 1030}, 0.5f}, {{2040, 2050}, 1.0f}};
  const std::vector<float> init(2100, 2.0f);
  shard s(0, o, *be, {{0, 1025}, {1025, 2100}}, init, ps::shard_options{1024});
  s.set_members({0});
  ASSERT_TRUE(s.push(0, part_of(0, 1, filled(2100, 4.0f), s.ranges())));
  for (std::size_t k = 0; k < 2100; ++k) {
    const bool stat1 = k >= 1020 && k < 1030, stat2 = k >= 2040 && k < 2050;
    const float want = stat1 ? 3.0f : stat2 ? 4.0f : -2.0f;  // 0.5*2 + 0.5*4; 4; 2 - 4
    ASSERT_EQ(s.values()[k], want) << k;
  }
}

// --- bitwise invariance under sharding and migration ----------------------------------------

constexpr std::size_t num_keys = 5000;

/// The job of the invariance tests: the optimizer (with a schedule and three statistic ranges,
/// straddling shard boundaries), two ranks with samples varying per step.
optimizer_config invariance_optimizer(optimizer_kind kind, bool decoupled, schedule_kind sk) {
  optimizer_config o;
  o.kind = kind;
  o.sgd = {0.05f, kind == optimizer_kind::momentum ? 0.9f : 0.0f, 1e-3f};
  o.adam.learning_rate = 0.01f;
  o.adam.weight_decay = 0.01f;
  o.adam.decoupled = decoupled;
  o.schedule.kind = sk;
  if (sk == schedule_kind::step) {
    o.schedule.every_epochs = 0.5;
    o.schedule.gamma = 0.5;
  } else {
    o.schedule.min_lr = 0.001;
    o.schedule.warmup_epochs = 0.5;
  }
  o.samples_per_epoch = 40;
  o.epochs = 2;
  o.statistics = {{{1000, 1700}, 0.1f}, {{2990, 3010}, 0.5f}, {{4990, 5000}, 0.9f}};
  return o;
}

std::uint64_t samples_of(int step, std::uint32_t rank) {
  return rank == 0 ? 3 + std::uint64_t(step % 2) : (step % 3 == 2 ? 0 : 5);
}

std::shared_ptr<const std::vector<float>> gradient_of(int step, std::uint32_t rank) {
  std::mt19937 rng(std::uint32_t(step * 2 + rank + 1));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto g = std::make_shared<std::vector<float>>(num_keys);
  for (auto& x : *g) x = u(rng) * float(samples_of(step, rank));
  return g;
}

/// Shards of one job driven step by step; slices move between them at step boundaries.
struct cluster {
  optimizer_config opt;
  std::unique_ptr<kernels::backend> be = cpu();
  std::vector<std::unique_ptr<shard>> shards;
  std::vector<float> init;
  int step = 0;

  explicit cluster(optimizer_config o) : opt(std::move(o)), init(num_keys) {
    std::mt19937 rng(99);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& x : init) x = u(rng);
  }
  shard& add(std::vector<key_range> ranges) {
    std::vector<float> v;
    for (const auto& r : ranges) v.insert(v.end(), init.begin() + r.begin, init.begin() + r.end);
    shards.push_back(std::make_unique<shard>(std::uint32_t(shards.size()), opt, *be,
                                             std::move(ranges), v, ps::shard_options{1024}));
    shards.back()->set_members({0, 1});
    return *shards.back();
  }
  void run(int steps) {
    for (int end = step + steps; step < end; ++step) {
      const auto g0 = gradient_of(step, 0), g1 = gradient_of(step, 1);
      for (auto& s : shards) {
        if (s->ranges().empty()) continue;
        ASSERT_TRUE(s->push(step, part_of(1, samples_of(step, 1), g1, s->ranges())));
        auto done = s->push(step, part_of(0, samples_of(step, 0), g0, s->ranges()));
        ASSERT_TRUE(done && *done) << "shard " << s->id() << " step " << step;
      }
    }
  }
  std::vector<float> gather() const {
    std::vector<float> out(num_keys, std::nanf(""));
    for (const auto& s : shards) {
      std::size_t off = 0;
      for (const auto& r : s->ranges())
        for (auto k = r.begin; k < r.end; ++k) out[k] = s->values()[off++];
    }
    return out;
  }
};

constexpr int num_steps = 14;  // about 100 samples: 2.5 epochs of 40, past the cosine's end

struct invariance_case {
  optimizer_kind kind;
  bool decoupled;
  schedule_kind schedule;
};

class extras_invariance : public ::testing::TestWithParam<invariance_case> {
 protected:
  optimizer_config opt() const {
    return invariance_optimizer(GetParam().kind, GetParam().decoupled, GetParam().schedule);
  }
};

/// Bitwise equality of two parameter vectors, naming the first key that differs.
::testing::AssertionResult bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (std::size_t k = 0; k < a.size(); ++k)
    if (std::memcmp(&a[k], &b[k], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "key " << k << ": " << a[k] << " vs " << b[k];
  return ::testing::AssertionSuccess();
}

TEST_P(extras_invariance, one_shard_and_three_shards_give_the_same_bits) {
  cluster one(opt());
  one.add({{0, num_keys}});
  one.run(num_steps);
  cluster three(opt());
  three.add({{0, 1200}, {3000, 3700}});
  three.add({{1200, 3000}});
  three.add({{3700, num_keys}});
  three.run(num_steps);
  const auto a = one.gather();
  EXPECT_TRUE(bitwise_equal(a, three.gather()));
  EXPECT_FALSE(bitwise_equal(a, one.init)) << "the run changed nothing";
}

/// A run whose slices move at steps 4 and 9; `forget_position` drops the schedule's position
/// from the transfers to new shards (to show that the test would see it missing).
std::vector<float> run_with_moves(const optimizer_config& opt, bool forget_position) {
  cluster moving(opt);
  shard& a = moving.add({{0, 2500}});
  shard& b = moving.add({{2500, num_keys}});
  moving.run(4);
  // A hands some slices to B, which owns slices already.
  auto t1 = a.release({{1000, 2000}}, b.id());
  EXPECT_TRUE(t1) << t1.error().message;
  EXPECT_EQ(t1->samples_applied, a.samples_applied());
  EXPECT_TRUE(b.adopt(*t1));
  moving.run(5);
  // B hands everything to a new shard (its storage moves), A some slices to another new one.
  shard& c = moving.add({});
  shard& d = moving.add({});
  auto t2 = b.release(b.ranges(), c.id());
  auto t3 = a.release({{0, 500}}, d.id());
  EXPECT_TRUE(t2 && t3);
  if (forget_position) t2->samples_applied = t3->samples_applied = 0;
  EXPECT_TRUE(c.adopt(std::move(*t2)));
  EXPECT_TRUE(d.adopt(*t3));
  if (!forget_position) {
    EXPECT_EQ(c.samples_applied(), a.samples_applied());
    EXPECT_EQ(d.samples_applied(), a.samples_applied());
  }
  EXPECT_EQ(c.updates(), a.updates());
  moving.run(num_steps - 9);
  return moving.gather();
}

TEST_P(extras_invariance, slices_moved_mid_run_give_the_bits_of_a_run_without_moves) {
  cluster still(opt());
  still.add({{0, 2500}});
  still.add({{2500, num_keys}});
  still.run(num_steps);
  const auto expected = still.gather();
  EXPECT_TRUE(bitwise_equal(run_with_moves(opt(), false), expected));
  // Without the position the new shards would restart the schedule: other values.
  EXPECT_FALSE(bitwise_equal(run_with_moves(opt(), true), expected));
}

INSTANTIATE_TEST_SUITE_P(
    kinds_and_schedules, extras_invariance,
    ::testing::Values(invariance_case{optimizer_kind::sgd, false, schedule_kind::cosine},
                      invariance_case{optimizer_kind::momentum, false, schedule_kind::cosine},
                      invariance_case{optimizer_kind::adam, false, schedule_kind::cosine},
                      invariance_case{optimizer_kind::adam, true, schedule_kind::cosine},
                      invariance_case{optimizer_kind::sgd, false, schedule_kind::step},
                      invariance_case{optimizer_kind::momentum, false, schedule_kind::step},
                      invariance_case{optimizer_kind::adam, false, schedule_kind::step},
                      invariance_case{optimizer_kind::adam, true, schedule_kind::step}));

TEST(shard_schedule, adopting_keeps_the_larger_position_and_an_empty_shard_takes_it) {
  auto be = cpu();
  optimizer_config o = with_rate(0.1f);
  const std::vector<float> two{1, 2};
  shard s(0, o, *be, {{0, 2}}, two);
  ps::slice_transfer t;
  t.from = 1;
  t.ranges = {{2, 4}};
  t.values = {3, 4};
  t.samples_applied = 7;
  ASSERT_TRUE(s.adopt(t));
  EXPECT_EQ(s.samples_applied(), 7u);  // a dying worker's samples reached the other shard only
  t.ranges = {{4, 6}};
  t.samples_applied = 3;
  ASSERT_TRUE(s.adopt(t));
  EXPECT_EQ(s.samples_applied(), 7u);
  shard empty(2, o, *be, {}, {});
  t.samples_applied = 3;
  ASSERT_TRUE(empty.adopt(t));
  EXPECT_EQ(empty.samples_applied(), 3u);
}

// --- the job's shard optimizer --------------------------------------------------------------

TEST(shard_optimizer, is_completed_with_the_training_rows_epochs_and_statistics) {
  constexpr std::string_view spec_text = R"(name: bn
dataset: {path: /data/mnist}
model: {}
optimizer: {type: adamw, schedule: {type: cosine, warmup_epochs: 1}, clip_norm: 2}
batch_size: 32
epochs: 3
)";
  auto spec = scheduler::parse_job_spec(spec_text, "job.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  const std::vector<statistic_range> stats{{{10, 20}, 0.1f}};
  const auto o = scheduler::shard_optimizer(*spec, 6000, stats);
  EXPECT_EQ(o.samples_per_epoch, 6000u);
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(o.statistics, stats);
  EXPECT_TRUE(o.adam.decoupled);
  EXPECT_EQ(o.schedule.kind, schedule_kind::cosine);
  EXPECT_EQ(o.clip_norm, 2.0f);
  // Averaging: plain SGD with rate 1 on the shards, statistics averaged like every key.
  auto avg = *spec;
  avg.optimizer.kind = optimizer_kind::momentum;
  avg.consistency.kind = scheduler::consistency_kind::averaging;
  const auto a = scheduler::shard_optimizer(avg, 6000, stats);
  EXPECT_EQ(a.kind, optimizer_kind::sgd);
  EXPECT_EQ(a.sgd.learning_rate, 1.0f);
  EXPECT_FALSE(a.scheduled());
  EXPECT_TRUE(a.statistics.empty());
}

// --- gradient clipping ----------------------------------------------------------------------

TEST(clip_gradient, below_the_limit_nothing_changes) {
  auto be = cpu();
  // Sum over 2 samples; mean {3, 4} outside the skipped keys: norm 5.
  const std::vector<float> g{6, 8, 100, 100, 0, 0};
  const std::vector<worker::statistic_range> skip{{{2, 4}, 0.1f}};
  auto x = g;
  EXPECT_DOUBLE_EQ(worker::clip_gradient(*be, x.data(), x.size(), 2, 10.0f, skip), 5.0);
  EXPECT_EQ(x, g);
  EXPECT_DOUBLE_EQ(worker::clip_gradient(*be, x.data(), x.size(), 2, 5.0f, skip), 5.0);
  EXPECT_EQ(x, g);  // at the limit: not clipped
  EXPECT_DOUBLE_EQ(worker::clip_gradient(*be, x.data(), x.size(), 2, 0.0f, skip), 5.0);
  EXPECT_EQ(x, g);  // 0: measures only
  EXPECT_EQ(worker::clip_gradient(*be, x.data(), x.size(), 0, 1.0f, skip), 0.0);
  EXPECT_EQ(x, g);  // no samples: nothing to clip
}

TEST(clip_gradient, above_the_limit_scales_to_the_limit_and_leaves_skipped_keys) {
  auto be = cpu();
  const std::vector<worker::statistic_range> skip{{{2, 4}, 0.1f}};
  std::vector<float> x{6, 8, 100, 100, 0, 0};
  EXPECT_DOUBLE_EQ(worker::clip_gradient(*be, x.data(), x.size(), 2, 1.0f, skip), 5.0);
  EXPECT_NEAR(x[0], 1.2f, 1e-6);  // times 1 / 5
  EXPECT_NEAR(x[1], 1.6f, 1e-6);
  EXPECT_EQ(x[2], 100.0f);
  EXPECT_EQ(x[3], 100.0f);
  // A long random gradient with statistic ranges inside and at the end.
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> g(20000);
  for (auto& v : g) v = nd(rng);
  const std::vector<worker::statistic_range> stats{{{100, 300}, 0.1f}, {{19990, 20000}, 0.1f}};
  auto y = g;
  const std::uint64_t samples = 16;
  const double before = worker::clip_gradient(*be, y.data(), y.size(), samples, 0.5f, stats);
  double squares = 0;
  for (std::size_t k = 0; k < g.size(); ++k) {
    const bool skipped = (k >= 100 && k < 300) || k >= 19990;
    if (skipped) {
      ASSERT_EQ(y[k], g[k]) << k;
    } else {
      squares += double(g[k]) * double(g[k]);
    }
  }
  EXPECT_NEAR(before, std::sqrt(squares) / double(samples), 1e-9 * before);
  EXPECT_GT(before, 0.5);
  const double after = worker::clip_gradient(*be, y.data(), y.size(), samples, 0.0f, stats);
  EXPECT_NEAR(after, 0.5, 0.5 * 1e-6);
}

}  // namespace
}  // namespace coach
