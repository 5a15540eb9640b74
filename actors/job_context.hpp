#pragma once
// actors::job_context: what every actor of one job shares in this process (read-only once the
// job starts): the spec, the model, the data set, the shard map and the endpoints.

#include <caf/allowed_unsafe_message_type.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <vector>

#include "actors/messages.hpp"
#include "actors/transport.hpp"
#include "common/error.hpp"
#include "master/job_master.hpp"
#include "ps/adascale.hpp"
#include "ps/job_config.hpp"
#include "ps/shard_map.hpp"
#include "ps/training_state.hpp"
#include "report/job_report.hpp"
#include "spec/job_spec.hpp"
#include "worker/dataset.hpp"
#include "worker/device_assignment.hpp"
#include "worker/device_reducer.hpp"
#include "worker/host_reducer.hpp"
#include "worker/network.hpp"

namespace coach::actors {

using master::eval_result;
using master::job_outcome;
using master::param_snapshot;
using master::step_trace;

/// Hosts of the parts added to a running job, as this process knows them. In a cluster the node
/// agent records a part here before the job master first uses it (the scheduler waits for every
/// node of the job to acknowledge); the job's actors read it under the lock.
struct part_directory {
  mutable std::shared_mutex mutex;
  std::map<std::uint32_t, std::uint32_t> shard_hosts;   ///< by shard id
  std::map<std::uint32_t, std::uint32_t> worker_hosts;  ///< by rank
  std::map<std::uint32_t, endpoint> heads;              ///< shards whose backup took over
  /// Added shards of a job with replicas: their backups' hosts, in chain order.
  std::map<std::uint32_t, std::vector<std::uint32_t>> backups;

  void place(bool worker, std::uint32_t id, std::uint32_t host,
             std::vector<std::uint32_t> backup_hosts = {}) {
    std::unique_lock lock(mutex);
    (worker ? worker_hosts : shard_hosts)[id] = host;
    if (!worker && !backup_hosts.empty()) backups[id] = std::move(backup_hosts);
  }
  /// The backups' hosts of added shard `id` (empty: none).
  std::vector<std::uint32_t> backups_of(std::uint32_t id) const {
    std::shared_lock lock(mutex);
    auto it = backups.find(id);
    return it == backups.end() ? std::vector<std::uint32_t>{} : it->second;
  }
  /// Shard `id`'s primary is now `ep` (one of its backups took over: take_over).
  void take_over(std::uint32_t id, endpoint ep) {
    std::unique_lock lock(mutex);
    heads[id] = ep;
  }
  /// Where shard `id`'s primary is, when a backup took over.
  std::optional<endpoint> head_of(std::uint32_t id) const {
    std::shared_lock lock(mutex);
    auto it = heads.find(id);
    if (it == heads.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::uint32_t> host_of(bool worker, std::uint32_t id) const {
    std::shared_lock lock(mutex);
    const auto& m = worker ? worker_hosts : shard_hosts;
    auto it = m.find(id);
    if (it == m.end()) return std::nullopt;
    return it->second;
  }
};

struct job_context {
  std::uint64_t job = 1;
  scheduler::job_spec spec;
  kernels::backend_kind backend = kernels::backend_kind::cpu;  ///< resolved (never auto)
  std::shared_ptr<const worker::dataset_pair> data;
  worker::network model;
  ps::shard_map map;
  std::shared_ptr<transport> net;
  endpoint master;
  std::vector<endpoint> shards;   ///< by shard id, those the job started with
  std::vector<endpoint> workers;  ///< by rank, those the job started with
  /// Shard replicas (spec.replicas > 1): the hosts of each shard's backups, by shard id, in
  /// chain order (replica 1, 2, ...); empty: none.
  std::vector<std::vector<std::uint32_t>> backup_hosts;

  /// Set when the spec asks for host reduction: sums the gradients of this process's workers
  /// of the job before one push per shard (worker/host_reducer.hpp).
  std::shared_ptr<worker::host_reducer> reducer;
  /// The same on device backends (cuda): the local gradients summed on the devices and
  /// all-reduced across them, one download (worker/device_reducer.hpp). Set instead of `reducer`.
  std::shared_ptr<worker::device_reducer> device_reducer;
  /// On cuda: the devices of this process, shared by its jobs: which one each worker runs on
  /// (worker/device_assignment.hpp); null on the cpu backend.
  std::shared_ptr<worker::device_assignment> devices;

  /// Test hook (bench/consistency_bench): how many times as long worker `rank` takes over step
  /// `step` (>= 1: it waits that factor minus one times its compute time after computing);
  /// empty: every step at full speed.
  std::function<double(std::uint32_t rank, std::int64_t step)> slowdown;
  /// Test hook: called on the job master's thread as each step completes, with the samples
  /// its members were granted (ascending) and the loss summed over them; empty: none.
  std::function<void(const step_trace&)> on_step;

  /// Parts added while the job runs (shared: the job's actors and the node agent here).
  std::shared_ptr<part_directory> added = std::make_shared<part_directory>();

  /// The endpoint of shard `k` or worker `r`, also of one added while the job runs (where the
  /// directory places it; on the master's host when it does not: the embedded cluster).
  endpoint shard_ep(std::uint32_t k) const;
  /// Replica `i` of shard `k` where the job started it (0: the primary; i >= 1: its backup i,
  /// on backup_hosts[k][i - 1], with an id of its own).
  endpoint replica_ep(std::uint32_t k, std::uint32_t i) const;
  /// The replicas shard k started with (1 + its backups), also of one added while the job runs.
  std::uint32_t replicas_of(std::uint32_t k) const {
    if (k < backup_hosts.size()) return 1 + std::uint32_t(backup_hosts[k].size());
    return 1 + std::uint32_t(spec.replicas > 1 ? added->backups_of(k).size() : 0);
  }
  endpoint worker_ep(std::uint32_t r) const;
  /// The configuration the job starts with: version 1, ranks 0..workers-1, `map`.
  ps::job_config initial_config() const;
};

/// Sets `ctx`'s device state from its spec: `devices` (this process's, `process_devices`, made
/// on first use) when the job's workers run on cuda (`resolved`: the spec's backend with auto
/// resolved), and the host reducer that fits the backend when the spec asks for host reduction.
void setup_job_devices(job_context& ctx, kernels::backend_kind resolved,
                       std::shared_ptr<worker::device_assignment>& process_devices);

/// Makes worker `rank`'s backend: on cuda, on the device ctx.devices gives it (logged on
/// stderr, `who` naming this process: "coach-node 'a'", "coach"); the caller releases the
/// device through ctx.devices when the worker cannot start. Errors: the backend's, or no device
/// left (resource_exhausted, naming who holds them).
result<std::unique_ptr<kernels::backend>> make_worker_backend(const job_context& ctx,
                                                              std::uint32_t rank,
                                                              std::string_view who);

/// The context of job `job` as any of its hosts sees it: the master on master_host, shard k on
/// shard_hosts[k], worker r on worker_hosts[r]. `data` gives the model's input and output sizes.
result<std::shared_ptr<job_context>> make_job_context(
    std::uint64_t job, const scheduler::job_spec& spec,
    std::shared_ptr<const worker::dataset_pair> data, std::shared_ptr<transport> net,
    std::uint32_t master_host, const std::vector<std::uint32_t>& shard_hosts,
    const std::vector<std::uint32_t>& worker_hosts);

/// Endpoint ids of a job's actors on host 0 (the embedded cluster).
endpoint master_endpoint(std::uint64_t job);
endpoint shard_endpoint(std::uint64_t job, std::uint32_t shard);
endpoint worker_endpoint(std::uint64_t job, std::uint32_t rank);

/// A request to run a job, as the scheduler actor receives it.
struct job_request {
  scheduler::job_spec spec;
  std::uint32_t workers = 1;
  std::uint32_t shards = 1;
  std::shared_ptr<const worker::dataset_pair> data;
  /// Test hook (bench/consistency_bench): how many times as long worker `rank` takes over step
  /// `step` (>= 1: it waits that factor minus one times its compute time after computing);
  /// empty: every step at full speed.
  std::function<double(std::uint32_t rank, std::int64_t step)> slowdown;
  /// Test hook: called on the job master's thread as each step completes, with the samples
  /// its members were granted (ascending) and the loss summed over them; empty: none.
  std::function<void(const step_trace&)> on_step;
  /// Resumed from a checkpoint (coach train --resume): the shards start from this state (its
  /// version is the first step), the job from epoch `first_epoch`. Null: from the seed.
  std::shared_ptr<const ps::training_state> resume;
  std::uint32_t first_epoch = 0;
  /// Which epochs' ends are checkpointed (master_options::checkpoint_due); empty: none.
  std::function<bool(std::uint32_t epoch)> checkpoint_due;
  /// Test hook (master_options::cancel_at_step): cancelled as this step opens; -1: never.
  std::int64_t cancel_at_step = -1;
};

}  // namespace coach::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(coach::master::param_snapshot)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(coach::master::eval_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(coach::master::job_outcome)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(coach::actors::job_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(coach::scheduler::progress_event)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(coach::scheduler::epoch_report)
