#pragma once
// scheduler/cluster_messages.hpp: what the cluster scheduler hears and answers as plain structs:
// a node's heartbeat, a node's answer to a start or a stop, and the job API (one request from
// the CLI, one reply). scheduler::cluster_core takes them as calls; actors/control.hpp names
// them in coach::actors, where the control codec carries them as Cap'n Proto (docs/wire.md).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/error.hpp"
#include "host/host_probe.hpp"
#include "report/job_report.hpp"
#include "scheduler/job_status.hpp"
#include "worker/script_job.hpp"

namespace coach::scheduler {

/// A node agent's periodic report of itself.
struct node_heartbeat {
  std::string name;        ///< coach-node --name
  std::string address;     ///< its data-path socket, "tcp://IP:PORT"
  std::string public_key;  ///< its CURVE public key (Z85); empty: it has none
  std::uint32_t host = 0;
  host_resources resources;          ///< measured, as --cpus/--gpus set them
  std::uint32_t actors_running = 0;  ///< shards and workers this node runs
  std::uint64_t sequence = 0;        ///< +1 per heartbeat of one node process
  std::int64_t unix_time_ms = 0;
  bool draining = false;  ///< SIGTERM received: takes no new work, leaves when its work ends
  std::vector<link_traffic> traffic;  ///< cumulative, what this node's transport sent
};

/// Job `job`'s bytes between nodes, from each node's latest heartbeat in `heartbeats` (by host):
/// the links its transport counted for the job whose both ends are nodes there (a part to a
/// part, a part to the job's master, on one host or two). Links to anything else are left out:
/// the answers a scheduler sends to `coach` clients carry the job's id too, but they are not
/// the job's traffic (a job still queued has none).
std::vector<link_traffic> job_traffic(std::uint64_t job,
                                      const std::map<std::uint32_t, node_heartbeat>& heartbeats);

/// Node -> scheduler: the answer to a start_job or stop_job.
struct command_reply {
  std::uint64_t job = 0;
  std::optional<coach::error> failure;  ///< empty: done
  bool stopped = false;                 ///< answers a stop_job
};

/// What `coach nodes` shows of one node.
struct node_status {
  node_heartbeat last;       ///< its latest heartbeat, cpus_free the scheduler's (free_cpus_shown)
  double seconds_since = 0;  ///< since that heartbeat arrived
  bool alive = true;         ///< false once heartbeats stopped (the node is listed as dead)
};

// The job API: one request from the CLI, one reply from the scheduler.
struct submit_request {
  std::string spec_yaml;
  std::string source_name;
  std::string base_dir;
  std::uint32_t workers = 0;  ///< 0: as the spec says
  std::uint32_t shards = 0;
  /// Random per submit (0: none): a request sent again with the same token is answered with the
  /// job the first one stored, never a second job (safe retries across a scheduler restart).
  std::uint64_t token = 0;
  /// A script's model (model: {script: ...}): its layout, initial values and files, registered
  /// by the submitter (worker/script_job.hpp); null for other models.
  std::shared_ptr<const worker::script_payload> script;
};
struct status_request {
  std::uint64_t job = 0;  ///< 0: every job
};
struct nodes_request {};
struct cancel_request {
  std::uint64_t job = 0;
};
/// coach rescale JOB --workers N [--shards M] (0: unchanged), or coach rescale JOB --release.
struct rescale_request {
  std::uint64_t job = 0;
  std::uint32_t workers = 0;
  std::uint32_t shards = 0;
  bool release = false;  ///< the counts held by an earlier rescale are released (no counts)
};
/// coach migrate JOB --shard K --to NODE, or coach migrate JOB --shard K --release.
struct migrate_request {
  std::uint64_t job = 0;
  std::uint32_t shard = 0;
  std::string to_node;
  bool release = false;  ///< shard K, pinned by an earlier migrate, is unpinned (no node)
};
/// coach policy get | coach policy set NAME.
struct policy_request {
  std::optional<std::string> set;  ///< empty: get
};
/// coach logs JOB [-f]: the job's history after event `after` (0: all kept).
struct logs_request {
  std::uint64_t job = 0;
  std::uint64_t after = 0;
};
/// Drop an ended job from the scheduler's list and store (coach experiment's jobs, once done).
struct forget_request {
  std::uint64_t job = 0;
};
using api_request =
    std::variant<submit_request, status_request, nodes_request, cancel_request, rescale_request,
                 migrate_request, policy_request, logs_request, forget_request>;

struct submit_reply {
  std::uint64_t job = 0;
};
struct status_reply {
  std::vector<job_status> jobs;
};
struct nodes_reply {
  std::vector<node_status> nodes;
};
struct ack_reply {};
struct policy_reply {
  std::string active;  ///< the policy in force after the request
};
struct logs_reply {
  std::vector<job_event> events;  ///< oldest first
  bool over = false;              ///< the job ended: nothing more will come
};
/// A reply is either what was asked for or the error that prevented it.
struct api_reply {
  std::optional<coach::error> failure;
  std::variant<ack_reply, submit_reply, status_reply, nodes_reply, policy_reply, logs_reply> body;
};

}  // namespace coach::scheduler
