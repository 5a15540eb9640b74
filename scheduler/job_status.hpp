#pragma once
// scheduler::job_status: what `coach status` shows of one job, kept by the job registry
// (scheduler/job_registry.hpp) and sent to the CLI as it is (actors/control.hpp, schemas/).

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "report/job_report.hpp"
#include "scheduler/cluster_view.hpp"

namespace coach::scheduler {

/// Messages and bytes one job (0: none, e.g. control messages) sent over one directed host pair.
struct link_traffic {
  std::uint64_t job = 0;
  std::uint32_t src_host = 0;
  std::uint32_t dst_host = 0;
  std::uint64_t messages = 0;
  std::uint64_t bytes = 0;
  friend bool operator==(const link_traffic&, const link_traffic&) = default;
};

/// One line of a job's history (`coach logs JOB`): what the scheduler said of it, in order.
struct job_event {
  std::uint64_t seq = 0;  ///< 1, 2, ... per job; a follower asks for those after the last it has
  double time = 0;        ///< wall seconds (Unix)
  std::string text;
  friend bool operator==(const job_event&, const job_event&) = default;
};

/// What `coach status` shows of one job.
struct job_status {
  std::uint64_t job = 0;
  std::string name;
  /// queued also while it starts (it is running once every part acknowledged its start).
  job_state state = job_state::queued;
  std::uint32_t epochs_done = 0;
  std::uint32_t epochs_total = 0;
  double test_accuracy = 0;  ///< after the last finished epoch; NaN before the first
  double samples_per_second = 0;
  double loss = 0;                  ///< mean training loss of the last progress report
  std::uint64_t samples_done = 0;   ///< in the current epoch
  std::uint64_t samples_epoch = 0;  ///< per epoch
  std::uint32_t workers = 0;
  std::uint32_t shards = 0;
  std::vector<std::string> worker_nodes;  ///< node name of each worker, by rank
  /// Node name of each shard owning slices (its primary), by shard id: one per shard.
  std::vector<std::string> shard_nodes;
  std::vector<std::uint32_t> shard_ids;  ///< the id of each shard of shard_nodes
  /// The user's orders in force, held until released ("shard 2 pinned to 'b' (coach
  /// migrate)", "workers 3 held (coach rescale)"): scheduler/user_orders.hpp.
  std::vector<std::string> orders;
  std::vector<link_traffic> traffic;  ///< this job's bytes between hosts
  /// The job ended and every node that ran a part of it has stopped them and reported its
  /// bytes since: `traffic` is the whole job's (a node lost before it answered never does).
  bool traffic_final = false;
  std::string error;                         ///< why it failed; empty otherwise
  std::uint16_t error_code = 0;              ///< coach::errc of the failure; 0 otherwise
  double seconds = 0;                        ///< since it started running
  std::vector<std::uint64_t> epoch_samples;  ///< samples trained in each finished epoch
  std::vector<double> epoch_seconds;         ///< each finished epoch's training time
  std::vector<double> epoch_accuracy;        ///< each finished epoch's test accuracy
  std::vector<change_report> changes;        ///< timed changes (once the job ended)
  /// The performance model's view of the job, one JSON object (docs/scheduler.md, "In the
  /// cluster scheduler"); empty when the scheduler sent none.
  std::string model_json;
  std::uint32_t resumes = 0;  ///< times the job restarted from its checkpoint
  /// Each recovery after a lost node (a restart from the checkpoint on the nodes left): the
  /// seconds of training it lost (from the checkpoint, or the run's start, to the loss).
  std::vector<double> recoveries_lost_s;
  /// Shards whose backup took over after their primary's node was lost (shard replicas).
  std::uint32_t failovers = 0;
  std::string placement;  ///< the placement that placed its parts; empty before it started
  /// The share of its worker-shard bytes that stay on one host (scheduler/placement.hpp); NaN
  /// when it runs no parts.
  double aggregation_degree = std::numeric_limits<double>::quiet_NaN();
  /// Changes of workers or shards in effect so far (their first step applied), as of the last
  /// progress report.
  std::uint32_t changes_done = 0;
  /// A queued or suspended job: why it does not start yet ("needs 4 CPUs (2 workers and 2
  /// shards at least), 2 free"); empty for the others.
  std::string waiting;
  /// Function mode: the workers' invocations so far, as of the last progress report.
  std::optional<worker::invocation_counts> invocations;
};

}  // namespace coach::scheduler
