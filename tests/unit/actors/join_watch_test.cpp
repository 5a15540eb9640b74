// actors::join_watch: a joining node says at once that it cannot reach its scheduler, then
// every few seconds while that lasts, once when it gets through, and again after a loss; a
// scheduler that never answers the handshake is said to be so, not taken for a refusal.
#include "actors/join_watch.hpp"

#include <gtest/gtest.h>

namespace coach::actors {
namespace {

using namespace std::chrono_literals;

TEST(join_watch, says_the_trouble_at_once_then_every_few_seconds_then_the_way_through) {
  join_watch w("tcp://10.0.0.1:7470", 5s);
  const auto t0 = join_watch::clock::time_point{} + 100s;
  EXPECT_FALSE(w.look(false, false, "", t0)) << "nothing tried yet";
  auto l = w.look(false, true, "", t0 + 100ms);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->level, log::level::warn);
  EXPECT_EQ(l->text,
            "cannot reach the scheduler at tcp://10.0.0.1:7470: connection refused (nothing "
            "listens there yet?); retrying every 100 ms");
  EXPECT_FALSE(w.look(false, true, "", t0 + 2s));
  l = w.look(false, true, "", t0 + 5200ms);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->text, "still cannot reach the scheduler at tcp://10.0.0.1:7470 after 5 s; retrying");
  EXPECT_FALSE(w.look(false, true, "", t0 + 6s));
  l = w.look(true, false, "", t0 + 7100ms);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->level, log::level::info);
  EXPECT_EQ(l->text, "reached the scheduler at tcp://10.0.0.1:7470 after 7.0 s");
  EXPECT_FALSE(w.look(true, false, "", t0 + 8s)) << "said once";
  // Lost (the scheduler restarts), then back.
  l = w.look(false, true, "", t0 + 20s);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->level, log::level::warn);
  l = w.look(true, false, "", t0 + 21s);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->text, "reached the scheduler at tcp://10.0.0.1:7470 after 1.0 s");
}

TEST(join_watch, a_refusal_is_an_error_said_once_per_reason) {
  join_watch w("tcp://10.0.0.1:7470");
  const auto t0 = join_watch::clock::time_point{} + 100s;
  auto l =
      w.look(false, false, "not authorized: tcp://10.0.0.1:7470 refused this process's key", t0);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->level, log::level::error);
  EXPECT_EQ(l->text, "not authorized: tcp://10.0.0.1:7470 refused this process's key; retrying");
  EXPECT_FALSE(w.look(false, false,
                      "not authorized: tcp://10.0.0.1:7470 refused this process's key", t0 + 9s));
  l = w.look(true, false, "", t0 + 10s);  // the key was authorized meanwhile
  ASSERT_TRUE(l);
  EXPECT_EQ(l->text, "reached the scheduler at tcp://10.0.0.1:7470 after 10.0 s");
}

TEST(join_watch, a_scheduler_that_never_answers_the_handshake_is_said_so_not_a_refusal) {
  join_watch w("tcp://10.0.0.1:7470", 5s);
  const auto t0 = join_watch::clock::time_point{} + 100s;
  EXPECT_FALSE(w.look(false, false, "", t0, false)) << "the handshake is still pending";
  auto l = w.look(false, false, "", t0 + 10s, true);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->level, log::level::warn);
  EXPECT_EQ(l->text,
            "cannot reach the scheduler at tcp://10.0.0.1:7470: it accepts connections but never "
            "answers the handshake (a frozen or overloaded host, or not a coach-node there?); "
            "retrying");
  EXPECT_FALSE(w.look(false, false, "", t0 + 12s, true));
  l = w.look(false, false, "", t0 + 15s, true);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->text, "still cannot reach the scheduler at tcp://10.0.0.1:7470 after 5 s; retrying");
  l = w.look(true, false, "", t0 + 16s);  // the host thawed
  ASSERT_TRUE(l);
  EXPECT_EQ(l->text, "reached the scheduler at tcp://10.0.0.1:7470 after 6.0 s");
}

}  // namespace
}  // namespace coach::actors
