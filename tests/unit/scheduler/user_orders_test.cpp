// scheduler::user_orders and scheduler::change_causes alone: what a user's orders pin and hold,
// and which cause a change in effect is given (issue 41, item 1).
#include "scheduler/user_orders.hpp"
#include "scheduler/change_causes.hpp"

#include <gtest/gtest.h>

namespace coach::scheduler {
namespace {

std::string name(std::uint32_t h) {
  return std::string(1, char('a' + h - 1));
}

TEST(user_orders, a_migrations_new_shard_is_pinned_and_a_refused_one_pins_nothing) {
  user_orders o;
  o.migrating(0, 2);
  EXPECT_FALSE(o.placed(3, 1)) << "another node: not the user's shard";
  EXPECT_TRUE(o.placed(4, 2));
  EXPECT_EQ(o.pin_of(4), 2u);
  // Another change in effect before the migration: shard 4 owns nothing yet, still pinned.
  const std::uint32_t before[] = {0, 3};
  o.live(before);
  EXPECT_TRUE(o.pinned(4));
  const std::uint32_t after[] = {3, 4};
  o.live(after);
  EXPECT_TRUE(o.pinned(4));
  EXPECT_EQ(o.describe(name), std::vector<std::string>{"shard 4 pinned to 'b' (coach migrate)"});
  // A later shard on that node is nobody's order.
  EXPECT_FALSE(o.placed(5, 2));
  // Refused: nothing pinned.
  o.migrating(3, 1);
  EXPECT_TRUE(o.placed(6, 1));
  o.migration_refused(3, 1);
  EXPECT_FALSE(o.pinned(6));
  // Its shard gone (a policy shrank the job): the pin goes too.
  const std::uint32_t only3[] = {3};
  o.live(only3);
  EXPECT_FALSE(o.pinned(4));
  EXPECT_FALSE(o.release_pin(4));
}

TEST(user_orders, a_rescale_holds_each_count_it_set_until_released) {
  user_orders o;
  EXPECT_FALSE(o.holds());
  o.hold(3, 0);
  o.hold(0, 2);
  EXPECT_EQ(o.held_workers(), 3u);
  EXPECT_EQ(o.held_shards(), 2u);
  EXPECT_EQ(o.describe(name), (std::vector<std::string>{"workers 3 held (coach rescale)",
                                                        "shards 2 held (coach rescale)"}));
  EXPECT_TRUE(o.release_hold());
  EXPECT_FALSE(o.holds());
  EXPECT_FALSE(o.release_hold());
}

TEST(change_causes, a_change_in_effect_takes_the_cause_of_the_first_it_matches) {
  using k = expected_change::kind_type;
  change_causes c;
  c.expect({k::rescale, "policy fifo", 1, 0, 0, {}});
  c.expect({k::migrate, "user", 0, 0, 0, {}});
  c.expect({k::rescale, "user", 3, 0, 0, {}});
  EXPECT_EQ(c.adding(true), "policy fifo");  // the first asked that sets workers
  EXPECT_EQ(c.adding(false), "user");
  const std::uint32_t w2[] = {0, 1}, w1[] = {0}, w3[] = {0, 1, 2}, s0[] = {0}, s01[] = {0, 1},
                      s1[] = {1};
  // The user's rescale to 3, though asked after the others.
  EXPECT_EQ(c.took_effect(w2, s0, w3, s0, "own"), "user");
  // The migration's two steps: its new shard beside shard 0, then shard 0 gone.
  EXPECT_EQ(c.took_effect(w3, s0, w3, s01, "own"), "user");
  EXPECT_EQ(c.took_effect(w3, s01, w3, s1, "own"), "user");
  // A refused expectation is forgotten; what nobody asked for and dropped a worker is a death.
  c.refused(k::rescale, "policy fifo");
  EXPECT_EQ(c.took_effect(w3, s1, w2, s1, "own"), "failure: worker 2 died");
  EXPECT_EQ(c.took_effect(w2, s1, w2, s1, "the spec's schedule"), "the spec's schedule");
  c.expect({k::drop_workers, "failure: node 'c' lost", 0, 0, 0, {1}});
  EXPECT_EQ(c.took_effect(w2, s1, w1, s1, "own"), "failure: node 'c' lost");
}

}  // namespace
}  // namespace coach::scheduler
