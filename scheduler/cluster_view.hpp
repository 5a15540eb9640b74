#pragma once
// scheduler::cluster_view and job_view: what a scheduling policy sees of the cluster and its jobs.
// Plain values, independent of CAF and of the wire, so that the cluster scheduler (actors/) and
// the simulator (sim/sim) hand the very same inputs to the very same policy code.

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/clock.hpp"

namespace coach::scheduler {

/// An amount of what a node has and what a part of a job (a worker, a shard) uses.
struct resources {
  int gpus = 0;
  double cpus = 0;
  std::uint64_t memory = 0;  ///< bytes
  friend bool operator==(const resources&, const resources&) = default;
};

/// One node: what it has and what is free now (measured: other processes count).
struct node_view {
  std::uint32_t id = 0;  ///< the host id; unique within a cluster_view
  resources total;
  /// <= total in every component, >= 0 but for CPUs: CPUs below 0 are over-committed (programs
  /// that are not Coach's took CPUs its jobs hold); nothing fits there until parts leave.
  resources free;
};

/// Every live node that may take work (dead and draining nodes are left out by the caller).
struct cluster_view {
  std::vector<node_view> nodes;

  int total_gpus() const noexcept;
  int free_gpus() const noexcept;
};

/// Where a job is in its life. Policies see queued, running and suspended jobs only.
enum class job_state : std::uint8_t {
  queued,     ///< submitted, never started
  running,    ///< holds workers and shards
  suspended,  ///< was running; stopped by a policy with its progress kept (the shards' state)
  succeeded,
  failed,
  cancelled,
};

/// "queued", "running", "suspended", "succeeded", "failed", "cancelled".
std::string_view to_string(job_state s) noexcept;
/// The inverse of to_string; nullopt for any other text.
std::optional<job_state> parse_job_state(std::string_view text) noexcept;

/// One job as a policy sees it. A view: `model`, `worker_nodes` and `shard_nodes` point into the
/// caller's storage, which must outlive the decide() call that receives the view.
struct job_view {
  std::uint64_t id = 0;  ///< unique among the jobs of one decide() call
  job_state state = job_state::queued;
  time_point submitted{};    ///< when the job was submitted
  time_point state_since{};  ///< when it entered `state` (a suspended job: when it was stopped)
  std::string_view model;    ///< the model's name: jobs of one model share a performance curve
  /// false: the job runs only with requested_workers and requested_shards, never resized.
  bool elastic = true;
  int min_workers = 1;  ///< 1 <= min_workers <= requested_workers <= max_workers
  int max_workers = 1;
  int requested_workers = 1;  ///< what the user asked for
  int min_shards = 1;         ///< 1 <= min_shards <= requested_shards <= max_shards
  int max_shards = 1;
  int requested_shards = 1;
  resources per_worker;  ///< what one worker uses, all on one node
  resources per_shard;   ///< what one parameter-server shard uses, all on one node
  int workers = 0;       ///< current allocation; 0 unless running
  int shards = 0;
  /// The node of each worker, by rank (size == workers). A resize to fewer workers removes the
  /// highest ranks; one to more appends ranks.
  std::span<const std::uint32_t> worker_nodes;
  /// The node of each shard, by shard id (size == shards); shrinking removes the highest ids.
  std::span<const std::uint32_t> shard_nodes;
  double epochs_total = 0;  ///< the job's whole work in epochs; 0 if unknown
  double epochs_done = 0;   ///< progress, in epochs (fractional), <= epochs_total

  bool waiting() const noexcept {
    return state == job_state::queued || state == job_state::suspended;
  }
};

}  // namespace coach::scheduler
