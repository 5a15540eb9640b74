// ps::consistency: one contract over the four modes (every_consistency). A shard under a mode's
// rules applies every gradient pushed in an order the mode allows exactly once; it holds a push
// as far ahead as the mode says and refuses one further; a second push of a step is dropped
// and counted where a step is one worker's, refused elsewhere; and the mode's promises to the
// master and the workers agree with each other.
#include "ps/consistency.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kernels/backend.hpp"
#include "ps/shard.hpp"

namespace coach::ps {
namespace {

constexpr std::size_t keys = 8;

std::unique_ptr<kernels::backend> cpu() {
  return std::move(*kernels::make_backend(kernels::backend_kind::cpu));
}

/// Worker r's gradient at step s for key i: small integers, exact in float.
float gradient(std::uint32_t r, std::int64_t s, std::size_t i) {
  return float(int((r * 7 + std::size_t(s) * 3 + i) % 9) - 4);
}

contribution push_of(std::uint32_t r, std::int64_t s) {
  auto g = std::make_shared<std::vector<float>>(keys);
  for (std::size_t i = 0; i < keys; ++i) (*g)[i] = gradient(r, s, i);
  contribution c;
  c.rank = r;
  c.samples = 1;
  c.parts.emplace_back(g->data(), keys);
  c.keep_alive = g;
  return c;
}

struct mode_case {
  consistency_config config;
  const char* name;
};

class every_consistency : public ::testing::TestWithParam<mode_case> {
 protected:
  std::unique_ptr<consistency> mode = make_consistency(GetParam().config);
  std::unique_ptr<kernels::backend> be = cpu();
  optimizer_config opt = [] {
    optimizer_config o;
    o.sgd.learning_rate = 0.5f;
    return o;
  }();

  std::unique_ptr<shard> make_shard() {
    auto s = std::make_unique<shard>(0, opt, *be, std::vector<key_range>{{0, keys}},
                                     std::vector<float>(keys, 1.0f), mode->shard_rules());
    s->set_members({0, 1});
    return s;
  }
  /// The members of step s as the master opens it: both, or (one worker a step) the one
  /// whose request opened it.
  std::vector<std::uint32_t> members_of(std::int64_t s) const {
    if (mode->step_per_request()) return {std::uint32_t(s % 2)};
    return {0, 1};
  }
};

TEST_P(every_consistency, is_named_as_the_spec_writes_it) {
  EXPECT_EQ(mode->name(), GetParam().name);
}

TEST_P(every_consistency, every_gradient_pushed_in_an_allowed_order_is_applied_once) {
  auto s = make_shard();
  std::vector<float> want(keys, 1.0f);
  for (std::int64_t step = 0; step < 6; ++step) {
    std::uint64_t samples = 0;
    std::vector<float> sum(keys, 0.0f);
    for (auto r : members_of(step)) {
      auto done = s->push(step, 0, push_of(r, step));
      ASSERT_TRUE(done) << "step " << step << ": " << done.error().message;
      for (std::size_t i = 0; i < keys; ++i) sum[i] += gradient(r, step, i);
      ++samples;
    }
    for (std::size_t i = 0; i < keys; ++i) want[i] -= 0.5f * (sum[i] / float(samples));
    EXPECT_EQ(s->applied_steps(), step + 1);
  }
  for (std::size_t i = 0; i < keys; ++i) EXPECT_EQ(s->values()[i], want[i]) << "key " << i;
}

TEST_P(every_consistency, a_push_ahead_is_held_as_far_as_the_mode_says_and_refused_beyond) {
  auto s = make_shard();
  const auto ahead = mode->shard_holds_ahead();
  // One step ahead of the open one: held (or, a step being one worker's, applied ahead).
  auto next = s->push(1, 0, push_of(1, 1));
  if (ahead >= 1) {
    ASSERT_TRUE(next) << next.error().message;
  } else {
    EXPECT_FALSE(next);
    return;
  }
  // Beyond the bound: refused.
  if (ahead < 1000) {
    auto far = s->push(ahead + 1, 0, push_of(0, ahead + 1));
    EXPECT_FALSE(far);
  }
  // The held push counts once its step's turn comes: step 0, then step 1 complete.
  for (auto r : members_of(0)) ASSERT_TRUE(s->push(0, 0, push_of(r, 0)));
  ASSERT_TRUE(s->resume());  // the held pushes of the step that opened
  if (!mode->one_push_per_step()) {
    for (auto r : members_of(1)) {
      if (r != 1) {
        ASSERT_TRUE(s->push(1, 0, push_of(r, 1)));
      }
    }
  }
  EXPECT_EQ(s->applied_steps(), 2);
}

TEST_P(every_consistency, a_second_push_of_a_step_is_dropped_where_a_step_is_one_workers) {
  auto s = make_shard();
  for (auto r : members_of(0)) ASSERT_TRUE(s->push(0, 0, push_of(r, 0)));
  ASSERT_EQ(s->applied_steps(), 1);
  const auto before = std::vector<float>(s->values().begin(), s->values().end());
  auto again = s->push(0, 0, push_of(members_of(0).front(), 0));
  if (mode->one_push_per_step()) {
    ASSERT_TRUE(again);  // a stand-in raced the worker's own push: dropped, counted
    EXPECT_FALSE(*again);
    EXPECT_EQ(s->stale_dropped(), 1u);
  } else {
    EXPECT_FALSE(again);
  }
  EXPECT_EQ(std::vector<float>(s->values().begin(), s->values().end()), before);
}

TEST_P(every_consistency, its_promises_to_the_master_and_the_workers_agree) {
  // A worker may compute from a version as old as the shards hold pushes ahead of.
  if (!mode->any_version()) {
    EXPECT_EQ(mode->staleness(), mode->shard_holds_ahead());
  }
  // Steps open no further ahead of the oldest incomplete than a worker may run ahead.
  if (mode->open_ahead() >= 0) {
    EXPECT_EQ(mode->open_ahead(), mode->staleness());
  }
  // One worker a step: its own request opens it, and its push alone completes it.
  EXPECT_EQ(mode->step_per_request(), mode->one_push_per_step());
  // Local steps travel as deltas, one push a step; a fixed global batch needs common steps.
  if (mode->chunks_per_step() > 1) {
    EXPECT_TRUE(mode->pushes_deltas());
  }
  if (mode->stepwise()) {
    EXPECT_FALSE(mode->step_per_request());
    EXPECT_FALSE(mode->pushes_deltas());
  }
}

INSTANTIATE_TEST_SUITE_P(modes, every_consistency,
                         ::testing::Values(mode_case{{consistency_kind::bsp, 0, 0}, "bsp"},
                                           mode_case{{consistency_kind::ssp, 2, 0}, "ssp:2"},
                                           mode_case{{consistency_kind::asp, 0, 0}, "asp"},
                                           mode_case{{consistency_kind::averaging, 0, 3},
                                                     "averaging:3"}),
                         [](const ::testing::TestParamInfo<mode_case>& i) {
                           switch (i.param.config.kind) {
                             case consistency_kind::bsp:
                               return std::string("bsp");
                             case consistency_kind::ssp:
                               return std::string("ssp");
                             case consistency_kind::asp:
                               return std::string("asp");
                             case consistency_kind::averaging:
                               return std::string("averaging");
                           }
                           return std::string("unknown");
                         });

}  // namespace
}  // namespace coach::ps
