// ps::shard's side of elastic jobs, one case at a time: release and adopt move values and
// optimizer state (a whole shard by moving its storage), bad transfers are refused with the
// reason, and pushes that arrive before their slices, their configuration or after their
// rank's removal wait or are dropped as the protocol says. The same under random sequences of
// changes: tests/unit/elastic_test.cpp.
#include <gtest/gtest.h>

#include "ps/job_config.hpp"
#include "ps/shard.hpp"

namespace coach::ps {
namespace {

TEST(shard_elastic, release_and_adopt_move_values_and_state) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  optimizer_config opt;
  opt.kind = optimizer_kind::momentum;
  opt.sgd = {1.0f, 0.5f, 0.0f};
  std::vector<float> init{0, 1, 2, 3, 4, 5, 6, 7};
  shard a(0, opt, *be, {{0, 8}}, init);
  a.set_members({0});
  contribution c;
  auto g = std::make_shared<std::vector<float>>(8, 2.0f);
  c.rank = 0;
  c.samples = 2;
  c.parts.emplace_back(g->data(), 8);
  c.keep_alive = g;
  ASSERT_TRUE(a.push(0, std::move(c)));  // w -= 1 * (0 + 1): velocity 1 everywhere
  auto t = a.release({{2, 4}, {6, 8}}, 1);
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->version, 1);
  EXPECT_EQ(t->updates, 1);
  EXPECT_EQ(t->ranges, (std::vector<key_range>{{2, 4}, {6, 8}}));
  EXPECT_EQ(t->values, (std::vector<float>{1, 2, 5, 6}));
  EXPECT_EQ(t->state_a, (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(a.ranges(), (std::vector<key_range>{{0, 2}, {4, 6}}));
  EXPECT_EQ(std::vector<float>(a.values().begin(), a.values().end()),
            (std::vector<float>{-1, 0, 3, 4}));

  shard b(1, opt, *be, {}, {});
  ASSERT_TRUE(b.adopt(*t));
  EXPECT_EQ(b.applied_steps(), 1);
  EXPECT_EQ(b.updates(), 1);
  EXPECT_EQ(b.ranges(), t->ranges);
  // Handing them back merges adjacent runs again.
  auto back = b.release({{2, 4}, {6, 8}}, 0);
  ASSERT_TRUE(back);
  ASSERT_TRUE(a.adopt(*back));
  EXPECT_EQ(a.ranges(), (std::vector<key_range>{{0, 8}}));
  EXPECT_EQ(std::vector<float>(a.values().begin(), a.values().end()),
            (std::vector<float>{-1, 0, 1, 2, 3, 4, 5, 6}));
}

TEST(shard_elastic, a_whole_shard_moves_without_copying_its_values) {
  // A migration hands a shard's storage over (no copy, no page faults for large shards):
  // release of everything it owns moves the buffers out, adoption by an empty shard moves
  // them in. The values and state arrive intact and updates go on from them.
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  optimizer_config opt;
  opt.kind = optimizer_kind::momentum;
  opt.sgd = {1.0f, 0.5f, 0.0f};
  std::vector<float> init{0, 1, 2, 3, 4, 5};
  shard a(0, opt, *be, {{0, 2}, {4, 8}}, init);
  a.set_members({0});
  const float* storage = a.values().data();
  auto t = a.release({{4, 8}, {0, 2}}, 1);
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->values_span().data(), storage) << "released by moving, not copying";
  EXPECT_FALSE(t->buffer_shared);
  EXPECT_EQ(t->ranges, (std::vector<key_range>{{0, 2}, {4, 8}}));
  EXPECT_EQ(std::vector<float>(t->values_span().begin(), t->values_span().end()), init);
  EXPECT_EQ(t->state_a, std::vector<float>(6, 0.0f));
  EXPECT_TRUE(a.ranges().empty());
  EXPECT_TRUE(a.values().empty());

  shard b(1, opt, *be, {}, {});
  const float* moved = t->values_span().data();
  ASSERT_TRUE(b.adopt(std::move(*t)));
  EXPECT_EQ(b.values().data(), moved) << "adopted by moving, not copying";
  EXPECT_EQ(b.ranges(), (std::vector<key_range>{{0, 2}, {4, 8}}));
  EXPECT_EQ(std::vector<float>(b.values().begin(), b.values().end()), init);
  b.set_members({0});
  contribution c;
  auto g = std::make_shared<std::vector<float>>(6, 1.0f);
  c.rank = 0;
  c.samples = 1;
  c.parts = {{g->data(), 2}, {g->data() + 2, 4}};
  c.keep_alive = g;
  ASSERT_TRUE(b.push(0, std::move(c)));
  EXPECT_EQ(std::vector<float>(b.values().begin(), b.values().end()),
            (std::vector<float>{-1, 0, 1, 2, 3, 4}));

  // A shard someone still reads (its last answers are being sent) shares the buffer instead:
  // nobody writes it again; the destination copies from it.
  std::vector<float> seven_eight{7, 8};
  shard d(2, opt, *be, {{0, 2}}, seven_eight);
  auto reader = d.share_values();
  auto shared = d.release({{0, 2}}, 3);
  ASSERT_TRUE(shared);
  EXPECT_TRUE(shared->buffer_shared);
  EXPECT_EQ(shared->values_span().data(), reader->data());
  shard e(3, opt, *be, {}, {});
  ASSERT_TRUE(e.adopt(std::move(*shared)));
  EXPECT_NE(e.values().data(), reader->data());
  EXPECT_EQ(std::vector<float>(e.values().begin(), e.values().end()), seven_eight);
  EXPECT_EQ(reader->data()[1], 8.0f);
}

TEST(shard_elastic, bad_transfers_and_releases_are_refused_with_the_reason) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  optimizer_config opt;
  std::vector<float> init(8, 1.0f);
  shard a(0, opt, *be, {{0, 8}}, init);
  a.set_members({0, 1});
  auto not_owned = a.release({{6, 10}}, 1);
  ASSERT_FALSE(not_owned);
  EXPECT_NE(not_owned.error().message.find("keys [6, 10) are not owned here"), std::string::npos)
      << not_owned.error().message;
  contribution c;
  c.rank = 0;
  ASSERT_TRUE(a.push(0, std::move(c)));
  auto mid_step = a.release({{0, 4}}, 1);
  ASSERT_FALSE(mid_step);
  EXPECT_NE(mid_step.error().message.find("partially pushed"), std::string::npos);

  slice_transfer t;
  t.from = 3;
  t.version = 0;
  t.ranges = {{4, 12}};
  t.values.assign(8, 0.0f);
  auto overlap = a.adopt(t);
  ASSERT_FALSE(overlap);
  shard fresh(2, opt, *be, {}, {});
  t.values.resize(3);
  auto short_values = fresh.adopt(t);
  ASSERT_FALSE(short_values);
  EXPECT_NE(short_values.error().message.find("carries 3 values for 8 keys"), std::string::npos);
}

TEST(shard_elastic, a_push_that_overtakes_its_slices_waits_for_them) {
  // At a boundary the workers push step s while the slices travel: a new shard holds the pushes
  // until it has adopted what the configuration gives it, then applies the step exactly.
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  optimizer_config opt;
  opt.sgd.learning_rate = 1.0f;
  std::vector<float> init{1, 2, 3, 4};
  job_config c1;
  c1.version = 1;
  c1.members = {0, 1};
  c1.map = shard_map::even(4, 2, 1);  // shard 0 owns [0, 4)
  shard a(0, opt, *be, {{0, 4}}, init);
  ASSERT_TRUE(a.configure(c1));
  shard b(1, opt, *be, {}, {});
  ASSERT_TRUE(b.configure(c1));
  job_config c2 = c1;  // from step 0: shard 1 owns everything
  c2.version = 2;
  c2.map.apply(c1.map.plan_migrate(0, 1));
  ASSERT_TRUE(b.configure(c2));
  EXPECT_FALSE(b.owns_assigned(0));
  auto g = std::make_shared<std::vector<float>>(4, 2.0f);
  auto contrib = [&](std::uint32_t rank) {
    contribution c;
    c.rank = rank;
    c.samples = 1;
    c.parts.emplace_back(g->data(), 4);
    c.keep_alive = g;
    return c;
  };
  for (std::uint32_t rank : {0u, 1u}) {
    auto early = b.push(0, 2, contrib(rank));
    ASSERT_TRUE(early) << early.error().message;
    EXPECT_FALSE(*early) << "held: the slices have not come";
  }
  ASSERT_TRUE(a.configure(c2));  // the source learns the move after its order
  auto t = a.release({{0, 4}}, 1);
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_TRUE(a.owns_assigned(0));
  ASSERT_TRUE(b.adopt(std::move(*t)));
  EXPECT_TRUE(b.owns_assigned(0));
  auto resumed = b.resume();
  ASSERT_TRUE(resumed) << resumed.error().message;
  EXPECT_EQ(*resumed, 1) << "the held pushes completed step 0";
  EXPECT_EQ(b.applied_steps(), 1);
  EXPECT_EQ(std::vector<float>(b.values().begin(), b.values().end()),
            (std::vector<float>{-1, 0, 1, 2}));  // w - (2 + 2) / 2
}

TEST(shard_elastic, a_held_push_of_a_rank_removed_meanwhile_is_dropped) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  optimizer_config opt;
  opt.sgd.learning_rate = 1.0f;
  job_config c1;
  c1.version = 1;
  c1.members = {0, 1};
  c1.map = shard_map::even(2, 2, 1);
  shard a(0, opt, *be, {{0, 2}}, std::vector<float>{10, 10});
  ASSERT_TRUE(a.configure(c1));
  shard b(1, opt, *be, {}, {});
  job_config c2 = c1;
  c2.version = 2;
  c2.map.apply(c1.map.plan_migrate(0, 1));
  ASSERT_TRUE(b.configure(c2));
  auto g = std::make_shared<std::vector<float>>(2, 4.0f);
  contribution dead;
  dead.rank = 1;
  dead.samples = 2;
  dead.parts.emplace_back(g->data(), 2);
  dead.keep_alive = g;
  ASSERT_TRUE(b.push(0, 2, std::move(dead)));  // held
  job_config c3 = c2;                          // rank 1 died before the slices came
  c3.version = 3;
  c3.members = {0};
  ASSERT_TRUE(b.configure(c3));
  ASSERT_TRUE(a.configure(c2));
  auto t = a.release({{0, 2}}, 1);
  ASSERT_TRUE(t);
  ASSERT_TRUE(b.adopt(std::move(*t)));
  auto resumed = b.resume();
  ASSERT_TRUE(resumed) << resumed.error().message;
  EXPECT_EQ(*resumed, 0);
  contribution live;
  live.rank = 0;
  live.samples = 2;
  live.parts.emplace_back(g->data(), 2);
  live.keep_alive = g;
  auto done = b.push(0, 3, std::move(live));
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_TRUE(*done);
  EXPECT_FLOAT_EQ(b.values()[0], 8.0f) << "10 - 4 / 2: the dead rank's push was not applied";
}

TEST(shard_elastic, a_push_under_an_unseen_configuration_waits_for_it) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  optimizer_config opt;
  opt.sgd.learning_rate = 1.0f;
  std::vector<float> init{10};
  shard s(0, opt, *be, {{0, 1}}, init);
  job_config c1;
  c1.version = 1;
  c1.members = {0};
  ASSERT_TRUE(s.configure(c1));
  auto g = std::make_shared<std::vector<float>>(1, 4.0f);
  auto contrib = [&](std::uint32_t rank) {
    contribution c;
    c.rank = rank;
    c.samples = 2;
    c.parts.emplace_back(g->data(), 1);
    c.keep_alive = g;
    return c;
  };
  // Rank 1 joins at step 0 under configuration 2; its push arrives first.
  auto early = s.push(0, 2, contrib(1));
  ASSERT_TRUE(early);
  EXPECT_FALSE(*early);
  auto also_early = s.push(0, 2, contrib(0));
  ASSERT_TRUE(also_early);
  EXPECT_FALSE(*also_early);
  EXPECT_EQ(s.applied_steps(), 0);  // under configuration 1, rank 0 alone would complete it
  job_config c2 = c1;
  c2.version = 2;
  c2.members = {0, 1};
  auto done = s.configure(c2);
  ASSERT_TRUE(done);
  EXPECT_EQ(*done, 1);
  EXPECT_EQ(s.applied_steps(), 1);
  EXPECT_FLOAT_EQ(s.values()[0], 8.0f);  // 10 - (4 + 4) / 4
}

}  // namespace
}  // namespace coach::ps
