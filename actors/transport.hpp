#pragma once
// actors::transport: the seam that moves wire_messages between actors. Implementations:
// in-process delivery (here; zero copy, used by the embedded cluster and co-located actors) and
// the ZeroMQ bridge between hosts (issue 3). Every implementation counts messages and bytes per
// (source host, destination host) and per message kind, so cross-host traffic is measured.
//
// Threads: send() is called concurrently by many actors (CAF scheduler threads and detached
// worker threads); bind()/unbind() by the actors that start and stop others. Implementations
// guard their routing table and counters themselves (documented in each).

#include <caf/actor.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "actors/messages.hpp"
#include "scheduler/job_status.hpp"

namespace coach::actors {

/// Messages and bytes one job sent over one directed host pair (scheduler/job_status.hpp).
using link_traffic = scheduler::link_traffic;

/// Counters of a transport since it started.
struct traffic_stats {
  std::vector<link_traffic> links;  ///< by (job, src host, dst host), ascending
  std::array<std::uint64_t, msg_kind_count> kind_messages{};  ///< by msg_kind
  std::array<std::uint64_t, msg_kind_count> kind_bytes{};
  std::uint64_t dropped = 0;  ///< messages to an unknown endpoint
  std::uint64_t total_bytes() const noexcept;
  std::uint64_t cross_host_bytes() const noexcept;
};

class transport {
 public:
  virtual ~transport() = default;
  virtual std::string_view name() const noexcept = 0;
  /// Routes messages for `ep` to `handle` from now on.
  virtual void bind(const endpoint& ep, caf::actor handle) = 0;
  /// The same, and allows the transport to run `handle` on the thread that delivers a message
  /// to it, when the actor is idle, instead of waking a scheduler thread: for actors whose
  /// handlers are short and on the critical path of every step (parameter-server shards). One
  /// hand-off fewer per message; the delivering thread is busy meanwhile. Delivering threads:
  /// a transport's receiving thread (messages from other hosts), and a sender inside an
  /// inline_scope (messages within the process; actors/inline_delivery.hpp).
  virtual void bind_inline(const endpoint& ep, caf::actor handle) { bind(ep, std::move(handle)); }
  /// Stops routing to `ep`; later messages to it are dropped and counted.
  virtual void unbind(const endpoint& ep) = 0;
  /// The same if `ep` still routes to the actor `who` (a later binding of `ep` stays).
  virtual void unbind_if(const endpoint& ep, const caf::actor_addr& who) = 0;
  /// Delivers msg to msg.hdr.dst. Returns false (and counts a drop) when the destination is
  /// unknown; never blocks on the receiver.
  virtual bool send(wire_message msg) = 0;
  virtual traffic_stats traffic() const = 0;
};

/// In-process delivery: a CAF message carrying the frames' shared pointers (no copy).
std::shared_ptr<transport> make_inproc_transport();

/// Binds `ep` to `handle` (inline: transport::bind_inline) until the actor ends, however it
/// ends: a route must not keep an ended actor alive (a detached actor's thread waits for its
/// last reference, and the actor system's shutdown for that thread) nor take messages for it.
void bind_while_alive(const std::shared_ptr<transport>& net, const endpoint& ep,
                      const caf::actor& handle, bool run_inline = false);

}  // namespace coach::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(coach::actors::traffic_stats)
