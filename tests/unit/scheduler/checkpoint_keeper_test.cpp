// scheduler::checkpoint_keeper: which checkpoint a job keeps, which it holds back until its
// epoch's record is in, and when one is due in the store.

#include "scheduler/checkpoint_keeper.hpp"

#include <gtest/gtest.h>

#include <memory>

namespace coach::scheduler {
namespace {

std::shared_ptr<const ps::training_state> state_of(float v) {
  auto s = std::make_shared<ps::training_state>();
  s->values.assign(4, v);
  return s;
}

TEST(checkpoint_keeper, a_checkpoint_is_due_every_store_every_s_and_for_the_last_epoch) {
  checkpoint_keeper k(30, 100);  // submitted at 100 s
  EXPECT_FALSE(k.state());
  EXPECT_EQ(k.resume_epoch(), 0u);
  EXPECT_FALSE(k.unstored());
  EXPECT_FALSE(k.offer(0, state_of(1), 1, 10, 120)) << "20 s after the submission";
  EXPECT_TRUE(k.unstored());
  EXPECT_EQ(k.epoch(), 0u);
  EXPECT_EQ(k.at(), 120.0);
  EXPECT_EQ(k.resume_epoch(), 1u);
  EXPECT_TRUE(k.offer(1, state_of(2), 2, 10, 130)) << "30 s after the submission";
  k.stored(130);
  EXPECT_FALSE(k.unstored());
  EXPECT_EQ(k.stored_at(), 130.0);
  EXPECT_FALSE(k.offer(2, state_of(3), 3, 10, 140)) << "10 s after the last";
  EXPECT_TRUE(k.offer(9, state_of(4), 10, 10, 141)) << "the job's last epoch";
  EXPECT_EQ(k.state()->values, std::vector<float>(4, 4.f));
  EXPECT_FALSE(k.offer(5, nullptr, 10, 10, 150)) << "no state: ignored";
  EXPECT_EQ(k.epoch(), 9u);
}

TEST(checkpoint_keeper, a_checkpoint_ahead_of_its_epoch_record_is_held_until_it_is_in) {
  checkpoint_keeper k(60, 0);
  EXPECT_FALSE(k.offer(1, state_of(1), 2, 10, 10));
  EXPECT_FALSE(k.offer(2, state_of(2), 2, 10, 11)) << "epoch 2's record is not in";
  EXPECT_TRUE(k.holds());
  EXPECT_EQ(k.epoch(), 1u) << "the one kept is still epoch 1's";
  EXPECT_FALSE(k.release(2)) << "still not in";
  const auto held = k.release(3);
  ASSERT_TRUE(held);
  EXPECT_EQ(held->first, 2u);
  EXPECT_EQ(held->second->values, std::vector<float>(4, 2.f));
  EXPECT_FALSE(k.holds());
  EXPECT_FALSE(k.release(3)) << "taken out";
}

TEST(checkpoint_keeper, a_restored_checkpoint_is_stored_and_an_ended_job_drops_it) {
  checkpoint_keeper k(60, 5);
  k.restore(4, 3, state_of(7));
  EXPECT_EQ(k.resume_epoch(), 5u);
  EXPECT_EQ(k.at(), 3.0);
  EXPECT_FALSE(k.unstored()) << "it came from the store";
  k.drop();
  EXPECT_FALSE(k.state());
  EXPECT_EQ(k.resume_epoch(), 0u);
}

}  // namespace
}  // namespace coach::scheduler
