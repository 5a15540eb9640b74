#pragma once
// scheduler::sim: the scheduling policies driven by a job trace in a discrete-event loop
// (coach-sim). The policies are the same objects the cluster scheduler runs (policy_holder);
// only the cluster and the jobs are simulated.
//
// The simulated cluster: `nodes` nodes of `gpus_per_node` GPUs and `cpus_per_node` CPUs. A
// trace job of num_gpus GPUs asks for num_gpus workers of one GPU and one CPU each, and for
// num_shards shards of one CPU each (trace.hpp gives the defaults). Elastic jobs may run with
// min_gpus..max_gpus workers and 1..max(num_shards, max_gpus) shards.
//
// A job's work is E = duration / t(num_gpus, num_shards) epochs, with t its model's true epoch
// time (trace.hpp); with (w, p) it progresses at 1/t(w, p) epochs per second, so at its request
// it runs exactly `duration`. Changes cost time: a resize (workers or shards) and a resume after
// a suspension pause the job for `rescale_cost_s` while it keeps its resources (new members join
// and fetch parameters; a resumed job restores from its shards' checkpoint). A first start is
// free, for every policy alike.
//
// Network: a step moves each worker's push and pull of every shard's slice of the parameters
// (2 × param_mb / p to and from each of the p shards). Where a worker and a shard are on two
// nodes, those bytes cross both nodes' links; the busiest link of the job, at link_gbps, takes
// (bytes on it per step) / bandwidth per step, and an epoch of steps/w steps adds that much time
// to t(w, p). So the placement (executor, scheduler/placement.hpp: the one the cluster scheduler
// uses) changes a job's speed, and the simulator counts the bytes that cross hosts. Jobs do not
// slow each other's links (a link's bandwidth is its own per job): an optimistic bound for
// spread-out placements. Models without param_mb and steps have no network time.
//
// Measurements: the simulator reports an epoch's time to the performance model
// (perf_model::observe) for the first `samples_per_config` epochs after each change of a job's
// allocation, multiplied by a noise factor 1 + N(0, noise) (clamped to >= 0.1): what a job
// master measures. Later epochs at the same allocation teach little and would cost events.
//
// Event-driven: the loop jumps from event to event (arrival, completion, measured epoch, a
// policy's revisit time, a policy swap) and calls the policy once per distinct time at which
// something happened; nothing ticks per second. Progress between events is computed in closed
// form. A job's pending events carry its generation; a change bumps it, so stale events are
// skipped rather than searched for.
//
// Figures (sim_result): makespan from the first submission to the last completion; job
// completion time (JCT) = completion − submission, its mean and 95th percentile (nearest rank);
// queueing delay = first start − submission, its mean; GPU utilization = GPU-seconds allocated
// (pauses included) / (GPUs × makespan).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "common/json.hpp"
#include "scheduler/policy.hpp"
#include "sim/trace.hpp"

namespace coach::scheduler {

/// The simulated cluster and its costs.
struct sim_options {
  int nodes = 8;
  int gpus_per_node = 8;
  double cpus_per_node = 64;
  double rescale_cost_s = 10;  ///< pause of a resize or a resume
  double noise = 0.05;         ///< relative standard deviation of a measured epoch
  std::uint64_t seed = 1;      ///< of the measurement noise
  int samples_per_config = 3;  ///< epochs reported after each allocation change
  /// Default max_gpus of an elastic job: ceil(max_scale × num_gpus), at most the cluster's GPUs.
  double max_scale = 2;
  /// Options of the policies (round-robin's slice, coach's costs); rescale_cost_s is set from
  /// this struct's. A null model gets a fresh one per run.
  policy_options policy;
  /// Swaps of the active policy: (time in seconds, policy name), by time.
  std::vector<std::pair<double, std::string>> policy_changes;
  /// Where parts go: spread, best-fit, random or dltap (scheduler/placement.hpp).
  std::string placement = "dltap";
  double link_gbps = 10;  ///< each node's link, Gbit/s
};

/// One job's outcome.
struct sim_job_result {
  std::uint64_t id = 0;  ///< 1-based position in the trace
  double submit = 0;
  double first_start = 0;
  double finish = 0;
  double epochs = 0;       ///< work, in epochs
  double epochs_done = 0;  ///< == epochs once finished
  int starts = 0;          ///< its first start plus every resume after a suspension
  int resizes = 0;
  int suspensions = 0;
  int max_workers_seen = 0;
};

/// A run's figures (see the file comment).
struct sim_result {
  std::string policy;  ///< the policy at the start
  std::string placement;
  std::size_t jobs = 0;
  double makespan_s = 0;
  double avg_jct_s = 0;
  double p95_jct_s = 0;
  double avg_queue_s = 0;
  double gpu_utilization = 0;
  double wall_s = 0;  ///< real time the simulation took
  std::size_t decisions = 0;
  std::size_t actions = 0;
  std::size_t resizes = 0;
  std::size_t suspensions = 0;
  std::size_t rejected = 0;     ///< actions that could not be applied (0 for a correct policy)
  std::string first_rejection;  ///< why the first of them was refused
  std::size_t predictions = 0;  ///< measured epochs the model had a prediction for
  double model_error = 0;       ///< their mean |predicted − observed| / observed
  double cross_host_bytes = 0;  ///< bytes between workers and shards on different nodes
  double network_s = 0;         ///< job-seconds spent on the network (summed over jobs)
  std::vector<sim_job_result> per_job;  ///< by id
};

/// Runs `t` under `policy` (a name make_policy knows). Errors: invalid_argument for an unknown
/// policy (in `policy` or in options.policy_changes), a trace model missing from `models`, or
/// a job that cannot fit the cluster, each naming the trace line; internal if the policy leaves
/// jobs waiting on an idle cluster (it would never end).
result<sim_result> simulate(const trace& t, const model_table& models, std::string_view policy,
                            const sim_options& options = {});

/// The figures as one JSON object on one line: policy, placement, jobs, makespan_s, avg_jct_s,
/// p95_jct_s, avg_queue_s, gpu_utilization, wall_s, then decisions, actions, resizes,
/// suspensions, rejected, predictions, model_error, cross_host_bytes, network_s.
json to_json_value(const sim_result& r);
/// to_json_value as one line of JSON.
std::string to_json(const sim_result& r);

}  // namespace coach::scheduler
