#pragma once
// actors/roles.hpp: the behaviours of Coach's four actor roles. Each wraps the plain logic of its
// layer (ps::shard, worker::network_runner, master::chunk_dispenser, the scheduler) and moves
// messages through the transport; the algorithms live in those classes, not here.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <functional>
#include <memory>
#include <string>

#include "actors/job_context.hpp"
#include "kernels/backend.hpp"

namespace coach::actors {

/// Spawns shard `id` of the job, owning its ranges of `initial` (the whole initial vector).
/// `replica`: 0 the primary; i >= 1 its backup i, at ctx->replica_ep(id, i) (a job with
/// `replicas: R`, docs/design.md "Shard replicas").
caf::actor spawn_shard(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                       std::uint32_t id, const std::vector<float>& initial,
                       std::uint32_t replica = 0);
/// Spawns shard `id` of a job resumed from a checkpoint: it owns its ranges of `from` (values
/// and optimizer state) and starts at its version, update count and samples applied.
/// REQUIRES: ps::check(from, ctx->model.num_params(), the shard optimizer's state) passed.
caf::actor spawn_shard(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                       std::uint32_t id, const ps::training_state& from, std::uint32_t replica = 0);

/// Spawns worker `rank` (a detached actor: its forward and backward run on a thread of its own)
/// computing on `be`. It starts pulling (version `first_step`: a resumed job's is its
/// checkpoint's version) and asking for chunks at once.
caf::actor spawn_worker(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                        std::uint32_t rank, std::shared_ptr<kernels::backend> be,
                        std::int64_t first_step = 0);

/// Spawns the evaluator of a job (detached): (eval_atom, param_snapshot) -> eval_result to sender.
caf::actor spawn_evaluator(caf::actor_system& sys, std::shared_ptr<const job_context> ctx);

/// What a job master needs to change a running job (docs/design.md "Elastic jobs"): start a
/// worker of a new rank or an empty shard of a new id, each given the configuration it starts
/// under, on `node` when that is not empty (else where the hook decides). A hook answers the
/// actor it started in this process, which the master links to (shards) or watches (workers),
/// or a default caf::actor when the part starts elsewhere: the master then waits for
/// (ready_atom, worker?, id, error) before it uses the part. Empty functions: the job cannot
/// grow (changes that need them are refused and logged).
struct elastic_hooks {
  /// Starts worker `rank`, whose first step is `first_step`, under `c`.
  std::function<result<caf::actor>(std::uint32_t rank, const ps::job_config& c,
                                   std::int64_t first_step, const std::string& node)>
      add_worker;
  /// Starts shard `id`, owning nothing yet, under `c`. `expect_keys` > 0: the shard will adopt
  /// about that many keys soon (a migration prepared ahead of its step boundary), and a part
  /// started elsewhere is `ready` only once its node has warmed the memory for them.
  std::function<result<caf::actor>(std::uint32_t id, const ps::job_config& c,
                                   const std::string& node, std::uint64_t expect_keys)>
      add_shard;
  /// A change took effect: `members` are the job's workers from now on and `live` the shards
  /// that own slices (a worker that left, a drained shard and a migration's source hold
  /// nothing any more). Called by the master when it publishes the configuration, before it
  /// starts any later change (so before that change's add_worker / add_shard calls).
  std::function<void(const std::vector<std::uint32_t>& members,
                     const std::vector<std::uint32_t>& live)>
      changed;
};

/// Spawns shard `id` added to a running job: it owns nothing until a transfer arrives and
/// starts under configuration `c`. `replica`: 0 the shard, i > 0 its backup i (a job with
/// replicas; the job context places the backups).
caf::actor spawn_added_shard(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                             std::uint32_t id, const ps::job_config& c, std::uint32_t replica = 0);
/// Spawns worker `rank` joining a running job at step `first_step` under configuration `c`.
caf::actor spawn_added_worker(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                              std::uint32_t rank, std::shared_ptr<kernels::backend> be,
                              const ps::job_config& c, std::int64_t first_step);

/// Where a job master starts and what it reports besides progress, epochs and the outcome
/// (the observer gets (checkpoint_atom, param_snapshot) for ports::checkpoint).
using master_options = master::job_master_options;

/// Spawns the job master: dispenses chunks, tracks epochs, requests end-of-epoch snapshots,
/// has them evaluated and reports progress, epochs and the outcome to `observer`
/// (progress_atom / epoch_atom / done_atom messages). (cancel_atom) stops the job at the next
/// step boundary.
caf::actor spawn_master(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                        caf::actor observer, caf::actor evaluator, elastic_hooks hooks = {},
                        master_options options = {});

/// Spawns the scheduler: (submit_atom, job_request, observer) -> starts the job's actors and
/// answers the job id, or answers a caf::error after sending (done_atom, job_outcome) with the
/// failure to the observer; (cancel_atom, job id) stops a job. Its jobs' actors talk through
/// `net` (in process; tests wrap it in a faulty_transport).
caf::actor spawn_scheduler(caf::actor_system& sys, std::shared_ptr<transport> net);

}  // namespace coach::actors
