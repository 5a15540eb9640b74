#pragma once
// transport::peer_table: whom the ZeroMQ transport (actors/zmq_transport.hpp) can reach, and how.
//
// A peer is a host added with add_peer: its node's address and, when known, its own public key;
// the transport reaches it through a DEALER of its own. A client is a host that sent to this
// node's ROUTER without being a peer (the `coach` CLI); the table remembers the ROUTER routing
// id of its connection, so replies can reach it. Peers take precedence: a host that becomes a
// peer is no client any more, and a peer is never remembered as one. A client is forgotten
// after `client_idle` without traffic either way, when more than `max_clients` are remembered
// (the least recently used first), or when a send finds its connection gone.
//
// Plain data: no sockets, and the caller passes the time. Not thread-safe: the transport holds
// it under its own lock.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>

namespace coach::transport_logic {

/// Options of a peer_table (as zmq_transport_options' fields of the same names).
struct peer_table_options {
  /// A client's routing id is forgotten after this long without a message to or from it.
  std::chrono::milliseconds client_idle{std::chrono::minutes(10)};
  /// Clients remembered at most (at least 1); beyond this the least recently used is forgotten.
  std::size_t max_clients = 4096;
};

class peer_table {
 public:
  using clock = std::chrono::steady_clock;

  /// A peer host: its address and, when known, its own public key (Z85).
  struct peer {
    std::string address;
    std::string key;
  };

  /// How send() reaches a host: through the peer's DEALER, through the ROUTER to a client's
  /// connection (`routing_id`), or not at all.
  struct route {
    enum class via { peer, client, none };
    via how = via::none;
    std::string routing_id;  ///< for via::client
  };

  /// `self`: this node's host id, never remembered as a client.
  explicit peer_table(std::uint32_t self, peer_table_options opt = {});

  /// Makes `host` a peer at `address` with `key` (empty: the key already known for it) and
  /// forgets it as a client. True when its address or key changed (a new peer counts as
  /// changed): a connection made to the old one must be replaced.
  bool add_peer(std::uint32_t host, std::string address, std::string key);
  bool has_peer(std::uint32_t host) const { return peers_.contains(host); }
  /// The peer `host`, or nullptr when it is none. Valid until the next add_peer.
  const peer* find_peer(std::uint32_t host) const;

  /// How to reach `host` at `now`; a client so reached counts as used at `now`.
  route route_to(std::uint32_t host, clock::time_point now);

  /// Remembers (or refreshes) the routing id of `host`'s connection to the ROUTER at `now`,
  /// unless `host` is this node or a peer. Forgets the least recently used client first when
  /// max_clients are remembered.
  void remember_client(std::uint32_t host, std::string_view routing_id, clock::time_point now);
  /// Forgets client `host` whose connection `routing_id` is gone, unless it came back on
  /// another one since.
  void forget_client(std::uint32_t host, std::string_view routing_id);
  /// Forgets clients idle for longer than client_idle at `now`.
  void prune_clients(clock::time_point now);
  /// The routing id remembered for client `host`; empty when it is none.
  std::string client_id(std::uint32_t host) const;
  std::size_t clients() const { return clients_.size(); }

  /// Names `host` after its node (coach-node --name), for what the transport's figures show
  /// (the `peer` label of coach_transport_sent_*); host 0 names the node at the other end of
  /// peer 0 (the scheduler's, reached without knowing its host id). An empty name is ignored.
  void name(std::uint32_t host, std::string name);
  /// What traffic to `host` is shown under: its name where named; "clients" for a host id with
  /// bit 31 set (the `coach` CLI's, actors::client_host_id, all counted as one host);
  /// "scheduler" for host 0 until it is named (a node learns the scheduler's name with its first
  /// job); else the host id in decimal.
  std::string label(std::uint32_t host) const;

 private:
  struct client {
    std::string routing_id;
    clock::time_point last_used;
  };

  std::uint32_t self_;
  peer_table_options opt_;
  std::map<std::uint32_t, peer> peers_;
  std::unordered_map<std::uint32_t, client> clients_;
  std::map<std::uint32_t, std::string> names_;
};

}  // namespace coach::transport_logic
