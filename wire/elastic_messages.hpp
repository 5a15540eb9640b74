#pragma once
// wire/elastic_messages.hpp: the data-path messages of elastic jobs (docs/design.md "Elastic
// jobs", docs/wire.md), built from and read into the core's structs. Readers never trust their
// input: anything malformed is a protocol_error naming the kind and what is wrong.

#include <cstdint>
#include <vector>

#include "common/error.hpp"
#include "ps/job_config.hpp"
#include "wire/message.hpp"

namespace coach::wire {

/// Limits a reader enforces (a configuration names at most this many member ranks).
inline constexpr std::size_t max_members = 1u << 16;

/// master -> shard or worker: configuration `c` of job `job`.
wire_message make_configure(const endpoint& src, const endpoint& dst, std::uint64_t job,
                            const ps::job_config& c);
/// Reads a configure message of a job whose vector has `num_params` floats cut in slices of
/// `slice_size`.
result<ps::job_config> read_configure(const wire_message& m, std::size_t num_params,
                                      std::size_t slice_size);

/// What a source shard is told to hand over, and when.
struct migrate_order {
  std::int64_t at_version = 0;        ///< release once this many steps are applied
  std::uint32_t to = 0;               ///< destination shard id
  std::uint64_t config_version = 0;   ///< the configuration the move leads to
  std::vector<ps::key_range> ranges;  ///< ascending, disjoint
};
wire_message make_migrate(const endpoint& src, const endpoint& dst, std::uint64_t job,
                          const migrate_order& o);
result<migrate_order> read_migrate(const wire_message& m);

/// shard -> shard: the slices of `t`. The frames point into `t` (no copy); it lives as long as
/// the message.
wire_message make_transfer(const endpoint& src, const endpoint& dst, std::uint64_t job,
                           std::shared_ptr<const ps::slice_transfer> t);
/// Reads a transfer for a shard whose optimizer keeps `state_per_param` floats per key (the
/// values and state are copied out of the frames).
result<ps::slice_transfer> read_transfer(const wire_message& m, std::size_t state_per_param);
/// The same, taking the values without a copy where their frame is exclusive and held by `m`
/// alone (a transfer received from another process): the transfer's `buffer` is then the memory
/// the values arrived in, which an empty shard adopts as its storage. The optimizer state is
/// copied.
result<ps::slice_transfer> read_transfer(wire_message&& m, std::size_t state_per_param);

/// shard -> master: the answer to a snapshot_request with flag::with_state, `t` being the
/// shard's snapshot (ps::shard::snapshot): a message of kind `state` laid out as a transfer.
/// The frames point into `t` (no copy).
wire_message make_state(const endpoint& src, const endpoint& dst, std::uint64_t job,
                        std::shared_ptr<const ps::slice_transfer> t);
/// Reads a state message of a shard whose optimizer keeps `state_per_param` floats per key
/// (copied out of the frames). Errors: as read_transfer's.
result<ps::slice_transfer> read_state(const wire_message& m, std::size_t state_per_param);

/// destination shard -> master: the transfer from `from` to `to` at `version` is adopted.
struct transfer_ack {
  std::int64_t version = 0;
  std::uint32_t from = 0;
  std::uint32_t to = 0;
};
wire_message make_transfer_ack(const endpoint& src, const endpoint& dst, std::uint64_t job,
                               const transfer_ack& a);
result<transfer_ack> read_transfer_ack(const wire_message& m);

}  // namespace coach::wire
