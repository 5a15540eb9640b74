#pragma once
// actors/control.hpp: the control plane between processes, as the core's own structs. Node
// agents heartbeat the scheduler; the scheduler tells nodes to start or stop their part of a
// job; the `coach` CLI asks the scheduler (job API). Each travels as one wire_message of kind
// msg_kind::control whose single payload frame is a Cap'n Proto ControlMessage
// (schemas/control.capnp); actors::control_codec converts. docs/wire.md describes them.

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "actors/messages.hpp"
#include "actors/transport.hpp"
#include "common/error.hpp"
#include "host/host_probe.hpp"
#include "ps/job_config.hpp"
#include "ps/training_state.hpp"
#include "report/job_report.hpp"
#include "scheduler/cluster_messages.hpp"
#include "scheduler/cluster_view.hpp"
#include "scheduler/job_status.hpp"
#include "worker/script_job.hpp"

namespace coach::actors {

/// Bytes one job sent from one host to another (transport.hpp).
using job_link_traffic = link_traffic;

// A node's heartbeat, its answer to a command, and the job API (scheduler/cluster_messages.hpp).
using scheduler::ack_reply;
using scheduler::api_reply;
using scheduler::api_request;
using scheduler::cancel_request;
using scheduler::command_reply;
using scheduler::forget_request;
using scheduler::logs_reply;
using scheduler::logs_request;
using scheduler::migrate_request;
using scheduler::node_heartbeat;
using scheduler::node_status;
using scheduler::nodes_reply;
using scheduler::nodes_request;
using scheduler::policy_reply;
using scheduler::policy_request;
using scheduler::rescale_request;
using scheduler::status_reply;
using scheduler::status_request;
using scheduler::submit_reply;
using scheduler::submit_request;

/// A shard or worker added to a running job (docs/design.md "Elastic jobs"), with the
/// configuration it starts under.
struct added_part {
  bool worker = false;                 ///< a worker (else a shard)
  std::uint32_t id = 0;                ///< its rank or shard id
  std::int64_t first_step = 0;         ///< a worker's first step
  std::uint64_t version = 0;           ///< the configuration: version, first step, members and the
  std::int64_t from_step = 0;          ///< owner of each slice (the map itself is rebuilt by the
  std::vector<std::uint32_t> members;  ///< receiver, which knows the job's size)
  std::vector<std::uint32_t> slice_owners;
  /// A shard: the keys it will adopt soon (a migration prepared ahead); its node warms the
  /// memory for them before it answers (common/huge_pages.hpp, warm_memory). 0: none.
  std::uint64_t expect_keys = 0;
  friend bool operator==(const added_part&, const added_part&) = default;
};

/// Where a part added while the job runs is.
struct part_host {
  std::uint32_t id = 0;  ///< shard id or worker rank
  std::uint32_t host = 0;
  /// An added shard of a job with replicas: the hosts of its backups, in chain order.
  std::vector<std::uint32_t> backups;
  friend bool operator==(const part_host&, const part_host&) = default;
};

/// Scheduler -> node: run your part of a job. Every node of the job gets the same description;
/// a node runs the shards (workers_phase false) or the worker ranks (workers_phase true) placed on
/// its host. The scheduler starts every shard before any worker, so a worker's first pull finds
/// its shards. A running job that grows sends it again with `start` set: the node that the added
/// lists place that part on starts it, and every node of the job learns where it runs before
/// the job master uses it.
struct start_job {
  std::uint64_t job = 0;
  bool workers_phase = false;
  std::string spec_yaml;    ///< the job spec as submitted
  std::string source_name;  ///< for error messages
  std::string base_dir;     ///< the spec file's folder (its relative paths resolve there)
  std::uint32_t master_host = 0;
  std::vector<std::uint32_t> shard_hosts;   ///< by shard id
  std::vector<std::uint32_t> worker_hosts;  ///< by rank
  /// Shard replicas: by shard id, the hosts of its backups in chain order; empty: none.
  std::vector<std::vector<std::uint32_t>> backup_hosts;
  struct peer {
    std::uint32_t host = 0;
    std::string address;
    std::string public_key;  ///< Z85; empty: unknown (the receiver's server key is used)
    std::string name;        ///< its node name (metrics label peers by it); empty: unknown
    friend bool operator==(const peer&, const peer&) = default;
  };
  std::vector<peer> peers;               ///< address of every host of the job
  std::vector<part_host> added_shards;   ///< shards added while the job runs
  std::vector<part_host> added_workers;  ///< workers added while the job runs
  std::optional<added_part> start;       ///< the part to start (a running job grows)
  /// The step the job starts at (both phases): its checkpoint's version; 0 for a new job.
  std::int64_t first_step = 0;
  /// The training state to start the job's shards from (a job resumed from a checkpoint),
  /// instead of the model's seeded initialization; its version is first_step. The counters
  /// are fields of the Cap'n Proto message; the values and the optimizer state travel as
  /// payload frames of raw f32 after it (docs/wire.md), only with the shards phase.
  std::shared_ptr<const ps::training_state> initial;
  /// The counters of `initial` as the Cap'n Proto message carries them (read_control puts them
  /// into `initial` with its frames; sending, `initial`'s own are used).
  std::int64_t initial_updates = 0;
  std::uint64_t initial_samples_applied = 0;
  /// The job's run (the scheduler's generation of it) this start belongs to: a node holding
  /// parts of another run (it was taken for dead and they went on) stops them first.
  std::uint32_t run = 0;
  /// A script's model: its entry, layout and files (the bundle: the message's last payload
  /// frame), without initial values (the shards get them as `initial`); null for other models.
  /// A node makes its copy of the files from the first it gets for the job.
  std::shared_ptr<const worker::script_payload> script;
};

/// Scheduler -> node: stop every actor of the job (it ended, failed or was cancelled).
struct stop_job {
  std::uint64_t job = 0;
};

/// Scheduler -> node: its join is refused (its --name is taken by another live node): it says
/// why and exits.
struct node_refused {
  std::string reason;
};

/// One enum for a job's life across the project (scheduler/cluster_view.hpp).
using job_state = scheduler::job_state;

/// What `coach status` shows of one job (scheduler/job_status.hpp).
using job_status = scheduler::job_status;

/// Everything that travels as msg_kind::control.
using control_message = std::variant<node_heartbeat, start_job, stop_job, command_reply,
                                     api_request, api_reply, node_refused>;

/// Well-known endpoint ids (endpoint::id) of a node's control actors.
inline constexpr std::uint64_t node_agent_id = 1;
inline constexpr std::uint64_t scheduler_id = 2;

/// Host id of the node listening at `address`: a hash, stable across restarts, bit 31 clear.
/// Clients of the job API use ids with bit 31 set (client_host_id).
std::uint32_t node_host_id(std::string_view address) noexcept;
/// A random host id with bit 31 set, for a CLI process.
std::uint32_t client_host_id() noexcept;

// Limits (docs/wire.md, "Control plane"): encode cuts short texts (names, addresses, paths,
// error messages) to 4096 bytes and leaves negative GPU ids out; it never cuts a spec, and decode
// refuses a spec over 1 MiB, so a sender checks the size of a user's spec before sending it.
// decode also refuses payloads over 16 MiB, lists of more than 4096 nodes, jobs, peers or hosts,
// 65536 traffic entries or 1024 GPU ids, unknown enum values and error codes, and a union left
// unset. A job status's model JSON may hold up to 1 MiB.
namespace control_codec {
/// Encodes `m` as the payload of a control message (a Cap'n Proto ControlMessage).
std::vector<std::byte> encode(const control_message& m);
/// Decodes a payload. Never trusts its input: any bytes give a value or protocol_error.
result<control_message> decode(std::span<const std::byte> bytes);
}  // namespace control_codec

/// Builds the wire_message carrying `m` from `src` to `dst`.
wire_message make_control(const endpoint& src, const endpoint& dst, const control_message& m);
/// The control message `m` carries; nothing for a message of another kind, or (logged on stderr
/// as dropped, naming the sender's host) for one that does not decode. More payload frames are
/// accepted only on a startJob (its initial state, up to three frames of whole f32s, then its
/// script's bundle when it has a script) and on a submit with a script (its initial values,
/// whole f32s, then its bundle, at most worker::max_packed_bundle_bytes); any other extra
/// frame, or one missing, drops the message. A bundle's contents are its receiver's to check
/// (worker::unpack_bundle).
std::optional<control_message> read_control(const wire_message& m);

}  // namespace coach::actors
