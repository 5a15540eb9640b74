#pragma once
// scheduler::policy: one interface for the scheduling policies (DESIGN.md "Scheduler"), the
// factory that makes them by name, and the holder that swaps them at run time.
//
// A policy looks at the cluster and at every job that is queued, running or suspended, and
// returns what should change: start a waiting job with w workers and p shards, resize a running
// one, suspend one (it keeps its progress: state lives in the shards and is checkpointed). The
// same code serves the cluster scheduler (actors/) and the simulator (sim/sim), which
// carry the actions out. The four policies (docs/scheduler.md gives each rule in full):
//
//   fifo          jobs start in submission order at what they asked for; the first that does
//                 not fit blocks those behind it; nothing is ever resized or suspended.
//   elastic-fifo  the same order, but a job may start with fewer workers (down to its minimum)
//                 and running jobs grow into free GPUs up to their maximum while nobody waits;
//                 growth beyond a request is handed back when a job waits for it.
//   round-robin   jobs run at their request in turns of `slice`: when a job waits, running jobs
//                 whose turn is over are suspended, longest-running first, and the waiting ones
//                 start in the order they began to wait.
//   coach         admits jobs in submission order at their minimum, then gives each GPU to the
//                 job whose predicted completion time it shortens most (perf_model), moves
//                 workers from job to job while that pays more than the rescale costs, and
//                 picks each job's shard count from the model.
//
// Policies never read a clock (`now` is an argument) and keep no state that a swap would lose:
// what they need of a job's past is in its job_view (state_since, progress) and, for coach, in
// the perf_model that the holder shares across swaps. A swapped-in policy therefore carries on
// with the running jobs as they are; none is restarted.

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "report/perf_model.hpp"
#include "scheduler/cluster_view.hpp"
#include "scheduler/resource_pool.hpp"

namespace coach::scheduler {

/// One change a policy asks for.
struct action {
  enum class kind_type : std::uint8_t {
    start,    ///< a queued or suspended job starts (resumes) with `workers` and `shards`
    resize,   ///< a running job changes to `workers` and `shards` (either may stay the same)
    suspend,  ///< a running job stops and frees its resources, keeping its progress
  };
  kind_type kind = kind_type::start;
  std::uint64_t job = 0;
  int workers = 0;  ///< start, resize: the new count, in [min_workers, max_workers]
  int shards = 0;   ///< start, resize: the new count, in [min_shards, max_shards]
  friend bool operator==(const action&, const action&) = default;
};

/// "start", "resize", "suspend".
std::string_view to_string(action::kind_type k) noexcept;
/// "start job 3 (4 workers, 2 shards)", for logs and test failures.
std::string to_string(const action& a);

/// What one decide() call returns.
///
/// Contract (check_decision verifies it): each job appears at most once; every action that
/// frees resources (suspend, a resize to less of something) comes before every action that
/// takes some, so that the caller can apply them in order; taken together they fit the
/// cluster_view node by node, parts placed by resource_pool's rule. The caller may still fail
/// to apply one (a heartbeat changed the cluster since): it skips it, and the next decision
/// sees the cluster as it is.
struct decision {
  std::vector<action> actions;
  /// Call decide() again at this time even if nothing happens (a round-robin turn ends, coach
  /// re-balances). nullopt: only when something changes (a job arrives or ends, a node joins).
  /// Each decision's request replaces the previous one's.
  std::optional<time_point> revisit_at;
};

/// The interface every policy implements.
class policy {
 public:
  virtual ~policy() = default;
  /// "fifo", "elastic-fifo", "round-robin" or "coach".
  virtual std::string_view name() const noexcept = 0;
  /// Decides what to change. `jobs` holds every queued, running and suspended job (in any
  /// order); `now` is the caller's clock and never goes backwards. Deterministic: the same
  /// inputs give the same decision (for coach, also the same perf_model contents and the same
  /// time of its last re-balancing, the one thing it remembers between calls).
  virtual decision decide(const cluster_view& cluster, std::span<const job_view> jobs,
                          time_point now) = 0;
};

/// Settings of the policies, with their defaults.
struct policy_options {
  /// round-robin: a job's turn.
  seconds slice{600};
  /// coach: how long a job pauses when its workers or shards change (its new members join and
  /// parameters move), in seconds; a change is made only if it is predicted to save more.
  double rescale_cost_s = 10;
  /// coach: when to look again with nothing else happening (the model learns between events).
  seconds revisit{300};
  /// coach: a worker moves from one job to another only if the receiver's predicted saving
  /// exceeds the donor's predicted loss by this factor (plus the rescale costs): hysteresis
  /// against moving workers back and forth on noise.
  double move_margin = 1.25;
  /// coach: the performance model; the holder creates one when this is null and shares it
  /// with every coach policy it makes, so a swap away and back keeps what was learned.
  std::shared_ptr<perf_model> model;
};

/// The names make_policy accepts, in a fixed order: fifo, elastic-fifo, round-robin, coach.
std::span<const std::string_view> policy_names() noexcept;

/// Makes the policy `name`. Errors: invalid_argument naming the unknown policy and listing the
/// known ones. A coach policy with `options.model` null gets a model of its own.
result<std::unique_ptr<policy>> make_policy(std::string_view name,
                                            const policy_options& options = {});

/// Holds the active policy and swaps it between two decisions.
///
/// Threads: decide() and set() may be called from different threads (a CLI request swapping
/// the policy while the scheduler decides); a mutex orders them, so a decision is made wholly
/// by the old policy or wholly by the new one. The cluster scheduler, an actor, calls both from
/// its own thread, where the mutex costs nothing.
class policy_holder {
 public:
  /// Holds `initial` (made with make_policy and these options).
  static result<policy_holder> make(std::string_view initial, policy_options options = {});

  policy_holder(policy_holder&&) noexcept;
  policy_holder& operator=(policy_holder&&) noexcept;
  ~policy_holder();

  /// Makes the policy `name` and makes it the active one from the next decision on. Running
  /// jobs are untouched by the swap itself. Errors: as make_policy; the active one stays then.
  result<void> set(std::string_view name);
  /// The active policy's name.
  std::string name() const;
  /// Decides with the active policy.
  decision decide(const cluster_view& cluster, std::span<const job_view> jobs, time_point now);
  /// The performance model shared by coach policies (feed it every measured epoch).
  const std::shared_ptr<perf_model>& model() const noexcept { return options_.model; }
  const policy_options& options() const noexcept { return options_; }

 private:
  policy_holder(policy_options options, std::unique_ptr<policy> initial);
  policy_options options_;
  std::unique_ptr<std::mutex> mutex_;  ///< a pointer so that the holder can move
  std::unique_ptr<policy> active_;
};

/// Checks that `a` suits `job`: its state (start: waiting; resize, suspend: running), its
/// ranges, its elasticity, and that a resize changes something. Errors: invalid_argument
/// naming the action and what is wrong.
result<void> check_action(const job_view& job, const action& a);

/// Carries out `a` on `pool` for `job`, whose parts are on `worker_nodes` and `shard_nodes`
/// (by rank and shard id; updated in place): frees first (the highest ranks and ids leave),
/// then places the added parts by resource_pool's rule. What an executor (the simulator, the
/// cluster scheduler) does with each action, so that its bookkeeping matches the policy's.
/// Errors: invalid_argument naming the action and what is wrong (the job's state, a count out
/// of range, a resize of a job that is not elastic, no room); nothing is changed then.
/// Reads of `job` are limited to its state, ranges and per-part resources, so `job`'s spans
/// may point into the very vectors being updated.
result<void> apply_action(resource_pool& pool, const job_view& job, const action& a,
                          std::vector<std::uint32_t>& worker_nodes,
                          std::vector<std::uint32_t>& shard_nodes);

/// Checks `d` against its contract for these inputs: known jobs, each at most once, actions
/// that suit the job's state (start: waiting; resize, suspend: running; no resize of a job
/// that is not elastic), counts within the job's ranges, frees before takes, and the whole
/// fitting the cluster node by node. Errors: invalid_argument naming the first action at fault
/// ("action 1: start job 2 (3 workers, 1 shards): does not fit the free resources"). The tests
/// hold every policy to it; a policy's output always passes.
result<void> check_decision(const cluster_view& cluster, std::span<const job_view> jobs,
                            const decision& d);

}  // namespace coach::scheduler
