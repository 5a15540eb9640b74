// transport::peer_table driven without sockets, on a manual clock: peers take precedence over
// clients, a changed address or key asks for a new connection (an empty key is no change), a
// client is reached by its latest routing id and counts as used when reached, and clients are
// forgotten when idle, when too many are remembered (least recently used first), or when their
// connection is gone (not when they came back on another).
#include "transport/peer_table.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace coach::transport_logic {
namespace {

using namespace std::chrono_literals;
using via = peer_table::route::via;

constexpr std::uint32_t self = 7;
const peer_table::clock::time_point t0{};

TEST(peer_table, a_peer_is_reached_through_its_dealer_and_an_unknown_host_not_at_all) {
  peer_table t(self);
  EXPECT_FALSE(t.has_peer(1));
  EXPECT_EQ(t.route_to(1, t0).how, via::none);
  EXPECT_TRUE(t.add_peer(1, "tcp://10.0.0.1:5000", "KEY1"));
  EXPECT_TRUE(t.has_peer(1));
  const auto r = t.route_to(1, t0);
  EXPECT_EQ(r.how, via::peer);
  EXPECT_TRUE(r.routing_id.empty());
  ASSERT_NE(t.find_peer(1), nullptr);
  EXPECT_EQ(t.find_peer(1)->address, "tcp://10.0.0.1:5000");
  EXPECT_EQ(t.find_peer(1)->key, "KEY1");
  EXPECT_EQ(t.find_peer(2), nullptr);
}

TEST(peer_table, only_a_changed_address_or_key_asks_for_a_new_connection) {
  peer_table t(self);
  ASSERT_TRUE(t.add_peer(1, "tcp://a:1", ""));  // new: changed
  EXPECT_FALSE(t.add_peer(1, "tcp://a:1", ""));
  EXPECT_TRUE(t.add_peer(1, "tcp://a:1", "K"));  // its key became known
  EXPECT_FALSE(t.add_peer(1, "tcp://a:1", ""));  // empty: the key already known
  EXPECT_EQ(t.find_peer(1)->key, "K");
  EXPECT_TRUE(t.add_peer(1, "tcp://a:1", "K2"));  // rotated
  EXPECT_TRUE(t.add_peer(1, "tcp://b:1", ""));    // moved
  EXPECT_EQ(t.find_peer(1)->address, "tcp://b:1");
  EXPECT_EQ(t.find_peer(1)->key, "K2");
}

TEST(peer_table, a_client_is_reached_by_its_latest_routing_id_and_never_when_self_or_a_peer) {
  peer_table t(self);
  t.remember_client(self, "own", t0);
  EXPECT_EQ(t.clients(), 0u);
  t.remember_client(9, "id-a", t0);
  t.remember_client(9, "id-b", t0 + 1s);  // reconnected
  EXPECT_EQ(t.clients(), 1u);
  const auto r = t.route_to(9, t0 + 2s);
  EXPECT_EQ(r.how, via::client);
  EXPECT_EQ(r.routing_id, "id-b");
  // A peer is never a client, and becoming one forgets it as a client.
  t.add_peer(9, "tcp://c:1", "");
  EXPECT_EQ(t.clients(), 0u);
  EXPECT_EQ(t.route_to(9, t0).how, via::peer);
  t.remember_client(9, "id-c", t0);
  EXPECT_EQ(t.clients(), 0u);
}

TEST(peer_table, idle_clients_are_pruned_and_a_send_counts_as_use) {
  peer_table t(self, {.client_idle = 10s, .max_clients = 100});
  t.remember_client(20, "a", t0);
  t.remember_client(21, "b", t0);
  t.route_to(21, t0 + 8s);  // a reply keeps it
  t.prune_clients(t0 + 10s);
  EXPECT_EQ(t.clients(), 2u);  // idle for exactly client_idle: kept
  t.prune_clients(t0 + 11s);
  EXPECT_EQ(t.client_id(20), "");
  EXPECT_EQ(t.client_id(21), "b");
  t.prune_clients(t0 + 19s);
  EXPECT_EQ(t.clients(), 0u);
}

TEST(peer_table, beyond_max_clients_the_least_recently_used_is_forgotten) {
  peer_table t(self, {.client_idle = 1h, .max_clients = 2});
  t.remember_client(30, "a", t0);
  t.remember_client(31, "b", t0 + 1s);
  t.route_to(30, t0 + 2s);  // 31 is now the least recently used
  t.remember_client(32, "c", t0 + 3s);
  EXPECT_EQ(t.clients(), 2u);
  EXPECT_EQ(t.client_id(30), "a");
  EXPECT_EQ(t.client_id(31), "");
  EXPECT_EQ(t.client_id(32), "c");
  // max_clients 0 counts as 1.
  peer_table one(self, {.client_idle = 1h, .max_clients = 0});
  one.remember_client(40, "x", t0);
  one.remember_client(41, "y", t0 + 1s);
  EXPECT_EQ(one.clients(), 1u);
  EXPECT_EQ(one.client_id(41), "y");
}

TEST(peer_table, a_gone_connection_forgets_its_client_unless_it_came_back_on_another) {
  peer_table t(self);
  t.remember_client(50, "old", t0);
  t.remember_client(50, "new", t0 + 1s);
  t.forget_client(50, "old");  // a send on the old connection found it gone
  EXPECT_EQ(t.client_id(50), "new");
  t.forget_client(50, "new");
  EXPECT_EQ(t.route_to(50, t0).how, via::none);
}

}  // namespace
}  // namespace coach::transport_logic
