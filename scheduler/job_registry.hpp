#pragma once
// scheduler::job_registry: the cluster scheduler's jobs and their life, as plain logic. It keeps
// every job (its record, its status, where its parts run), takes jobs in (admission), turns a
// policy's decision into orders through the executor, follows each run (launch, parts added,
// changes that took effect, epochs, checkpoints, lost nodes) and writes every state,
// allocation, epoch and checkpoint to the job store, so that a restarted scheduler resumes
// every job it knew. actors/cluster_scheduler translates messages into these calls and carries
// out the orders (starting masters, telling nodes); unit tests drive it with a manual clock and
// an in-memory store (tests/unit/scheduler/job_registry_test.cpp). docs/scheduler.md, "In the
// cluster scheduler", describes the life of a job.
//
// A job's life: registered_job.hpp. A node's free resources are what its heartbeats say
// (node_table) less what this registry gave out (reserved()).
//
// Its parts, each in its own file: the jobs, loading and the store (job_registry.cpp);
// admission and why a job waits (admission.cpp); a policy's decisions carried out
// (job_registry_decide.cpp); a run followed (job_registry_run.cpp); lost nodes, failover and
// stops (job_registry_nodes.cpp, replicas in replica_chains.cpp, stops in stop_tracker.cpp);
// checkpoints (checkpoint_keeper.cpp); what coach status shows (job_registry_views.cpp).
//
// Threads: one owner (the scheduler actor).

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/log_limiter.hpp"
#include "ps/training_state.hpp"
#include "report/perf_tracker.hpp"
#include "scheduler/admission.hpp"
#include "scheduler/allocation.hpp"
#include "scheduler/cluster_view.hpp"
#include "scheduler/executor.hpp"
#include "scheduler/job_log.hpp"
#include "scheduler/job_status.hpp"
#include "scheduler/job_store.hpp"
#include "scheduler/node_table.hpp"
#include "scheduler/policy.hpp"
#include "scheduler/rebalance.hpp"
#include "scheduler/registered_job.hpp"
#include "spec/job_spec.hpp"

namespace coach::scheduler {

/// What a decision asks of the caller.
struct launch_order {
  std::uint64_t job = 0;
  std::vector<std::uint32_t> workers;  ///< host of each worker, by rank
  std::vector<std::uint32_t> shards;   ///< host of each shard, by id
};
/// Ask the job's master to grow or shrink to `workers` and `shards` (0: unchanged). The
/// allocation changed already; restore `before` (job_registry::restore) if the master refuses.
struct resize_order {
  std::uint64_t job = 0;
  std::uint32_t generation = 0;
  std::uint32_t workers = 0;
  std::uint32_t shards = 0;
  allocation before;
  std::string cause;  ///< "policy NAME"
};
/// The job's run stopped (a policy suspended it): stop its master here and its parts on `hosts`.
struct stop_order {
  std::uint64_t job = 0;
  std::set<std::uint32_t> hosts;
};
/// Migrate shard `shard` of the job to the node `to` (the rebalancer's move, already counted).
struct migrate_order {
  std::uint64_t job = 0;
  std::uint32_t shard = 0;
  std::string to;
  shard_move move;
};
struct orders {
  std::vector<launch_order> launches;
  std::vector<resize_order> resizes;
  std::vector<stop_order> stops;
  std::vector<migrate_order> moves;
  bool empty() const noexcept {
    return launches.empty() && resizes.empty() && stops.empty() && moves.empty();
  }
};

/// A node stopped heartbeating: what it means for one job that ran parts there.
struct node_loss {
  std::uint64_t job = 0;
  /// It held the master: the job fails (the caller ends it).
  bool fails = false;
  /// It held a shard, or the job was still starting: the run is stopped here and the job waits
  /// to restart from its checkpoint on the nodes left (a recovery); the caller stops its
  /// master and its parts on `stop_hosts`.
  bool recovers = false;
  std::set<std::uint32_t> stop_hosts;
  /// Otherwise the job goes on without the workers `ranks` (already dropped here), and with
  /// its shards' replicas that are left: `heads`, pairs (shard, replica) flattened, the backup
  /// that takes over as each listed shard's primary; `cut`, pairs (shard, replica), the
  /// replica that goes on without the replicas after it (the caller tells the master:
  /// take_over_atom).
  std::vector<std::uint32_t> ranks;
  std::vector<std::uint32_t> heads;
  std::vector<std::uint32_t> cut;
};

class job_registry {
 public:
  using log_sink = std::function<void(const std::string&)>;

  /// `nodes` must outlive the registry; `wall` dates states and epochs (Unix seconds live);
  /// `self_host` is the scheduler's own host (each job's master runs there).
  job_registry(std::shared_ptr<job_store> store, const node_table& nodes, const clock_source& wall,
               std::uint32_t self_host, log_sink log);

  /// Reads every job of the store: ended ones as they ended; queued ones queued; running or
  /// suspended ones suspended, to resume from their checkpoint once the nodes that ran their
  /// parts were told to stop them (stop_unsent). Returns how many jobs it read.
  result<std::size_t> load();

  /// Checks a new job against the cluster and makes its record: the counts asked must lie in
  /// the spec's ranges; a job whose minimum would not fit the whole cluster, empty, is refused
  /// (it would wait for ever); one whose request would not fit asks for the most that does.
  /// Errors: invalid_argument (counts out of range), resource_exhausted (naming what it needs).
  result<job_record> admit(const job_spec& spec, const submission& s) const;
  /// Stores an admitted job of `spec` and queues it. `samples_epoch`: its data set's training
  /// rows.
  result<registered_job*> add(job_record rec, const job_spec& spec, std::uint64_t samples_epoch,
                              std::uint64_t token = 0);

  registered_job* find(std::uint64_t id);
  const registered_job* find(std::uint64_t id) const;
  /// The job if `generation` is its launched run; else null (a stale report).
  registered_job* current(std::uint64_t id, std::uint32_t generation);
  /// The job, running (every part started). Errors: not_found, invalid_argument saying why not.
  result<registered_job*> running_job(std::uint64_t id);
  const std::map<std::uint64_t, registered_job>& jobs() const noexcept { return jobs_; }

  /// What this registry gave out on each host: the parts of every launched job.
  std::map<std::uint32_t, resources> reserved() const;
  /// Live nodes that take work, with what is free on them.
  cluster_view cluster() const { return nodes_.view(reserved()); }

  /// Asks `policy` and carries its actions out through `exec`: a start becomes a launch order
  /// (placed, not yet counted: begin_run counts it), a resize changes the allocation now and
  /// becomes a resize order, a suspend stops the run here and becomes a stop order. Then, with
  /// what is left free, `rebal` (null: off) may move one shard of each running dltap job whose
  /// `busy(id)` is false (no part addition in flight). Jobs are asked in id order.
  orders decide(policy_holder& policy, const executor& exec, rebalancer* rebal,
                const std::function<bool(std::uint64_t)>& busy = {});

  /// A launch order is carried out: counts the parts, marks the run, writes the store. Returns
  /// the run's generation. `resumed`: from a checkpoint or after a suspend. A job without a
  /// checkpoint runs from the seed, from its first epoch (first_epoch() is 0 after this).
  std::uint32_t begin_run(registered_job& job, std::span<const std::uint32_t> workers,
                          std::span<const std::uint32_t> shards, bool resumed);
  /// The run's model is built (before begin_run): its shape, for the rebalancer, and its data
  /// set's training rows.
  void shaped(registered_job& job, const run_shape& shape, std::uint64_t samples_epoch);
  /// Every part acknowledged its start.
  void started(registered_job& job);
  /// The run's master finished (succeeded or cancelled; the caller ends the job): its final
  /// figures into the status (test accuracy when it measured one, changes, epochs done).
  void finished(registered_job& job, const job_result& r);
  /// A resize order of `cause` was refused by the master: the allocation it changed comes back.
  void restore(std::uint64_t id, std::uint32_t generation, const allocation& before,
               const std::string& cause);
  /// A user's rescale was accepted by the master (0: unchanged): the allocation follows, and
  /// the counts are held against the policies until released (user_orders.hpp).
  void rescaled(registered_job& job, std::uint32_t workers, std::uint32_t shards);

  // A user's orders (scheduler/user_orders.hpp) and the causes of changes (change_causes.hpp).
  /// The user asks the job's master for a rescale (before its answer): noted in its history.
  void user_rescale(registered_job& job, std::uint32_t workers, std::uint32_t shards);
  /// The master refused the user's rescale (`why`), or did not answer.
  void user_rescale_refused(std::uint64_t id, std::uint32_t generation, const std::string& why);
  /// The user asks the job's master to move shard `shard` to `host` (before its answer: the
  /// new shard may be placed first): noted in its history.
  void user_migrate(registered_job& job, std::uint32_t shard, std::uint32_t host);
  /// The master refused the user's migration (`why`), or did not answer: nothing is pinned.
  void user_migrate_refused(std::uint64_t id, std::uint32_t generation, std::uint32_t shard,
                            std::uint32_t host, const std::string& why);
  /// The rebalancer's move of the job's shard was refused: not expected any more.
  void move_refused(std::uint64_t id);
  /// `coach migrate JOB --shard K --release`: shard K is no longer pinned. Errors: not_found,
  /// invalid_argument (the job is not running, or K is not pinned), naming what is pinned.
  result<void> release_pin(std::uint64_t id, std::uint32_t shard);
  /// `coach rescale JOB --release`: its counts are the policies' again. Errors: not_found,
  /// invalid_argument (nothing held).
  result<void> release_hold(std::uint64_t id);
  /// Ends a job: records why, forgets its run. Returns the hosts to stop its parts on.
  std::set<std::uint32_t> end(registered_job& job, job_state state,
                              std::optional<coach::error> why);
  /// The user cancels the job. Errors: not_found, invalid_argument (already over).
  result<registered_job*> cancel(std::uint64_t id);
  /// Drops an ended job whose parts all stopped, here and in the store (its id is not given
  /// again). Errors: not_found, invalid_argument (not over yet, or its parts still stopping).
  result<void> forget(std::uint64_t id);

  /// The node for one more part of `job` (a worker when `worker`): the node `name` when named;
  /// else the one a policy resize planned; else beside the job's parts by its placement where
  /// it fits; else (a user's rescale beyond what is free) the usable node running the fewest
  /// parts of that kind of the job, then the fewest parts, then by name. Errors: not_found (an
  /// unknown name), resource_exhausted (no usable node).
  result<std::uint32_t> place(registered_job& job, bool worker, const std::string& name,
                              const executor& exec);
  /// Part `id` (a worker when `worker`) of the job runs on `host` now. An added shard of a job
  /// with replicas gets its backups here (never on `host`, fewest of the job's copies first):
  /// returns their hosts in chain order (fewer than replicas - 1 when too few nodes are usable).
  std::vector<std::uint32_t> part_placed(registered_job& job, bool worker, std::uint32_t id,
                                         std::uint32_t host);
  /// No node could take one more part (a worker when `worker`): listed as not started, so that
  /// the status's node lists stay indexed by rank and shard id.
  void part_unplaced(registered_job& job, bool worker);
  /// Part `id` could not start: it is not counted.
  void part_failed(registered_job& job, bool worker, std::uint32_t id);
  /// A change took effect: the job's members and its shards owning slices. True when parts
  /// left (what they held is free).
  bool layout(registered_job& job, std::span<const std::uint32_t> members,
              std::span<const std::uint32_t> live);

  void progress(registered_job& job, const progress_event& p);
  /// An epoch ended: into the status, the store and `model` (predicted first, so that the
  /// prediction is made without the epoch it predicts).
  void epoch(registered_job& job, const epoch_report& e, perf_model& model);
  /// A checkpoint of the run, the training state after epoch `epoch` (once that epoch's
  /// record is in: until then it is held): the next run resumes from it. Written to the store
  /// when store_every_s passed since the last write, and for the job's last epoch; a suspended
  /// or recovering job's is written then.
  void checkpoint(registered_job& job, std::uint32_t epoch,
                  std::shared_ptr<const ps::training_state> state);

  /// A node stopped heartbeating: stops waiting for its answers and says, per launched job with
  /// parts there, whether the job fails, recovers (stopped here, to restart from its
  /// checkpoint) or goes on without its workers there.
  std::vector<node_loss> lose_node(std::uint32_t host);
  /// The jobs whose parts node `host` held when it was lost (lose_node), taken out: a node taken
  /// for dead may have been frozen or cut off, not killed, and its parts of them still run.
  /// They went on, or restarted, without those parts; the caller tells it to stop them.
  std::set<std::uint64_t> came_back(std::uint32_t host);
  /// Hosts of an earlier process's runs that are not alive now are taken for dead (called once
  /// the node timeout has passed since the scheduler started). True when a job may start now.
  bool forget_unseen();
  /// Node `host` heartbeats (again): the jobs whose stop of an earlier process's run it was not
  /// sent yet (taken out: the caller sends them now).
  std::set<std::uint64_t> seen(std::uint32_t host);
  /// A node answered a stop of an earlier run of the job. True when none is left unanswered.
  bool stop_answered(registered_job& job, std::uint32_t host);
  /// Stops to ask again: per job, the live hosts whose stop has been unanswered for more than
  /// `after_s` seconds (an answer lost with a connection; a node answers every stop, running
  /// the job or not). Counted as asked now.
  std::vector<std::pair<std::uint64_t, std::vector<std::uint32_t>>> stops_overdue(double after_s);

  /// What coach status shows of the job now (without traffic; with the model's JSON when
  /// `model` is given).
  job_status snapshot(const registered_job& job, perf_model* model, std::string_view policy) const;
  /// Why a queued or suspended job does not run yet, for `coach status`: the least it needs
  /// against what is free ("needs 4 CPUs (2 workers and 2 shards at least), 2 free"), or the
  /// earlier job it waits behind; empty for a job that is not waiting.
  std::string why_waiting(const registered_job& job) const;

  /// Keeps `line` in the job's history and logs it (unless `log` is false: the history's only).
  void note(registered_job& job, std::string line, bool log = true);
  /// The job's history after event `after` (0: all it keeps), oldest first.
  std::vector<job_event> events(const registered_job& job, std::uint64_t after) const {
    return job.log().since(after);
  }
  /// An epoch's line: in the history, not the log (one an epoch).
  void note_epoch(registered_job& job, std::string line);
  const std::shared_ptr<job_store>& store() const noexcept { return store_; }

 private:
  template <class T>
  void logged(const result<T>& r, const char* what);
  registered_job& resume(job_record rec);
  void start(registered_job& job, const job_view& v, const action& a, resource_pool& pool,
             const executor& exec, orders& out);
  void resize(registered_job& job, const job_view& v, const action& a, resource_pool& pool,
              const executor& exec, const std::string& policy, orders& out);
  /// The status's shard list from the allocation: one node per shard owning slices (by id,
  /// its primary), with the shards' ids.
  void list_nodes(registered_job& job);
  void suspend(registered_job& job, resource_pool& pool, const std::string& policy, orders& out);
  /// The job's view for a policy; `lists` keeps what it points to.
  job_view view_of(const registered_job& job, std::vector<std::vector<std::uint32_t>>& lists) const;
  /// Live nodes that take work (the candidates for backups).
  std::vector<std::uint32_t> usable_hosts() const;
  /// Says which shards of the job run with fewer backups than asked (`usable` nodes).
  void note_short_backups(registered_job& job, std::span<const std::uint32_t> shards,
                          std::size_t usable);
  /// The job's replicas on `host` are lost: fills loss.heads and loss.cut. False when a shard
  /// had no copy left but there (the job recovers from its checkpoint instead).
  bool fail_over(registered_job& job, std::uint32_t host, node_loss& loss);
  /// Stops the run to resume from its checkpoint later: suspended, waiting for the stops of
  /// `stopping`; `why` goes to the store's state history.
  void stop_to_resume(registered_job& job, std::set<std::uint32_t> stopping,
                      const std::string& why);
  /// Writes the job's checkpoint to the store unless it is there.
  void store_checkpoint(registered_job& job);
  void rebalance(resource_pool& pool, rebalancer& rebal,
                 const std::function<bool(std::uint64_t)>& busy, orders& out);
  void stop_run(registered_job& job);
  /// Writes the job's allocation to the store.
  void record_allocation(const registered_job& job);
  /// Writes the job's recoveries, failovers and resumes to the store (job_store::set_history).
  void record_history(const registered_job& job);
  double now() const { return to_seconds(wall_.now()); }

  std::shared_ptr<job_store> store_;
  const node_table& nodes_;
  const clock_source& wall_;
  std::uint32_t self_host_;
  log_sink log_;
  /// The store's errors, a line a second at most (a full disk failed every epoch's record:
  /// 437 lines a second, issue 37); the lines held back are counted on the next.
  std::unique_ptr<log_limiter> store_errors_ = std::make_unique<log_limiter>(1);
  std::map<std::uint64_t, registered_job> jobs_;
  std::map<std::uint32_t, std::set<std::uint64_t>> left_on_;  ///< lose_node's, by host
};

/// The performance model's view of a job (coach status --json "model"), one JSON object.
std::string model_json(const registered_job& job, perf_model& model, std::string_view policy);

}  // namespace coach::scheduler
