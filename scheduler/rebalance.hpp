#pragma once
// scheduler::rebalancer: when resources free up, whether moving one shard of a running dltap
// job (a live migration, docs/design.md "Elastic changes") would raise its aggregation degree
// by enough to pay for the move.
//
// Traffic model (the one dltap places by, scheduler/placement.hpp): in a step every worker
// pulls from and pushes to shard k the bytes k owns, so shard k on node n sends and receives
//   2 × owned_bytes(k) × (workers not on n) × steps per second
// across hosts. Moving k from node f to node t saves 2 × owned_bytes(k) × (workers on t −
// workers on f) × steps/s for the rest of the run, and costs one transfer of k's state
// (values and optimizer state: owned_bytes(k) × state_factor) between f and t. A move is
// proposed only when the bytes it saves over the job's remaining seconds exceed `min_gain`
// times the bytes it moves, and at most once per job per `min_interval` (a move pauses the
// job's step by what is left of the transfer; migrations back and forth would cost more than
// they save). Among the moves that qualify: the one that saves the most bytes per second, then
// the lower shard id, then the node first in the pool.
//
// Plain logic with an injected clock: tests drive it with a manual_clock, the cluster
// scheduler with its own. Threads: none.

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/clock.hpp"
#include "scheduler/resource_pool.hpp"

namespace coach::scheduler {

/// A running job as the rebalancer sees it.
struct rebalance_job {
  std::uint64_t job = 0;
  std::vector<std::uint32_t> worker_nodes;  ///< node of each worker
  std::vector<std::uint32_t> shard_nodes;   ///< node of each shard, by shard id
  std::vector<double> shard_bytes;          ///< bytes of parameters each shard owns, by shard id
  double state_factor = 1;                  ///< state moved per parameter byte (Adam: 3)
  double steps_per_s = 0;                   ///< observed; 0: not known yet (no move)
  double seconds_left = 0;                  ///< estimated; 0: not known (no move)
  resources per_shard;                      ///< what one shard uses on its node
  /// Shards it must not move, by index of shard_nodes (a user's pin); empty: none.
  std::vector<bool> pinned;
};

/// One proposed migration.
struct shard_move {
  std::uint32_t shard = 0;
  std::uint32_t from = 0;
  std::uint32_t to = 0;
  double saved_bytes_per_s = 0;  ///< cross-host bytes per second the move saves
  double saved_bytes = 0;        ///< over the job's remaining seconds
  double moved_bytes = 0;        ///< the transfer
};

struct rebalance_options {
  seconds min_interval{60};  ///< between two moves of one job
  double min_gain = 2;       ///< saved bytes must exceed this × moved bytes
};

class rebalancer {
 public:
  /// REQUIRES: `clock` outlives the rebalancer.
  explicit rebalancer(const clock_source& clock, rebalance_options options = {})
      : clock_(clock), options_(options) {}

  /// The move of one of `job`'s shards to a node of `pool` with room for it (the pool holds
  /// what is free, the job's own parts already taken) that qualifies (see the file comment),
  /// or nullopt. Does not record it: call moved() once the move was asked for.
  std::optional<shard_move> propose(const rebalance_job& job, const resource_pool& pool) const;
  /// Starts `job`'s interval: no other move of it is proposed for min_interval.
  void moved(std::uint64_t job);
  /// Forgets a job that ended.
  void forget(std::uint64_t job) { last_move_.erase(job); }

  const rebalance_options& options() const noexcept { return options_; }

 private:
  const clock_source& clock_;
  rebalance_options options_;
  std::map<std::uint64_t, time_point> last_move_;
};

}  // namespace coach::scheduler
