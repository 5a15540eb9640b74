#pragma once
// scheduler::registered_job: one job as the cluster scheduler's registry keeps it: its record,
// its status, its current run (allocation, hosts, shard replicas), its checkpoint and the
// stops of its earlier runs. Its state is the registry's to change (job_registry's calls say
// what happened: begin_run, progress, epoch, checkpoint, lose_node...); everyone else reads it
// through the const accessors.
//
// A job's life (job_state): queued → running → succeeded | failed | cancelled, and
// running → suspended → running when a policy stops it with its checkpoint kept. A running job
// is launched (a run exists) and may still be starting: its status says queued until every
// node acknowledged its parts (job_registry::started).
//
// Threads: one owner (the scheduler actor).

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ps/training_state.hpp"
#include "report/job_report.hpp"
#include "report/perf_tracker.hpp"
#include "scheduler/allocation.hpp"
#include "scheduler/change_causes.hpp"
#include "scheduler/checkpoint_keeper.hpp"
#include "scheduler/job_log.hpp"
#include "scheduler/job_status.hpp"
#include "scheduler/job_store.hpp"
#include "scheduler/replica_chains.hpp"
#include "scheduler/stop_tracker.hpp"
#include "scheduler/user_orders.hpp"
#include "spec/job_spec.hpp"

namespace coach::scheduler {

class job_registry;

/// A run's shape, for the rebalancer (job_registry::shaped, once its model is built).
struct run_shape {
  double model_bytes = 0;   ///< parameter bytes
  double state_factor = 1;  ///< optimizer state per parameter byte moved with a shard
  double batch_size = 0;    ///< samples per worker and step
  double global_batch = 0;  ///< samples per step when fixed (job_spec::global_batch); else 0
};

class registered_job {
 public:
  std::uint64_t id() const noexcept { return status_.job; }
  const job_record& rec() const noexcept { return rec_; }        ///< as stored: spec, ranges, model
  const job_status& status() const noexcept { return status_; }  ///< what coach status shows
  /// The spec's placement; empty: the scheduler's.
  const std::string& placement() const noexcept { return placement_; }
  /// The policy's state: queued (never ran), running (launched: starting or running),
  /// suspended (stopped with its checkpoint kept), or an end state.
  job_state state() const noexcept { return state_; }
  double state_since() const noexcept { return state_since_; }

  // The current run.
  bool launched() const noexcept { return launched_; }
  /// +1 per launch and stop: reports of another run are stale.
  std::uint32_t generation() const noexcept { return generation_; }
  bool cancel_requested() const noexcept { return cancel_requested_; }
  double started_at() const noexcept { return started_; }      ///< when it (re)started running
  const allocation& alloc() const noexcept { return alloc_; }  ///< its parts now
  /// Every host of the run, the master's included, not lost.
  const std::set<std::uint32_t>& hosts() const noexcept { return hosts_; }
  const std::set<std::uint32_t>& shard_hosts() const noexcept { return shard_hosts_; }
  /// Its shards' replicas (the spec's `replicas`) as the run placed them.
  const replica_chains& replicas() const noexcept { return replicas_; }
  const std::vector<std::vector<std::uint32_t>>& backups() const noexcept {
    return replicas_.backups();
  }
  const run_shape& shape() const noexcept { return shape_; }
  /// What the user ordered that holds until released: pinned shards, held counts.
  const user_orders& orders() const noexcept { return orders_; }

  /// Resume: the next run starts at first_epoch from checkpoint() (the training state after the
  /// epoch before), once every node that ran a part of an earlier run has stopped it.
  std::uint32_t first_epoch() const noexcept { return first_epoch_; }
  const std::shared_ptr<const ps::training_state>& checkpoint() const noexcept {
    return checkpoints_.state();
  }
  const checkpoint_keeper& checkpoints() const noexcept { return checkpoints_; }
  /// The unanswered stops of its earlier runs.
  const stop_tracker& stops() const noexcept { return stops_; }

  /// The performance model's record of this job (coach status --json "model"); from its first
  /// epoch on.
  const std::optional<perf_tracker>& perf() const noexcept { return perf_; }
  /// Its history for `coach logs` (job_registry::note, note_epoch).
  const job_log& log() const noexcept { return log_; }
  /// Its finished epochs' figures in order (the dashboard's curves), this run and the ones
  /// before it since the scheduler started.
  const std::vector<epoch_report>& curve() const noexcept { return curve_; }

  bool over() const noexcept {
    return state_ == job_state::succeeded || state_ == job_state::failed ||
           state_ == job_state::cancelled;
  }
  bool waiting() const noexcept {
    return !over() && !launched_ && (state_ == job_state::queued || state_ == job_state::suspended);
  }
  /// Waiting, and nothing of an earlier run is left anywhere.
  bool may_start() const noexcept { return waiting() && stops_.empty() && !cancel_requested_; }
  /// Launched and every part acknowledged its start.
  bool running() const noexcept {
    return launched_ && !over() && status_.state == job_state::running;
  }

 private:
  friend class job_registry;

  job_record rec_;
  job_status status_;
  std::string placement_;
  job_state state_ = job_state::queued;
  double state_since_ = 0;

  bool launched_ = false;
  std::uint32_t generation_ = 0;
  bool cancel_requested_ = false;
  double started_ = 0;
  allocation alloc_;
  std::set<std::uint32_t> hosts_;
  std::set<std::uint32_t> shard_hosts_;  ///< hosts that ran a shard of the run
  replica_chains replicas_;
  run_shape shape_;
  user_orders orders_;
  change_causes causes_;
  /// The run's workers and shards owning slices as of its last change in effect (launch:
  /// every rank and shard id).
  std::vector<std::uint32_t> last_members_, last_live_;
  /// Its spec's `schedule:` of changes, in order (each run from step 0 expects them).
  std::vector<schedule_action> schedule_;

  std::uint32_t first_epoch_ = 0;
  checkpoint_keeper checkpoints_;
  stop_tracker stops_;

  std::optional<perf_tracker> perf_;
  job_log log_;
  std::vector<epoch_report> curve_;
};

}  // namespace coach::scheduler
