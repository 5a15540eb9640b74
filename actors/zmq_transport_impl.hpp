#pragma once
// actors::detail::zmq_transport_impl: the ZeroMQ transport's sockets and I/O thread (the
// contract, the threads and the locks: actors/zmq_transport.hpp). Private to the zmq_transport
// sources, one file per job:
//   zmq_transport.cpp           start, the public calls (send, add_peer, contact_of, ...)
//   zmq_transport_send.cpp      DEALERs made on first use, sending now, the queues' retries
//   zmq_transport_receive.cpp   the I/O loop: poll set, batches received, decoded, delivered
//   zmq_transport_security.cpp  ZAP answers, the sockets' monitors, peers gone
//   zmq_transport_data.cpp      data connections: handshake, sealed sends, sealed receives
// The decisions that need no socket are plain classes (transport/): who is a peer or a
// remembered client (peer_table), how each peer's connection stands (connection_tracker), what
// arrived and was refused (receive_counter); peer_authorizer (actors/curve_keys.hpp) says who
// may connect. This class reads the sockets and hands what they say to those.

#include <poll.h>
#include <caf/abstract_actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/execution_unit.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/send.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "actors/inline_delivery.hpp"
#include "actors/route_table.hpp"
#include "actors/zmq_transport.hpp"
#include "common/log.hpp"
#include "common/log_limiter.hpp"
#include "transport/connection_tracker.hpp"
#include "transport/frame_seal.hpp"
#include "transport/peer_table.hpp"
#include "transport/receive_counter.hpp"

namespace coach::actors::detail {

/// Whether a frame is a data connection's hello (on the ROUTER) or welcome (on a DEALER):
/// zmq_transport_data.cpp; docs/wire.md "Data connections".
bool is_data_hello(const zmq::message_t& frame) noexcept;
bool is_data_welcome(const zmq::message_t& frame) noexcept;

class zmq_transport_impl final : public zmq_transport {
 public:
  explicit zmq_transport_impl(zmq_transport_options opt);
  ~zmq_transport_impl() override;

  /// Binds the ROUTER and the ZAP endpoint, starts the I/O thread.
  result<void> open();

  std::string_view name() const noexcept override { return "zmq"; }
  void bind(const endpoint& ep, caf::actor handle) override { routes_.bind(ep, std::move(handle)); }
  void bind_inline(const endpoint& ep, caf::actor handle) override {
    routes_.bind(ep, std::move(handle), true);
  }
  void unbind(const endpoint& ep) override { routes_.unbind(ep); }
  void unbind_if(const endpoint& ep, const caf::actor_addr& who) override {
    routes_.unbind_if(ep, who);
  }
  bool send(wire_message msg) override;
  traffic_stats traffic() const override { return counter_.snapshot(); }
  void connect(std::uint32_t host) override;
  void add_peer(std::uint32_t host, std::string address, std::string public_key) override;
  void name_peer(std::uint32_t host, std::string name) override;
  std::string peer_label(std::uint32_t host) const override;
  peer_contact contact_of(std::uint32_t host) override;
  std::string refusal_of(std::uint32_t host) const override;
  std::uint32_t host_id() const override { return opt_.host; }
  void on_peer_gone(peer_gone_handler handler) override;
  std::string public_key() const override;
  bool has_peer(std::uint32_t host);
  std::string bound_address() const override { return bound_; }
  receive_stats received() const override { return recv_.snapshot(); }

 private:
  using clock = std::chrono::steady_clock;

  /// A message to a peer waiting for room in its DEALER's queue.
  struct waiting {
    wire_message msg;
    clock::time_point since;
  };

  enum class sent { ok, would_block, failed };

  /// At most 5 log lines a second of one kind: a flood of bad frames must not flood the log too.
  template <class... Args>
  void log_with(coach::log::level l, log_limiter& budget, std::string_view fmt,
                const Args&... args) {
    if (!coach::log::enabled(l)) return;
    const auto suffix = budget.allow();
    if (!suffix) return;
    coach::log::at(l, "transport {}: {}{}", bound_, coach::format(fmt, args...), *suffix);
  }
  template <class... Args>
  void log(std::string_view fmt, const Args&... args) {
    log_with(coach::log::level::info, log_, fmt, args...);
  }
  /// What an operator may have to act on (a refused connection: docs/operations.md), at
  /// warning, from the same budget.
  template <class... Args>
  void warn(std::string_view fmt, const Args&... args) {
    log_with(coach::log::level::warn, log_, fmt, args...);
  }
  /// Messages received and dropped have a budget of their own: a flood of them used up the
  /// common one, and refused connections went unlogged (still counted).
  template <class... Args>
  void log_dropped(std::string_view fmt, const Args&... args) {
    log_with(coach::log::level::warn, dropped_log_, fmt, args...);
  }

  void wake();
  /// After any operation on `s`: ZeroMQ's notification descriptor (ZMQ_FD) is edge-triggered
  /// and an operation may consume the edge of a message that arrived meanwhile, so whoever
  /// operated on the socket checks for waiting input and wakes the I/O thread if there is some.
  /// REQUIRES: sock_mu_ held.
  void note_readable(zmq::socket_t& s);
  /// Starts monitoring `s`'s `events` on a PAIR socket of this transport (polled by the I/O
  /// thread).
  zmq::socket_t monitor(zmq::socket_t& s, const std::string& name, int events);

  // zmq_transport_send.cpp
  /// The DEALER to a peer host, connected on first use. REQUIRES: sock_mu_ held.
  zmq::socket_t* dealer_for(std::uint32_t host);
  /// Hands `msg` to ZeroMQ without waiting: through the ROUTER to a client (`routing_id`) or
  /// through the peer's DEALER. would_block: the DEALER's queue is full (the peer is down or
  /// slow), nothing was sent. A reply to a client that would block is dropped: a client that
  /// stopped reading must not hold messages here. REQUIRES: sock_mu_ held.
  sent send_now(const wire_message& msg, const std::string& routing_id);
  /// Retries the messages waiting for room, oldest first per host; drops those that waited
  /// longer than send_timeout. Returns true while messages still wait. I/O thread.
  bool flush_queues();

  // zmq_transport_receive.cpp
  /// Takes up to `most` waiting messages off `s` (each as its parts) without decoding them.
  /// REQUIRES: sock_mu_ held.
  std::size_t take(zmq::socket_t& s, std::size_t most,
                   std::vector<std::vector<zmq::message_t>>& out);
  /// Decodes and delivers one received message. A ROUTER (`routed`) prefixes the sender's
  /// routing id; on a DEALER parts[0] is the header. I/O thread.
  void deliver(std::vector<zmq::message_t>& parts, bool routed);
  /// Receives what waits on every socket, in bounded batches; true when input may still wait.
  /// I/O thread.
  bool receive_all();
  /// The descriptors to wait on: the eventfd, then each socket's ZMQ_FD. I/O thread.
  void refresh_poll_set(std::vector<pollfd>& fds, std::uint64_t& seen);
  void run();

  // zmq_transport_security.cpp
  /// Answers waiting ZAP requests (who may connect) and reads the handshake monitors: counts
  /// and logs refusals, records why a peer refused this node. I/O thread.
  void serve_security();
  /// Reads what the DEALERs' monitors say: connections made, closed, refused, handshakes.
  /// Returns the peers found gone. REQUIRES: sock_mu_ held (any thread: the I/O thread, or a
  /// caller of contact_of, which must not wait for the I/O thread's next wake).
  std::vector<std::uint32_t> read_dealer_monitors();
  /// Logs and hands on the peers found gone. Without sock_mu_.
  void report_gone(const std::vector<std::uint32_t>& gone);
  /// ZAP (ZeroMQ RFC 27): asks the authorizer, counts and logs a refusal, answers. I/O thread.
  void answer_zap(std::vector<zmq::message_t>& req);

  // zmq_transport_data.cpp
  /// True when messages to peers go over sealed data connections (a protection and a key).
  bool sealing() const noexcept;
  /// Binds the data ROUTER (when sealing() or with a key: this node accepts data connections
  /// whatever it sends itself). Throws zmq::error_t.
  void open_data();
  /// Sends `msg` sealed over the data connection to its host; without one yet, says hello on
  /// `curve` (the host's CURVE DEALER) and returns would_block until the welcome. REQUIRES:
  /// sock_mu_ held.
  sent send_sealed(const wire_message& msg, zmq::socket_t& curve);
  /// Starts the handshake with `host`: a hello on its CURVE DEALER. would_block: sent (the
  /// message waits for the welcome) or no room for it; failed: not a peer. REQUIRES: sock_mu_.
  sent say_hello(std::uint32_t host, zmq::socket_t& curve);
  /// Forgets the data connection to `host` (its CURVE connection closed or was replaced).
  /// REQUIRES: sock_mu_ held.
  void forget_data_link(std::uint32_t host);
  /// A hello that arrived on the ROUTER (`parts`: routing id, hello): answers with a welcome
  /// and remembers the session. I/O thread, without sock_mu_.
  void answer_hello(std::vector<zmq::message_t>& parts);
  /// A welcome that arrived on a DEALER: connects the data DEALER. I/O thread, without sock_mu_.
  void accept_welcome(const zmq::message_t& welcome);
  /// Opens a sealed message from the data ROUTER and delivers it; refused ones are counted.
  /// I/O thread.
  void deliver_sealed(std::vector<zmq::message_t>& parts);
  /// The ZAP answer for the data ROUTER: PLAIN with a token of a session not yet admitted.
  zap_verdict admit_data(std::string_view mechanism, std::string_view address,
                         std::string_view token);
  /// Decodes `header` and hands the message made of parts [first, last) to its actor; a
  /// message from a host that is no peer remembers `client_id` as its route. I/O thread.
  void deliver_decoded(std::span<const std::byte> header, std::vector<zmq::message_t>& parts,
                       std::size_t first, std::size_t last, std::string_view client_id,
                       const std::string& from);

  zmq_transport_options opt_;
  peer_authorizer authorizer_;
  /// Random per transport object: part of every DEALER's routing id.
  const std::uint32_t instance_ = std::random_device{}();
  zmq::context_t ctx_;
  std::string bound_;
  int wake_fd_ = -1;
  std::thread io_;
  std::atomic<bool> stop_{false};

  // Each lock (with what it guards) on cache lines of its own: senders on any thread and the
  // I/O thread take them on every message. Without this, adding one field to the options
  // (which shifts every member) went with 1 MiB ps_bench rounds at 0.78 instead of 0.84 of raw
  // ZeroMQ in 6 paired runs; aligned, the two layouts measure alike.
  // guards peers_, links_ and on_peer_gone_; taken after sock_mu_, never before it
  alignas(64) mutable std::mutex mu_;
  coach::transport_logic::peer_table peers_;          ///< peers and remembered clients
  coach::transport_logic::connection_tracker links_;  ///< by peer host: how its connection stands
  peer_gone_handler on_peer_gone_;

  // Sockets are used by whichever thread holds sock_mu_: senders send on them directly, the
  // I/O thread receives. Guarded by sock_mu_ too: the queues, the encoding scratch space.
  alignas(64) std::mutex sock_mu_;
  zmq::socket_t router_;
  zmq::socket_t zap_;             ///< the ZAP handler's endpoint (I/O thread only)
  zmq::socket_t router_monitor_;  ///< handshakes the ROUTER refused
  std::map<std::uint32_t, zmq::socket_t> dealers_;
  std::map<std::uint32_t, zmq::socket_t> dealer_monitors_;  ///< by host: its DEALER's handshakes
  std::uint64_t monitors_made_ = 0;
  std::map<std::uint32_t, std::deque<waiting>> queues_;  ///< by destination host
  bool queued_ = false;                                  ///< some queue is not empty
  bool closed_ = false;
  std::uint64_t sockets_changed_ = 0;
  std::vector<std::size_t> sizes_;
  std::vector<std::byte> header_;
  /// This node's data connection to one peer: the hello's nonce until the welcome, then the
  /// socket and the sealer.
  struct data_link {
    coach::transport_logic::seal_nonce nonce{};
    std::string server_key;  ///< Z85: the key the CURVE DEALER expects of the peer
    std::string address;     ///< the peer's CURVE address (its IP is the data address's too)
    clock::time_point since;
    std::optional<zmq::socket_t> socket;
    std::unique_ptr<coach::transport_logic::frame_sealer> sealer;
  };
  std::map<std::uint32_t, data_link> data_links_;  ///< by peer host
  zmq::socket_t data_router_;                      ///< receives data connections
  std::uint16_t data_port_ = 0;
  std::uint64_t data_links_made_ = 0;

  /// A data connection a peer may open to this node, by its token (I/O thread only).
  struct data_session {
    std::uint32_t host = 0;  ///< the peer's host id (its hello says)
    std::string curve_id;    ///< the routing id of its CURVE connection: replies to a client
    std::unique_ptr<coach::transport_logic::frame_opener> opener;
    clock::time_point since;
    bool admitted = false;
  };
  std::map<std::string, data_session> data_sessions_;
  coach::transport_logic::raw_key own_public_{}, own_secret_{};

  // I/O thread only.
  std::optional<detail::inline_unit>
      unit_;  ///< made at the first delivery (it needs the actor system)
  std::vector<std::vector<zmq::message_t>> incoming_;
  std::size_t security_fds_ = 0;      ///< where the ZAP and monitor sockets begin in the poll set
  std::vector<std::uint8_t> source_;  ///< of each incoming_: 0 ROUTER, 1 DEALER, 2 data ROUTER
  std::vector<std::size_t> recv_sizes_;

  alignas(64) detail::route_table routes_;
  alignas(64) detail::traffic_counter counter_;
  alignas(64) coach::transport_logic::receive_counter recv_;
  log_limiter log_, dropped_log_;
};

}  // namespace coach::actors::detail
