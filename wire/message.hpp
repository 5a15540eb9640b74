#pragma once
// wire/message.hpp: the messages of the data path (worker <-> shard <-> job master) as the
// core's own structs. Metadata (envelope) and payload (frames) are apart, as on the wire: the
// in-process transport moves frames by shared pointer (zero copy); the ZeroMQ bridge (issue 3)
// encodes the envelope with Cap'n Proto and sends each frame as its own ZeroMQ frame.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "ps/key_coverage.hpp"
#include "ps/shard_map.hpp"

namespace coach::wire {

/// Kinds of data-path messages. Numbers are stable (they go on the wire): never renumber.
enum class msg_kind : std::uint16_t {
  chunk_request = 1,  ///< worker -> master: step, rank
  /// master -> worker: step, epoch, chunk; frame 0 = sample indices (u32); averaging: the
  /// indices of up to K chunks, and frame 1 = each chunk's size (u32)
  chunk_grant = 2,
  pull = 3,              ///< worker -> shard: step = parameter version wanted
  push = 4,              ///< worker -> shard: step, rank, samples, loss; a frame per range
  params = 5,            ///< shard -> worker or master: step = version, ranges; a frame per range
  snapshot_request = 6,  ///< master -> shard: step = version wanted (for evaluation)
  step_report = 7,       ///< worker -> master: step, rank, samples, loss, chunk, compute_us
  control = 8,  ///< any process -> any: frame 0 = a Cap'n Proto ControlMessage (actors/control.hpp)
  // Elastic jobs (docs/design.md "Elastic jobs"; wire/elastic_messages.hpp builds and reads
  // them).
  configure = 9,      ///< master -> shard, worker: a job configuration
  migrate = 10,       ///< master -> source shard: hand keys over at a step boundary
  transfer = 11,      ///< shard -> shard: keys' values and optimizer state
  transfer_ack = 12,  ///< destination shard -> master: a transfer is adopted
  moved = 13,         ///< shard -> requester: keys asked for that it no longer owns (ranges)
  /// shard -> master: the answer to a snapshot_request with flag::with_state: the values,
  /// optimizer state and counters of every key the shard owns, laid out as a transfer
  /// (wire/elastic_messages.hpp, make_state)
  state = 14,
  // Shard replicas (docs/design.md "Shard replicas").
  /// backup shard -> the replica before it in its shard's chain: every step before version
  /// `step` is applied here (and, in a longer chain, at every replica after this one)
  replica_ack = 15,
  /// master -> a backup shard and every worker of the job: shard `rank`'s primary is now the
  /// endpoint (host `epoch`, id `chunk_id`): the backup serves from now on, the workers send
  /// it again what the lost primary left unanswered (flag::resent)
  take_over = 16,
  /// master -> a replica: the replicas after it in its chain are gone; it holds its steps alone
  replica_lost = 17,
  // Sparse tables (docs/design.md "Sparse tables"; wire/row_frames.hpp builds and reads them).
  /// worker -> shard: step = version wanted; frames: the parts' tables (u32), then each part's
  /// row ids (u64)
  rows_pull = 18,
  /// shard -> worker: the answer to a rows_pull at version `step`; frames: tables (u32), then
  /// each part's row ids (u64) and values (f32, ids x dim); ranges: the keys of rows asked for
  /// that the shard no longer owns, map_version the configuration that moved them
  rows = 19,
};
/// One more than the highest msg_kind (arrays indexed by kind number leave index 0 unused).
inline constexpr std::size_t msg_kind_count = 20;
std::string_view to_string(msg_kind k) noexcept;

/// Where an actor lives: a host number and an id unique on the cluster.
struct endpoint {
  std::uint32_t host = 0;
  std::uint64_t id = 0;
  friend bool operator==(const endpoint&, const endpoint&) = default;
};

/// Bits of envelope::flags.
namespace flag {
inline constexpr std::uint8_t no_chunk = 1;  ///< chunk_grant: no data for this rank this step
inline constexpr std::uint8_t finished = 2;  ///< chunk_grant: training is over, stop
/// snapshot_request: answer with the optimizer state too (a `state` message: a checkpoint);
/// chunk_grant and push, with `snapshot`: the snapshot wanted is a checkpoint's
inline constexpr std::uint8_t with_state = 4;
/// chunk_grant, push: the master wants a snapshot of the version before this step. The request
/// rides on the step's grants and pushes as well as in its own message to each shard: the
/// pushes are what take a shard past the version, so none of them can overtake it (a
/// snapshot_request on a slower link could, and the version was gone).
inline constexpr std::uint8_t snapshot = 8;
/// push, configure, migrate, transfer: a primary shard's copy of a message it received, sent
/// on to its backup (the sender and the rest of the header are the original's)
inline constexpr std::uint8_t replica = 16;
/// push, pull: sent again to a shard's new primary after a take_over (it may hold it already)
inline constexpr std::uint8_t resent = 32;
/// configure: more configurations of the same re-issue (workers died) follow for this receiver.
/// A worker acts on none of them before the last, the one without it: a re-issue rewrites the
/// configurations of several first steps, and one of them alone would give a later step an
/// earlier step's shard map.
inline constexpr std::uint8_t more_configs = 64;
}  // namespace flag

/// The metadata of a message: small, fixed, encoded as the header frame on the wire.
struct envelope {
  endpoint src;
  endpoint dst;
  msg_kind kind = msg_kind::pull;
  std::uint64_t job = 0;
  std::uint64_t map_version = 0;
  std::int64_t step = 0;
  std::uint32_t rank = 0;
  std::uint32_t epoch = 0;
  std::uint64_t samples = 0;
  double loss = 0;
  std::uint64_t chunk_id = 0;
  std::uint64_t compute_us = 0;
  std::uint8_t flags = 0;
  std::vector<ps::key_range> ranges;
  std::vector<double> grad_stats;  ///< lr_scaling adascale (schemas/envelope.capnp gradStats)
};

/// A payload frame: bytes owned by `owner` (kept alive while any message refers to them).
struct frame {
  std::shared_ptr<const void> owner;
  const std::byte* data = nullptr;
  std::size_t bytes = 0;
  /// The bytes are this frame's alone (a frame received from another process, in memory the
  /// transport allocated for it): while `owner` is held nowhere else, a receiver may keep them
  /// as its own storage and write them (wire/elastic_messages.hpp, read_transfer).
  bool exclusive = false;

  template <class T>
  static frame of(std::shared_ptr<const void> owner, const T* p, std::size_t count) {
    return frame{std::move(owner), reinterpret_cast<const std::byte*>(p), count * sizeof(T)};
  }
  template <class T>
  std::span<const T> as() const {
    return {reinterpret_cast<const T*>(data), bytes / sizeof(T)};
  }
};

/// A whole message: envelope plus payload frames.
struct wire_message {
  envelope hdr;
  std::vector<frame> frames;
  /// Not on the wire: held by the transport until the message has left this process (its
  /// bytes handed to the network, or delivered to an actor of this process) or was dropped. A
  /// sender that shares one token among messages learns, from its last owner going, that all
  /// of them are out.
  std::shared_ptr<const void> sent;
  std::size_t payload_bytes() const noexcept;
  /// Bytes this message would occupy on the wire: frames plus a header estimate.
  std::size_t wire_bytes() const noexcept;
};

/// `m` addressed to `dst`, with `flags` added: the same header and the same payload frames
/// (shared, not copied). A replica's copy of a message, a push sent again to a new primary.
wire_message copy_to(const wire_message& m, const endpoint& dst, std::uint8_t flags);
/// Checks a params message as a whole before any of it is used (one frame of floats per range,
/// every key in range and not received before) and adds its keys to `received`. Errors:
/// protocol_error naming what disagrees; `received` is unchanged then.
result<void> accept_params(const wire_message& m, ps::key_coverage& received);
}  // namespace coach::wire
