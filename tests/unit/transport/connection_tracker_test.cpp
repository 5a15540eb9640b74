// transport::connection_tracker driven by monitor events on a manual clock, as the ZeroMQ
// transport hands them over: how a peer's contact stands (connected, connect failed, handshake
// unanswered after 9/10 of handshake_interval), a peer's process found gone exactly once per
// closed connection, and the refusal sentence a user reads: at once for a reason, after
// vague_failures_to_refuse failures without detail, never replacing a known reason, cleared by a
// handshake that succeeds, and handed back to log only when it changed.
#include "transport/connection_tracker.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace coach::transport_logic {
namespace {

using namespace std::chrono_literals;
using ev = link_event;

const connection_tracker::clock::time_point t0{};
constexpr std::uint32_t host = 3;
constexpr const char* addr = "tcp://10.0.0.3:5000";
constexpr const char* server_key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";

connection_tracker::outcome note(connection_tracker& t, ev e,
                                 connection_tracker::clock::time_point at = t0) {
  return t.note(host, e, at, addr, server_key);
}

TEST(connection_tracker, contact_follows_connections_and_tells_a_refused_connect) {
  connection_tracker t;
  EXPECT_FALSE(t.contact(host).connected);
  note(t, ev::connect_retried);  // not even TCP got through
  EXPECT_TRUE(t.contact(host).connect_failed);
  EXPECT_FALSE(t.contact(host).connected);
  note(t, ev::connected);
  note(t, ev::handshake_succeeded);
  EXPECT_TRUE(t.contact(host).connected);
  EXPECT_FALSE(t.contact(host).connect_failed);
  note(t, ev::disconnected);
  EXPECT_FALSE(t.contact(host).connected);

  // A retry after a TCP connection whose handshake failed is no refused connect.
  connection_tracker u;
  u.note(host, ev::connected, t0, addr, server_key);
  u.note(host, ev::handshake_failed, t0, addr, server_key);
  u.note(host, ev::connect_retried, t0, addr, server_key);
  EXPECT_FALSE(u.contact(host).connect_failed);
  u.note(host, ev::connect_retried, t0, addr, server_key);  // this attempt: no TCP
  EXPECT_TRUE(u.contact(host).connect_failed);
}

TEST(connection_tracker, a_process_is_gone_once_per_closed_connection) {
  connection_tracker t;
  note(t, ev::connected);
  note(t, ev::handshake_succeeded);
  EXPECT_FALSE(note(t, ev::disconnected).gone);
  EXPECT_TRUE(note(t, ev::connect_retried).gone);
  EXPECT_FALSE(note(t, ev::connect_retried).gone);  // said once
  // Up again, closed again: said again.
  note(t, ev::connected);
  note(t, ev::handshake_succeeded);
  note(t, ev::disconnected);
  EXPECT_TRUE(note(t, ev::connect_retried).gone);
}

TEST(connection_tracker, a_connection_that_never_succeeded_or_came_back_is_not_gone) {
  connection_tracker t;
  // Closed after a failed handshake: its peer is still there.
  note(t, ev::connected);
  note(t, ev::handshake_failed);
  note(t, ev::disconnected);
  EXPECT_FALSE(note(t, ev::connect_retried).gone);
  // Closed after success, then a handshake succeeds again before any refusal: disarmed.
  note(t, ev::connected);
  note(t, ev::handshake_succeeded);
  note(t, ev::disconnected);
  note(t, ev::connected);
  note(t, ev::handshake_succeeded);
  EXPECT_FALSE(note(t, ev::connect_retried).gone);
}

TEST(connection_tracker, a_reasoned_refusal_counts_at_once_and_is_logged_when_it_changes) {
  connection_tracker t({.keyed = true});
  const auto out = note(t, ev::handshake_refused);
  EXPECT_EQ(out.refusal,
            "not authorized: tcp://10.0.0.3:5000 refused this process's key (it is not in that "
            "node's authorized keys)");
  EXPECT_EQ(t.refusal(host), out.refusal);
  EXPECT_EQ(note(t, ev::handshake_refused).refusal, "");  // the same: not said again
  EXPECT_EQ(t.refusal(host), out.refusal);
  EXPECT_EQ(note(t, ev::mechanism_mismatch).refusal,
            "not authorized: tcp://10.0.0.3:5000 uses no keys, this process does (--key / "
            "COACH_KEY): both sides need keys, or neither");
  note(t, ev::handshake_succeeded);
  EXPECT_EQ(t.refusal(host), "");
}

TEST(connection_tracker, refusal_sentences_of_a_process_without_key) {
  connection_tracker t({.keyed = false});
  EXPECT_EQ(note(t, ev::handshake_refused).refusal,
            "not authorized: tcp://10.0.0.3:5000 refused this process's plain connection (that "
            "node takes them from loopback only; give --key or set COACH_KEY)");
  EXPECT_EQ(note(t, ev::mechanism_mismatch).refusal,
            "not authorized: tcp://10.0.0.3:5000 requires a key: give --key FILE or set "
            "COACH_KEY (coach keygen makes one)");
  EXPECT_EQ(note(t, ev::handshake_failed).refusal,
            "not authorized: the handshake with tcp://10.0.0.3:5000 failed (it requires a key: "
            "give --key FILE or set COACH_KEY)");
}

TEST(connection_tracker, failures_without_detail_refuse_only_after_enough_and_without_a_reason) {
  connection_tracker t({.vague_failures_to_refuse = 2, .keyed = true});
  EXPECT_EQ(note(t, ev::handshake_failed_no_detail).refusal, "");  // a reason may follow
  EXPECT_EQ(t.refusal(host), "");
  const auto second = note(t, ev::handshake_failed_no_detail).refusal;
  EXPECT_EQ(second,
            "not authorized: the handshake with tcp://10.0.0.3:5000 failed: its key is not the "
            "server key this process expects (rq:rM>}U...; --server-key), or it uses no keys");
  EXPECT_EQ(t.refusal(host), second);
  // A known reason is not replaced by failures without detail.
  connection_tracker u({.vague_failures_to_refuse = 1, .keyed = true});
  const auto reason = u.note(host, ev::handshake_refused, t0, addr, server_key).refusal;
  ASSERT_FALSE(reason.empty());
  EXPECT_EQ(u.note(host, ev::handshake_failed_no_detail, t0, addr, server_key).refusal, "");
  EXPECT_EQ(u.refusal(host), reason);
  // One is enough for a user's command (vague_failures_to_refuse 1).
  connection_tracker cli({.vague_failures_to_refuse = 1, .keyed = false});
  EXPECT_FALSE(cli.note(host, ev::handshake_failed_no_detail, t0, addr, "").refusal.empty());
}

TEST(connection_tracker, a_handshake_unanswered_for_nine_tenths_of_the_interval_timed_out) {
  connection_tracker t({.handshake_interval = 10s, .vague_failures_to_refuse = 1, .keyed = true});
  note(t, ev::connected, t0);
  // Early: a failure without detail is a refusal, not a time-out.
  auto early = note(t, ev::handshake_failed_no_detail, t0 + 8999ms);
  EXPECT_FALSE(early.unanswered);
  EXPECT_FALSE(early.refusal.empty());
  EXPECT_FALSE(t.contact(host).unanswered);

  connection_tracker u({.handshake_interval = 10s, .vague_failures_to_refuse = 1, .keyed = true});
  u.note(host, ev::connected, t0, addr, server_key);
  auto late = u.note(host, ev::handshake_failed_no_detail, t0 + 9s, addr, server_key);
  EXPECT_TRUE(late.unanswered);
  EXPECT_EQ(late.refusal, "");  // says nothing of keys
  EXPECT_EQ(u.refusal(host), "");
  EXPECT_TRUE(u.contact(host).unanswered);
  EXPECT_FALSE(u.note(host, ev::handshake_failed_no_detail, t0 + 20s, addr, server_key).unanswered);
  EXPECT_TRUE(u.contact(host).unanswered);  // said once, still so
  u.note(host, ev::handshake_succeeded, t0 + 21s, addr, server_key);
  EXPECT_FALSE(u.contact(host).unanswered);
}

TEST(connection_tracker, forget_starts_a_new_connection_from_nothing) {
  connection_tracker t({.keyed = true});
  note(t, ev::connected);
  note(t, ev::handshake_succeeded);
  note(t, ev::handshake_refused);
  note(t, ev::disconnected);
  t.forget(host);
  EXPECT_EQ(t.refusal(host), "");
  EXPECT_FALSE(t.contact(host).connected);
  EXPECT_FALSE(note(t, ev::connect_retried).gone);  // the old connection's close is forgotten
  EXPECT_EQ(t.contact(host).connect_failed, true);
}

}  // namespace
}  // namespace coach::transport_logic
