#pragma once
// transport::connection_tracker: how the ZeroMQ transport's connection to each peer host stands,
// from the events its DEALER's monitor reports (actors/zmq_transport.hpp reads them and hands
// each here as a link_event).
//
// Per peer host it follows:
// - contact (contact_of): connected once a handshake succeeded, until the connection closes;
//   connect_failed when an attempt to reconnect was retried without even a TCP connection
//   (nothing listens at the address, or it is unreachable); unanswered when a handshake failed
//   without detail at least 9/10 of handshake_interval after its TCP connection: it timed out
//   (a frozen or overloaded host, or not a Coach node), which says nothing of keys.
// - gone: a connection whose handshake had succeeded closed, and the next reconnection was
//   refused: the host is up but nothing listens at its address (its process is gone). Said once
//   per closed connection; a handshake that fails or times out closes a connection too, with its
//   peer still there, and does not arm it.
// - refusal (refusal_of): why the last handshake failed, as a sentence for the user. A refusal
//   with a reason (the server's ZAP answer, a mechanism mismatch) counts at once; a failure
//   without detail (the server could not decrypt: another server key; or it closed on a
//   mismatch before saying so) only when no detailed reason is known and after
//   vague_failures_to_refuse of them in a row. A successful handshake clears it.
//
// Plain data: no sockets, and the caller passes the time. Not thread-safe: the transport holds
// it under its own lock.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace coach::transport_logic {

/// A monitor event of a DEALER's connection (ZeroMQ's ZMQ_EVENT_*), as this tracker tells them.
enum class link_event : std::uint8_t {
  connected,                   ///< the TCP connection was made (before its handshake)
  handshake_succeeded,         ///< keys checked, the connection is up
  handshake_refused,           ///< the server's authentication (ZAP) refused this process
  mechanism_mismatch,          ///< one side offered a key, the other uses none
  handshake_failed,            ///< any other protocol error in the handshake
  handshake_failed_no_detail,  ///< failed without a reason (closed, undecryptable, timed out)
  disconnected,                ///< the connection closed
  connect_retried,             ///< ZeroMQ tries to connect again after a failed attempt
};

/// How the connection to a peer stands (zmq_transport::contact_of).
struct peer_contact {
  bool connected = false;       ///< its handshake succeeded and it has not closed since
  bool connect_failed = false;  ///< an attempt to connect failed since (refused, unreachable)
  bool unanswered = false;      ///< a connection was accepted but its handshake not answered
};

/// Options of a connection_tracker (as zmq_transport_options' fields of the same names).
struct connection_tracker_options {
  /// ZeroMQ's handshake limit: a failure without detail this long (9/10 of it, for the
  /// monitor's delay) after its TCP connection is a time-out.
  std::chrono::milliseconds handshake_interval{10000};
  /// Failures without detail in a row before they count as a refusal.
  int vague_failures_to_refuse = 2;
  /// This process has a key pair (CURVE): the refusal sentences differ.
  bool keyed = false;
};

class connection_tracker {
 public:
  using clock = std::chrono::steady_clock;

  /// What one event asks the caller to say or do.
  struct outcome {
    bool gone = false;        ///< the peer's process is gone (once per closed connection)
    bool unanswered = false;  ///< its handshake was found timed out (said once per contact)
    std::string refusal;      ///< a refusal to log: set when the reason known changed
  };

  explicit connection_tracker(connection_tracker_options opt = {});

  /// Records event `e` on the connection to peer `host` at `now`. `address` and `expected_key`
  /// (the server key this process expects of it, Z85) go into the refusal's sentence.
  outcome note(std::uint32_t host, link_event e, clock::time_point now, std::string_view address,
               std::string_view expected_key);

  /// How the connection to `host` stands; all false when no event was seen.
  peer_contact contact(std::uint32_t host) const;
  /// Why the last handshake with `host` failed; empty when it succeeded or none failed.
  std::string refusal(std::uint32_t host) const;
  /// Forgets all about `host` (its connection is replaced by a new one).
  void forget(std::uint32_t host);

 private:
  /// The `unanswered` part of note(): whether a failure without detail at `now` is a time-out.
  bool timed_out(std::uint32_t host, clock::time_point now, outcome& out);

  connection_tracker_options opt_;
  std::map<std::uint32_t, peer_contact> contacts_;  ///< by peer host: how connecting went
  std::map<std::uint32_t, bool> attempt_reached_;   ///< by peer host: TCP connected this try
  std::map<std::uint32_t, clock::time_point> connected_at_;  ///< by peer host: the last TCP connect
  std::map<std::uint32_t, int> vague_failures_;    ///< by peer host: failures without detail
  std::map<std::uint32_t, std::string> refusals_;  ///< by peer host: why its handshake failed
  /// By peer host: its connection closed and no reconnection was refused since (true), or was
  /// (false: reported).
  std::map<std::uint32_t, bool> closed_peers_;
};

}  // namespace coach::transport_logic
