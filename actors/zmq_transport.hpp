#pragma once
// actors::zmq_transport: the transport between hosts. Messages to endpoints on this host are
// delivered in process (zero copy, as inproc_transport); messages to another host leave as one
// ZeroMQ multipart message: a Cap'n Proto header frame (actors/codec.hpp) and then each payload
// frame as its own ZeroMQ frame, handed to ZeroMQ without copying (the frame's owner is kept
// alive until ZeroMQ has sent it). docs/wire.md has the format.
//
// Sockets: one ROUTER bound at the listen address receives from every peer; one DEALER per peer
// host (routing id: SRC.DST.NONCE, unique per connection), connected on first use, sends to it.
// ZeroMQ reconnects a DEALER whose peer restarted. The I/O thread polls the ROUTER, every DEALER
// and the eventfd; a message arriving on a DEALER (a reply to a request this node sent) is
// decoded and delivered exactly like one arriving on the ROUTER.
//
// Reply path to clients: a client (the `coach` CLI: a transport with a host id of its own that
// no node adds as a peer) sends to a node through its DEALER. When the ROUTER receives a message
// whose envelope src.host is not a peer, the transport remembers that host's ROUTER routing id;
// send() to a host with no peer address but a remembered routing id goes out through the ROUTER
// to that connection. A routing id is forgotten after `client_idle` without traffic either way,
// when more than `max_clients` are remembered (least recently used first), or when a send finds
// the client gone (ROUTER_MANDATORY: EHOSTUNREACH, counted as dropped). Peers take precedence: a
// host added with add_peer is always reached through its DEALER. What is sent to clients counts in
// traffic() under one destination host for all of them, clients_host.
//
// Host 0: a destination host 0 means "the node at the other end of this link". send() routes
// it to peer 0 (the address given to --join or --at) or, where no peer 0 was added (the
// scheduler's own node), delivers it locally; a received message addressed to host 0 is for this
// node. So a node reaches the scheduler at {0, scheduler_id} without knowing its host id.
//
// Threads: the sockets are shared under one lock. send() from any thread delivers local
// messages at once and hands a remote one to ZeroMQ itself, without waiting (no hand-off to
// another thread: each hand-off cost a thread wake-up on the critical path of every push and
// reply, docs/performance.md "ps_bench"). A message that finds its peer's queue full (the peer
// is down or slow), or messages to that host already waiting, waits in a queue per destination
// host, in order; the I/O thread retries those every few milliseconds and drops (and counts)
// what waited longer than `send_timeout`, so a peer that is down costs only its own messages.
// The I/O thread waits on the sockets' notification descriptors (ZMQ_FD) and an eventfd,
// receives under the lock in bounded batches, and decodes and delivers outside it. It delivers
// as a CAF execution unit: an actor bound with bind_inline (shards) that a delivery wakes from
// idle runs on the I/O thread itself once the batch is delivered (one per batch, a few messages
// at most, the rest of its mailbox on a scheduler thread; only messages of at most
// `inline_bytes`, so the I/O thread is held briefly), which saves the wake-up of a
// scheduler thread on every push (ps_bench, 1 MiB, 1 shard: 0.76 -> 0.84 of raw ZeroMQ); every
// other actor is scheduled as by caf::anon_send. ZMQ_FD is edge-triggered and any operation on a
// socket may consume an edge, so every thread that used a socket checks it for input afterwards and
// wakes the I/O thread when some waits. The peer table and the remembered clients have their own
// lock (taken after the socket lock, never before); counters theirs. A malformed or foreign message
// is counted, logged (at most a few lines a second) and dropped, never a crash.
//
// Authentication (actors/curve_keys.hpp, docs/security.md): with a key pair, the ROUTER is a
// CURVE server and every DEALER a CURVE client, whose expected server key is the peer's own
// (add_peer) or zmq_transport_options::security's server key. Who may connect is decided by a
// ZAP handler on the I/O thread (peer_authorizer: an authorized key; without a key pair, a
// loopback address). Refused connections and failed handshakes are counted (receive_stats) and
// logged; a DEALER's monitor records why its peer refused it (refusal_of), so that a client says
// "not authorized" at once instead of waiting for an answer that cannot come. The same monitor
// tells when a peer's process is gone (its connection closed, the reconnection refused):
// on_peer_gone, the scheduler's fast path to a node loss.
//
// Data connections (zmq_transport_options::data_protection, docs/security.md): with a key pair
// and a protection, the DEALER to a peer carries only a handshake (a hello, answered through the
// ROUTER with a welcome: nonces, a token of this session, the port of the peer's data ROUTER);
// every message to that peer then goes, in order, over a second, plain DEALER to that data ROUTER,
// admitted by the token (ZeroMQ PLAIN, checked by the ZAP handler) and sealed part by part
// (transport/frame_seal.hpp) under a key derived from both CURVE key pairs and the nonces.
// Messages wait in the host's queue during the handshake. A CURVE connection that closes takes
// its data connection with it (the peer may have restarted); the next message shakes hands again.
//
// The decisions that need no socket are plain classes that unit tests drive (transport/): the
// peers and remembered clients (peer_table), each peer's connection state (connection_tracker),
// the receive counters (receive_counter). actors/zmq_transport_impl.hpp has the I/O class.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "actors/curve_keys.hpp"
#include "actors/transport.hpp"
#include "common/error.hpp"
#include "transport/connection_tracker.hpp"
#include "transport/frame_seal.hpp"
#include "transport/receive_counter.hpp"

namespace coach::actors {

/// Bytes libzmq (4.3, 64-bit) allocates with a received frame: a frame of n bytes arrives in one
/// malloc of n + this (its message content header, then the bytes). Memory warmed for frames to
/// come (common/huge_pages.hpp, warm_memory) is warmed in blocks of exactly that size: the
/// blocks ZeroMQ's next receives take, and the blocks its earlier receives of that size left.
inline constexpr std::size_t zmq_frame_overhead = 40;

/// The destination host of traffic to clients in traffic(): hosts that are no peer, answered
/// through the ROUTER (the `coach` CLI), all counted together under this id, not each under its
/// own (a CLI's host id is random per process: one link more per command, for good).
inline constexpr std::uint32_t clients_host = 0x80000000u;

/// Options of a zmq_transport.
struct zmq_transport_options {
  std::uint32_t host = 0;  ///< this node's host id (endpoint::host of its actors)
  std::string listen;      ///< "tcp://IP:PORT" to bind (port 0: any free port)
  /// ZeroMQ's I/O threads (they copy every byte to and from the kernel). Connections are spread
  /// over them: with one, a worker pushing to several shards had all of its traffic on one
  /// thread, the busiest of the whole round on 2 cores (ps_bench, 4 shards of 1 MiB: 0.52 -> 0.6
  /// of raw ZeroMQ with 2). ZeroMQ's guide: about one per GB/s.
  int io_threads = 2;
  /// Largest message (bytes on the wire) that an actor bound with bind_inline is run for on
  /// the I/O thread; larger ones are scheduled like any other.
  std::size_t inline_bytes = std::size_t(8) << 20;
  /// Messages queued per peer before sends wait (ZeroMQ's high-water mark).
  int send_hwm = 10000;
  /// How long a message to a peer that is down may wait for queue space (in this transport's
  /// queue for that host, retried every few milliseconds) before it is dropped and counted.
  std::chrono::milliseconds send_timeout{2000};
  std::chrono::milliseconds reconnect_interval{100};
  /// A connection whose handshake (ZMTP greeting and CURVE, keys checked) is not done within
  /// this long is closed, with whatever it sent (ZeroMQ's ZMQ_HANDSHAKE_IVL, 30 s by default):
  /// what a peer that holds no authorized key can make a node keep lasts this long at most.
  std::chrono::milliseconds handshake_interval{10000};
  /// The largest frame a peer may send (ZMQ_MAXMSGSIZE; 0: no limit): a larger one closes its
  /// connection before its bytes are held. It must take a job's largest frame: a whole model's
  /// values, or its optimizer state, in a resumed job's start (4 bytes a parameter).
  std::size_t max_frame = std::size_t(1) << 30;
  /// A client's routing id is forgotten after this long without a message to or from it.
  std::chrono::milliseconds client_idle{std::chrono::minutes(10)};
  /// Clients remembered at most; beyond this the least recently used one is forgotten.
  std::size_t max_clients = 4096;
  /// Keys (none: plain connections, accepted from loopback addresses only).
  transport_security security;
  /// How messages to peers travel (with a key pair only; without one, `none` is all there is):
  /// encrypt or authenticate: over a data connection of their own, admitted by a handshake on
  /// the CURVE connection, every part sealed (transport/frame_seal.hpp, docs/security.md "Data
  /// connections"); none: over the CURVE connection. The receiving side accepts every choice.
  /// Replies to clients (the CLI) always go over CURVE.
  coach::transport_logic::data_protection data_protection =
      coach::transport_logic::data_protection::none;
  /// Where the data connections' ROUTER binds ("tcp://IP:PORT"); empty: the listen address's
  /// IP and any free port (told to each peer in the handshake).
  std::string data_listen;
  /// Log why a peer refused this transport's connection, and that a peer's process is gone (a
  /// client reports what matters itself).
  bool log_refusals = true;
  /// Handshakes that fail without a reason (the peer closed during it: what a client without a
  /// key sees of a keyed node) before they count as a refusal. 2 for nodes, where one may be a
  /// dropped connection; 1 for a user's command, which reports at once and so never comes back
  /// for the node to count twice.
  int vague_failures_to_refuse = 2;
};

/// Counters of what arrived from other hosts, and their one-line text (to_string: coach-node
/// prints it on stderr, docs/hostile-input.md): transport/receive_counter.hpp.
using receive_stats = coach::transport_logic::receive_stats;
using coach::transport_logic::to_string;

class zmq_transport : public transport {
 public:
  /// Binds the listen address and starts the I/O thread. Errors: a malformed address or one
  /// that cannot be bound (in use, not local), naming the address.
  static result<std::shared_ptr<zmq_transport>> start(zmq_transport_options opt);

  /// Routes messages for endpoints on `host` to the node listening at `address` (through a
  /// DEALER), also when `host` was so far reached as a client. `public_key` (Z85): the peer's
  /// own, when known (heartbeats carry it); empty: the key already known for `host`, else the
  /// security's server key. A changed key or address replaces the connection (and what its queue
  /// held is lost): an empty key never counts as a change.
  virtual void add_peer(std::uint32_t host, std::string address, std::string public_key = {}) = 0;
  /// Names `host` after its node, and what traffic to it is shown under (peer_label):
  /// transport/peer_table.hpp, name and label.
  virtual void name_peer(std::uint32_t host, std::string name) = 0;
  virtual std::string peer_label(std::uint32_t host) const = 0;
  /// Connects to peer `host` now (otherwise its first message does), so that contact_of and
  /// refusal_of tell how it goes before anything is sent.
  virtual void connect(std::uint32_t host) = 0;
  /// This node's CURVE public key (Z85); empty without a key.
  virtual std::string public_key() const = 0;

  /// Called (on the transport's I/O thread: it must only post a message) when a peer's process
  /// is gone: this transport's connection to it closed and the next attempt to reconnect was
  /// refused, i.e. its host is up but nothing listens at its address. Once per closed
  /// connection. A host that vanishes (no FIN, no refusal) is not noticed here: only its silence
  /// tells. Only peers this transport has sent to have a connection to close.
  using peer_gone_handler = std::function<void(std::uint32_t host)>;
  virtual void on_peer_gone(peer_gone_handler handler) = 0;
  /// How the connection to peer `host` stands: connected (its handshake succeeded and it has
  /// not closed since), or an attempt to connect failed since (refused: nothing listens at its
  /// address, or it is unreachable) and ZeroMQ retries, or a connection was accepted but its
  /// handshake not answered within handshake_interval (a frozen or overloaded host, or not a
  /// Coach node) and ZeroMQ retries.
  /// (transport/connection_tracker.hpp follows it from the connection's monitor events.)
  using peer_contact = coach::transport_logic::peer_contact;
  /// Reads the connections' pending events first (from the calling thread).
  virtual peer_contact contact_of(std::uint32_t host) = 0;
  /// Why the last handshake with peer `host` failed ("not authorized: ..."), or empty when it
  /// succeeded or none was tried yet.
  virtual std::string refusal_of(std::uint32_t host) const = 0;
  /// This node's host id (zmq_transport_options::host).
  virtual std::uint32_t host_id() const = 0;
  /// The address actually bound ("tcp://127.0.0.1:40123" when asked for port 0).
  virtual std::string bound_address() const = 0;
  virtual receive_stats received() const = 0;
};

}  // namespace coach::actors
