// ps::shard::on_step_held: a step that holds every contribution it waits for is told, with the
// version it produces, before its update starts, whatever completes it (the last push, a
// configuration that removes the member it waited for, held pushes taken by resume), and only
// then: what a backup shard acknowledges early on (ps/replica_chain.hpp).
#include <gtest/gtest.h>

#include <vector>

#include "ps/shard.hpp"

namespace coach::ps {
namespace {

std::unique_ptr<kernels::backend> cpu() {
  return std::move(*kernels::make_backend(kernels::backend_kind::cpu));
}

contribution grad(std::uint32_t rank, float g, std::size_t n) {
  auto keep = std::make_shared<std::vector<float>>(n, g);
  contribution c;
  c.rank = rank;
  c.samples = 1;
  c.parts.push_back(std::span<const float>(*keep));
  c.keep_alive = keep;
  return c;
}

job_config members(std::uint64_t version, std::int64_t from, std::vector<std::uint32_t> ranks) {
  job_config c;
  c.version = version;
  c.from_step = from;
  c.members = std::move(ranks);
  return c;
}

/// What the shard looked like each time it was told: the version told, the version it was at,
/// and its first value.
struct told {
  std::int64_t version;
  std::int64_t applied;
  float first;
  bool operator==(const told&) const = default;
};

struct watched {
  std::unique_ptr<kernels::backend> be = cpu();
  std::unique_ptr<shard> s;
  std::vector<told> log;

  watched() {
    optimizer_config opt;
    opt.sgd.learning_rate = 0.5f;
    const std::vector<float> init{1, 2, 3, 4};
    s = std::make_unique<shard>(0, opt, *be, std::vector<key_range>{{0, 4}}, init);
    s->on_step_held([this](std::int64_t v) {
      log.push_back({v, s->applied_steps(), s->values()[0]});
    });
  }
};

TEST(shard_step_held, the_last_push_of_a_step_is_told_before_its_update) {
  watched w;
  ASSERT_TRUE(w.s->configure(members(1, 0, {0, 1})));
  ASSERT_EQ(w.s->push(0, 1, grad(0, 1.0f, 4)), false);
  EXPECT_TRUE(w.log.empty()) << "rank 1 has not pushed yet";
  ASSERT_EQ(w.s->push(0, 1, grad(1, 3.0f, 4)), true);
  // Told of version 1 while the shard was still at version 0, its values untouched.
  EXPECT_EQ(w.log, (std::vector<told>{{1, 0, 1.0f}}));
  // Then applied: 1 - 0.5 * (1 + 3) / 2.
  EXPECT_EQ(w.s->applied_steps(), 1);
  EXPECT_EQ(w.s->values()[0], 0.0f);
}

TEST(shard_step_held, a_step_completed_by_a_configuration_or_by_held_pushes_is_told_too) {
  watched w;
  ASSERT_TRUE(w.s->configure(members(1, 0, {0, 1})));
  ASSERT_EQ(w.s->push(0, 1, grad(0, 2.0f, 4)), false);
  // Rank 1 died: a configuration without it completes step 0.
  ASSERT_EQ(w.s->configure(members(2, 0, {0})), 1);
  ASSERT_EQ(w.log.size(), 1u);
  EXPECT_EQ(w.log[0], (told{1, 0, 1.0f}));
  // A push made under a configuration not seen yet is held; the configuration takes it, and
  // its step is told before it is applied.
  ASSERT_EQ(w.s->push(1, 3, grad(0, 2.0f, 4)), false);
  EXPECT_EQ(w.log.size(), 1u);
  ASSERT_EQ(w.s->configure(members(3, 1, {0})), 1);
  ASSERT_EQ(w.log.size(), 2u);
  EXPECT_EQ(w.log[1], (told{2, 1, 0.0f}));
  EXPECT_EQ(w.s->applied_steps(), 2);
  EXPECT_EQ(w.s->values()[0], -1.0f);
}

TEST(shard_step_held, a_refused_push_tells_nothing) {
  watched w;
  ASSERT_TRUE(w.s->configure(members(1, 0, {0})));
  EXPECT_FALSE(w.s->push(0, 1, grad(0, 1.0f, 3)).has_value()) << "3 floats for a 4-key range";
  EXPECT_FALSE(w.s->push(0, 1, grad(7, 1.0f, 4)).has_value()) << "rank 7 is no member";
  EXPECT_TRUE(w.log.empty());
  EXPECT_EQ(w.s->applied_steps(), 0);
}

}  // namespace
}  // namespace coach::ps
