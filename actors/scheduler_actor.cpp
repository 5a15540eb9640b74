#include <caf/all.hpp>

#include <map>
#include <thread>

#include "actors/roles.hpp"

namespace coach::actors {
namespace {

struct job_actors {
  caf::actor master;
  caf::actor evaluator;
  std::vector<caf::actor> shards;
  std::vector<caf::actor> workers;
};

struct scheduler_state {
  std::shared_ptr<transport> net;
  std::uint64_t next_job = 1;
  std::map<std::uint64_t, job_actors> jobs;
  std::shared_ptr<worker::device_assignment> devices;  ///< this process's, shared by its jobs
  static inline const char* name = "coach.scheduler";
};

/// Validates what the job asks of this host and starts its actors.
result<std::uint64_t> start_job(caf::stateful_actor<scheduler_state>* self, job_request& req,
                                const caf::actor& observer) {
  const auto& spec = req.spec;
  if (req.workers < 1 || req.shards < 1)
    return fail(errc::invalid_argument, "a job needs at least one worker and one shard");
  const int gpus = kernels::device_count();
  if (spec.gpus_per_worker > 0 && std::int64_t(spec.gpus_per_worker) * req.workers > gpus)
    return fail(errc::resource_exhausted,
                "job '{}' asks for {} workers x {} GPUs but this host has {} GPU(s)", spec.name,
                req.workers, spec.gpus_per_worker, gpus);
  if (!req.data || req.data->train.rows == 0 || req.data->test.rows == 0)
    return fail(errc::invalid_argument, "job '{}': the data set is empty", spec.name);

  auto model = worker::network::for_data(spec.model, req.data->train);
  if (!model) return fail(model.error().code, "job '{}': {}", spec.name, model.error().message);
  auto resolved = spec.backend;
  if (spec.model.script)  // the script's process computes; the worker only moves vectors
    resolved = kernels::backend_kind::cpu;
  if (resolved == kernels::backend_kind::auto_select)
    resolved = gpus > 0 ? kernels::backend_kind::cuda : kernels::backend_kind::cpu;
  auto ctx = std::make_shared<job_context>(job_context{
      .job = self->state.next_job,
      .spec = spec,
      .backend = resolved,
      .data = req.data,
      .model = std::move(*model),
      .map = {},
      .net = self->state.net,
      .master = {},
      .shards = {},
      .workers = {},
  });
  ctx->map = ps::shard_map::even(ctx->model.num_params(), spec.slice_size, req.shards);
  ctx->slowdown = req.slowdown;
  ctx->on_step = req.on_step;
  ctx->master = master_endpoint(ctx->job);
  for (std::uint32_t k = 0; k < req.shards; ++k) ctx->shards.push_back(shard_endpoint(ctx->job, k));
  for (std::uint32_t r = 0; r < req.workers; ++r)
    ctx->workers.push_back(worker_endpoint(ctx->job, r));

  setup_job_devices(*ctx, resolved, self->state.devices);
  // One backend per worker, on its own device where there are several, made before any actor
  // starts so a backend that cannot run fails the job cleanly.
  std::vector<std::shared_ptr<kernels::backend>> backends;
  for (std::uint32_t r = 0; r < req.workers; ++r) {
    auto be = make_worker_backend(*ctx, r, "coach");
    if (!be) return std::unexpected(be.error());
    backends.emplace_back(std::move(*be));
  }
  ++self->state.next_job;

  std::vector<float> initial;
  if (req.resume) {
    // Resumed from a checkpoint: the shards start from its state, the steps at its version.
    const auto per = scheduler::shard_optimizer(spec).state_per_param();
    if (auto ok = ps::check(*req.resume, ctx->model.num_params(), per); !ok)
      return fail(errc::invalid_argument, "job '{}': the checkpoint does not fit: {}", spec.name,
                  ok.error().message);
  } else {
    initial.resize(ctx->model.num_params());
    ctx->model.init_params(initial, spec.seed);
  }
  const std::int64_t first_step = req.resume ? req.resume->version : 0;

  auto& sys = self->home_system();
  job_actors ja;
  ja.evaluator = spawn_evaluator(sys, ctx);
  // Parts added while the job runs start here too (the master links itself to them).
  elastic_hooks hooks;
  // One process: a node name has no meaning here, and memory to warm would be this process's
  // (where the source's buffer goes over without a copy).
  hooks.add_shard = [&sys, ctx](std::uint32_t id, const ps::job_config& c, const std::string&,
                                std::uint64_t) -> result<caf::actor> {
    return spawn_added_shard(sys, ctx, id, c);
  };
  hooks.add_worker = [&sys, ctx](std::uint32_t rank, const ps::job_config& c, std::int64_t first,
                                 const std::string&) -> result<caf::actor> {
    auto be = make_worker_backend(*ctx, rank, "coach");
    if (!be) return std::unexpected(be.error());
    return spawn_added_worker(sys, ctx, rank, std::move(*be), c, first);
  };
  master_options mo;
  mo.first_epoch = req.first_epoch;
  mo.first_step = first_step;
  mo.checkpoint_due = req.checkpoint_due;
  mo.cancel_at_step = req.cancel_at_step;
  ja.master = spawn_master(sys, ctx, observer, ja.evaluator, std::move(hooks), mo);
  for (std::uint32_t k = 0; k < req.shards; ++k)
    ja.shards.push_back(req.resume ? spawn_shard(sys, ctx, k, *req.resume)
                                   : spawn_shard(sys, ctx, k, initial));
  for (std::uint32_t r = 0; r < req.workers; ++r) {
    ja.workers.push_back(spawn_worker(sys, ctx, r, backends[r], first_step));
    // The master watches its workers: one that dies leaves the job, which goes on.
    self->send(ja.master, watch_atom::value, r, ja.workers.back());
  }
  // Linked: when the scheduler stops, every actor of its jobs stops with it.
  self->link_to(ja.master);
  self->link_to(ja.evaluator);
  for (auto& a : ja.shards) self->link_to(a);
  // Workers are not linked: the master stops them when it stops (and survives their deaths).
  self->state.jobs.emplace(ctx->job, std::move(ja));
  return ctx->job;
}

caf::behavior scheduler_actor(caf::stateful_actor<scheduler_state>* self,
                              std::shared_ptr<transport> net) {
  self->state.net = std::move(net);
  // Linked actors that exit normally (finished workers) leave the scheduler running; an exit
  // message with another reason (shutdown) stops it and, through the links, every job actor.
  return {
      [self](submit_atom, job_request& req, caf::actor& observer) -> std::uint64_t {
        auto id = start_job(self, req, observer);
        if (!id) {
          caf::anon_send(observer, done_atom::value, job_outcome{id.error(), {}});
          return 0;
        }
        return *id;
      },
      [self](cancel_atom, std::uint64_t job) {
        auto it = self->state.jobs.find(job);
        if (it != self->state.jobs.end()) self->send(it->second.master, cancel_atom::value);
      },
      [self](traffic_atom) { return self->state.net->traffic(); },
  };
}

}  // namespace

caf::actor spawn_scheduler(caf::actor_system& sys, std::shared_ptr<transport> net) {
  return sys.spawn(scheduler_actor, std::move(net));
}

}  // namespace coach::actors
