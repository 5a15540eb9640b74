// worker::device_assignment: a device per worker across every job of the process
// (gpus_per_worker >= 1: devices of its own, refused when none are left; 0: shared, least used
// first), released when the worker stops.
#include <gtest/gtest.h>

#include "worker/device_assignment.hpp"

namespace coach::worker {
namespace {

TEST(device_assignment, shared_devices_spread_round_robin_and_fill_the_emptiest_first) {
  device_assignment a(3);
  for (std::uint32_t r = 0; r < 7; ++r) {
    auto d = a.take(1, r, 0);
    ASSERT_TRUE(d) << d.error().message;
    EXPECT_EQ(*d, int(r % 3)) << "rank " << r;
  }
  a.release(1, 4);  // device 1 (ranks 1, 4) now has the fewest workers
  auto d = a.take(1, 9, 0);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, 1);
}

TEST(device_assignment, own_devices_are_distinct_across_jobs_and_refused_when_none_are_left) {
  device_assignment a(2);
  auto d0 = a.take(1, 0, 1), d1 = a.take(2, 5, 1);  // two jobs: never the same device
  ASSERT_TRUE(d0 && d1);
  EXPECT_EQ(*d0, 0);
  EXPECT_EQ(*d1, 1);
  EXPECT_EQ(*a.take(2, 5, 1), 1);  // the same worker again: the same device, nothing more taken
  auto none = a.take(1, 6, 1);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, errc::resource_exhausted);
  EXPECT_EQ(none.error().message,
            "job 1 worker 6 needs 1 GPU(s) of its own in a row and none are left of the 2 this "
            "process sees (job 1 worker 0 owns device 0, job 2 worker 5 owns device 1)");
  a.release(1, 0);
  auto again = a.take(1, 6, 1);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, 0);
  EXPECT_EQ(a.describe(), "job 1 worker 6: device 0 (own), job 2 worker 5: device 1 (own)");
}

TEST(device_assignment, several_gpus_per_worker_are_consecutive_blocks) {
  device_assignment a(5);
  EXPECT_EQ(*a.take(3, 0, 2), 0);
  EXPECT_EQ(*a.take(3, 1, 2), 2);
  auto third = a.take(3, 2, 2);
  ASSERT_FALSE(third);
  EXPECT_EQ(third.error().message,
            "job 3 worker 2 needs 2 GPU(s) of its own in a row and none are left of the 5 this "
            "process sees (job 3 worker 0 owns devices 0-1, job 3 worker 1 owns devices 2-3)");
  EXPECT_EQ(a.held().at({3, 1}), (std::vector<int>{2, 3}));
  a.release(3, 0);
  EXPECT_EQ(*a.take(3, 2, 2), 0);
}

TEST(device_assignment, shared_workers_avoid_owned_devices_and_owners_avoid_crowded_ones) {
  device_assignment a(3);
  EXPECT_EQ(*a.take(1, 0, 1), 0);  // owns device 0
  EXPECT_EQ(*a.take(2, 0, 0), 1);  // shares: not device 0, the least used of 1 and 2
  EXPECT_EQ(*a.take(2, 1, 0), 2);
  EXPECT_EQ(*a.take(2, 2, 0), 1);
  // An owner takes the unowned device fewest workers share: device 2 (one) over 1 (two).
  EXPECT_EQ(*a.take(3, 0, 1), 2);
  EXPECT_EQ(*a.take(2, 3, 0), 1);  // the only unowned device, however crowded
  EXPECT_EQ(*a.take(4, 0, 1), 1);  // shared, not owned: an owner may still take it
  EXPECT_FALSE(a.take(5, 0, 1));   // every device owned
  // Every device owned: a shared worker still runs, on the least used (device 0: its owner).
  EXPECT_EQ(*a.take(2, 4, 0), 0);
}

TEST(device_assignment, only_the_devices_named_are_handed_out) {
  device_assignment a(std::vector<int>{3, 0, 2, 3});  // coach-node --gpus 0,2,3 (any order)
  EXPECT_EQ(a.first(), 0);                            // where the job's evaluation runs, shared
  EXPECT_EQ(device_assignment(std::vector<int>{5, 4}).first(), 4);
  EXPECT_EQ(device_assignment(0).first(), std::nullopt);
  EXPECT_EQ(*a.take(1, 0, 0), 0);
  EXPECT_EQ(*a.take(1, 1, 0), 2);
  EXPECT_EQ(*a.take(1, 2, 0), 3);
  EXPECT_EQ(*a.take(1, 3, 0), 0);
  EXPECT_EQ(*a.take(2, 0, 2), 2);  // 2 and 3: the block fewest workers share (0 has two)
  auto held = a.holds();
  ASSERT_EQ(held.size(), 5u);
  EXPECT_EQ(held.back().job, 2u);
  EXPECT_EQ(held.back().devices, (std::vector<int>{2, 3}));
  EXPECT_TRUE(held.back().own);
  EXPECT_FALSE(held.front().own);
  auto none = a.take(2, 1, 2);  // only 0 and 2 remain as a block, and 2 is owned
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().message,
            "job 2 worker 1 needs 2 GPU(s) of its own in a row and none are left of the 3 this "
            "process sees (job 2 worker 0 owns devices 2-3)");
  a.release(2, 0);
  EXPECT_EQ(*a.take(2, 1, 2), 2);  // 2-3 again: two sharers against three on 0 and 2
}

TEST(device_assignment, no_visible_device_is_a_clear_error) {
  device_assignment a(0);
  auto d = a.take(2, 3, 0);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, errc::resource_exhausted);
  EXPECT_EQ(d.error().message, "job 2 worker 3 needs a CUDA device and this process sees none");
  EXPECT_EQ(a.describe(), "");
}

}  // namespace
}  // namespace coach::worker
