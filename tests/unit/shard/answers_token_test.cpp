// shard::answers_token: the owner is told that a step's answers have left only when it waits
// for that, once, on whichever thread lets go of the last copy.
#include "shard/answers_token.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

namespace coach::shard {
namespace {

std::shared_ptr<const std::function<void()>> counting(std::atomic<int>& calls) {
  return std::make_shared<const std::function<void()>>([&calls] { ++calls; });
}

TEST(answers_token, ends_silently_when_nobody_awaits_it) {
  std::atomic<int> calls = 0;
  {
    auto t = std::make_shared<answers_token>(counting(calls));
    auto copy = t;
  }
  EXPECT_EQ(calls, 0);
}

TEST(answers_token, awaited_tells_the_owner_once_when_the_last_copy_ends) {
  std::atomic<int> calls = 0;
  auto t = std::make_shared<answers_token>(counting(calls));
  std::shared_ptr<const void> carried = t;  // as wire_message::sent holds it
  t->await();
  t.reset();
  EXPECT_EQ(calls, 0);  // a copy still travels
  carried.reset();
  EXPECT_EQ(calls, 1);
}

TEST(answers_token, the_last_copy_ending_on_another_thread_tells_the_owner_there) {
  std::thread::id told_on;
  int calls = 0;
  auto t = std::make_shared<answers_token>(std::make_shared<const std::function<void()>>([&] {
    told_on = std::this_thread::get_id();
    ++calls;
  }));
  std::shared_ptr<const void> carried = t;  // the answer ZeroMQ still holds
  std::weak_ptr<answers_token> watched = t;
  t.reset();
  // The owner's side (shard_server::send_transfers): await the token while it is alive.
  auto alive = watched.lock();
  ASSERT_TRUE(alive);
  alive->await();
  alive.reset();
  EXPECT_EQ(calls, 0);
  std::thread io([c = std::move(carried)]() mutable { c.reset(); });
  const auto io_id = io.get_id();
  io.join();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(told_on, io_id);
}

}  // namespace
}  // namespace coach::shard
