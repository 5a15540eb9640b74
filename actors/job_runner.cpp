// actors/job_runner.cpp: one job's run as the cluster scheduler drives it (job_runner.hpp).
#include "actors/job_runner.hpp"
#include "common/log.hpp"

#include <algorithm>
#include <thread>

#include "actors/roles.hpp"
#include "worker/dataset_cache.hpp"

namespace coach::actors {

namespace sched = coach::scheduler;

void runner_env::send(std::uint32_t host, const control_message& m) const {
  net->send(make_control(self_ep, {host, node_agent_id}, m));
}

result<std::shared_ptr<const worker::dataset_pair>> load_job_data(const sched::job_spec& spec) {
  auto data = worker::load_dataset_shared(spec.dataset, spec.seed);
  if (!data) return std::unexpected(data.error());
  for (const auto& w : (*data)->warnings) log::warn("job '{}': {}", spec.name, w);
  if ((*data)->train.rows == 0 || (*data)->test.rows == 0)
    return fail(errc::invalid_argument, "job '{}': the data set is empty", spec.name);
  return data;
}

namespace {

/// What a resumed run's shards start from: the checkpoint as it is when it fits the model and
/// its optimizer; one from a store of schema 1 (values only) with a zero optimizer state and
/// counters, as runs resumed then. Errors: invalid_argument saying what does not fit.
result<std::shared_ptr<const ps::training_state>> resume_state(const ps::training_state& ckpt,
                                                               const sched::job_spec& spec,
                                                               std::size_t num_params) {
  if (ckpt.values.size() != num_params)
    return fail(errc::invalid_argument, "it has {} parameters, the model {}", ckpt.values.size(),
                num_params);
  const std::size_t per = sched::shard_optimizer(spec).state_per_param();
  auto s = std::make_shared<ps::training_state>(ckpt);
  if (per >= 1 && s->state_a.empty()) s->state_a.assign(num_params, 0.0f);
  if (per >= 2 && s->state_b.empty()) s->state_b.assign(num_params, 0.0f);
  if (auto ok = ps::check(*s, num_params, per); !ok) return std::unexpected(ok.error());
  return std::shared_ptr<const ps::training_state>(std::move(s));
}

/// What the run's shards start from: its checkpoint when it resumes from one, a script's
/// registered initial values when it runs from the first epoch; null: the model's seeded
/// initialization.
result<std::shared_ptr<const ps::training_state>> start_state(
    const sched::registered_job& job, const sched::job_spec& spec, std::size_t num_params,
    const worker::script_payload* script) {
  if (job.first_epoch() > 0 && job.checkpoint()) {
    auto s = resume_state(*job.checkpoint(), spec, num_params);
    if (!s) return fail(s.error().code, "its checkpoint: {}", s.error().message);
    return s;
  }
  if (!spec.model.script) return std::shared_ptr<const ps::training_state>{};
  if (!script || !script->initial) return fail(errc::internal, "its script's values are not here");
  ps::training_state registered;  // version 0: a new run
  registered.values = *script->initial;
  auto s = resume_state(registered, spec, num_params);
  if (!s) return fail(s.error().code, "its script's initial values: {}", s.error().message);
  return s;
}

}  // namespace

result<void> job_runner::launch(const runner_env& env, sched::registered_job& job,
                                const sched::launch_order& o) {
  const std::uint64_t id = job.id();
  const auto& rec = job.rec();
  auto spec = sched::parse_job_spec(rec.spec_yaml, rec.source_name, rec.base_dir);
  if (!spec) return std::unexpected(spec.error());
  if (!data) {  // resumed after a restart: load it now
    auto loaded = load_job_data(*spec);
    if (!loaded) return std::unexpected(loaded.error());
    data = std::move(*loaded);
  }
  start_job sj;
  sj.job = id;
  sj.spec_yaml = rec.spec_yaml;
  sj.source_name = rec.source_name;
  sj.base_dir = rec.base_dir;
  sj.master_host = env.self_ep.host;
  sj.worker_hosts = o.workers;
  sj.shard_hosts = o.shards;
  if (spec->model.script)
    if (auto ok = prepare_script(env, job, *spec, o); !ok) return ok;
  auto made =
      make_job_context(id, *spec, data, env.net, sj.master_host, sj.shard_hosts, sj.worker_hosts);
  if (!made) return std::unexpected(made.error());
  auto ctx = std::move(*made);
  const bool resumed = job.first_epoch() > 0 || job.state() == sched::job_state::suspended;
  // Without a checkpoint it runs from the seed, or a script's registered initial values, from
  // the first epoch (begin_run says so).
  auto initial = start_state(job, *spec, ctx->model.num_params(), script.get());
  if (!initial) return fail(initial.error().code, "job {}: {}", id, initial.error().message);
  if (*initial) {
    sj.initial = std::move(*initial);
    sj.first_step = sj.initial->version;
  }
  if (spec->model.script)  // the files and layout travel; the values go to the shards above
    sj.script = std::make_shared<const worker::script_payload>(
        worker::script_payload{script->entry, script->layout_json, nullptr, script->bundle});
  ctx_ = std::move(ctx);
  sched::run_shape shape;
  shape.model_bytes = double(ctx_->model.num_params()) * sizeof(float);
  shape.state_factor = 1.0 + double(scheduler::shard_optimizer(*spec).state_per_param());
  shape.batch_size = double(spec->batch_size);
  shape.global_batch = spec->fixed_global_batch() ? double(spec->global_batch) : 0.0;
  env.reg->shaped(job, shape, data->train.rows);
  const std::uint32_t gen = env.reg->begin_run(job, o.workers, o.shards, resumed);
  sj.run = gen;
  sj.backup_hosts = job.backups();  // placed by begin_run
  ctx_->backup_hosts = job.backups();
  for (auto h : job.hosts()) {
    const auto* n = env.nodes->find(h);
    // The scheduler's own node may not have heartbeated yet (just restarted): it is this process.
    const bool own = !n && h == env.net->host_id();
    sj.peers.push_back({h, n ? n->last.address : env.own_address,
                        n     ? n->last.public_key
                        : own ? env.net->public_key()
                              : "",
                        n ? n->last.name : ""});
  }
  spawn(env, id, gen, job.first_epoch(), sj.first_step);
  // Phase 1: every shard; phase 2 (on their acknowledgements): every worker.
  start_ = std::move(sj);
  send_phase(env, job, false);
  start_.initial.reset();  // only the shards need it; the added parts start empty
  return {};
}

namespace {

added_part to_added_part(bool worker, std::uint32_t id, const ps::job_config& c,
                         std::int64_t first_step) {
  return {worker, id, first_step, c.version, c.from_step, c.members, c.map.owners(), 0};
}

}  // namespace

void job_runner::spawn(const runner_env& env, std::uint64_t id, std::uint32_t gen,
                       std::uint32_t first, std::int64_t first_step) {
  auto me = caf::actor_cast<caf::actor>(env.self);
  auto& sys = env.self->home_system();
  // The master's observer: tags what the master reports with the job and this run.
  relay_ = sys.spawn([me, id, gen](caf::event_based_actor*) -> caf::behavior {
    auto tag = [=](auto atom, auto& x) { caf::anon_send(me, atom, id, gen, std::move(x)); };
    return {
        [=](progress_atom, sched::progress_event& p) { tag(job_progress_atom::value, p); },
        [=](epoch_atom, sched::epoch_report& e) { tag(job_epoch_atom::value, e); },
        [=](checkpoint_atom, param_snapshot& p) { tag(job_checkpoint_atom::value, p); },
        [=](done_atom, job_outcome& o) { tag(job_done_atom::value, o); },
    };
  });
  evaluator_ = spawn_evaluator(sys, ctx_);
  // Parts added while the job runs are placed by the scheduler and started by node agents.
  elastic_hooks hooks;
  hooks.add_worker = [me, id, gen](std::uint32_t rank, const ps::job_config& c,
                                   std::int64_t first_step,
                                   const std::string& node) -> result<caf::actor> {
    caf::anon_send(me, add_part_atom::value, id, gen, to_added_part(true, rank, c, first_step),
                   node);
    return caf::actor{};
  };
  hooks.add_shard = [me, id, gen](std::uint32_t k, const ps::job_config& c, const std::string& node,
                                  std::uint64_t expect_keys) -> result<caf::actor> {
    auto part = to_added_part(false, k, c, 0);
    part.expect_keys = expect_keys;
    caf::anon_send(me, add_part_atom::value, id, gen, std::move(part), node);
    return caf::actor{};
  };
  hooks.changed = [me, id, gen](const std::vector<std::uint32_t>& members,
                                const std::vector<std::uint32_t>& live) {
    caf::anon_send(me, job_layout_atom::value, id, gen, members, live);
  };
  master_options mo;
  mo.first_epoch = first;
  mo.first_step = first_step;
  mo.report_params = true;
  // Every epoch's end with the optimizer state: the registry keeps the latest for a recovery
  // or a suspend and writes one to the store every checkpoint.every_s.
  mo.checkpoint_due = [](std::uint32_t) { return true; };
  master_ = spawn_master(sys, ctx_, relay_, evaluator_, std::move(hooks), mo);
  env.net->bind(ctx_->master, master_);
}

void job_runner::stop(const runner_env& env) {
  if (ctx_) env.net->unbind(ctx_->master);
  for (auto* a : {&master_, &evaluator_, &relay_})
    if (*a) caf::anon_send_exit(*a, caf::exit_reason::user_shutdown);
  master_ = evaluator_ = relay_ = caf::actor{};
  ctx_.reset();
  start_ = start_job{};
  pending_.clear();
  have_script_.clear();
  adds_.clear();
}

result<void> job_runner::prepare_script(const runner_env& env, sched::registered_job& job,
                                        sched::job_spec& spec, const sched::launch_order& o) {
  if (!script) return fail(errc::internal, "job {}: its script's model is not here", job.id());
  // The evaluator's process shares this node's CPUs with the job's workers here.
  const auto here = std::count(o.workers.begin(), o.workers.end(), env.self_ep.host);
  const std::uint32_t cpus =
      env.cpus ? env.cpus : std::max(1u, std::thread::hardware_concurrency());
  const int threads = int(std::max<std::uint32_t>(1, cpus / std::uint32_t(here + 1)));
  auto model =
      worker::open_submitted(*script, script->initial, *spec.model.script, spec.seed, job.id(),
                             env.script, threads, coach::format("job-{}-evaluator", job.id()),
                             spec.function ? spec.function->memory_mb << 20 : 0);
  if (!model) return fail(model.error().code, "job {}: {}", job.id(), model.error().message);
  if (auto ok = sched::apply_script_tables(spec, (*model)->layout); !ok)
    return fail(ok.error().code, "job {}: {}", job.id(), ok.error().message);
  spec.model.external = std::move(*model);
  return {};
}

void job_runner::send_start(const runner_env& env, std::uint32_t host, start_job msg) {
  if (have_script_.contains(host)) msg.script.reset();
  env.send(host, msg);
}

void job_runner::send_phase(const runner_env& env, const sched::registered_job& job, bool workers) {
  start_.workers_phase = workers;
  const auto& of = workers ? start_.worker_hosts : start_.shard_hosts;
  auto backup_here = [&](std::uint32_t h) {
    return !workers &&
           std::any_of(start_.backup_hosts.begin(), start_.backup_hosts.end(),
                       [&](const auto& c) { return std::find(c.begin(), c.end(), h) != c.end(); });
  };
  for (auto h : job.hosts()) {
    if (std::find(of.begin(), of.end(), h) == of.end() && !backup_here(h)) continue;
    pending_.insert(h);
    send_start(env, h, start_);
  }
}

void job_runner::add(const runner_env& env, sched::registered_job& job, added_part part,
                     std::string node) {
  adds_.push_back({std::move(part), std::move(node), 0, {}, std::nullopt, false});
  next_add(env, job);
}

bool job_runner::has_part(const sched::registered_job& job, std::uint32_t host) const {
  auto in = [&](const auto& v) { return std::find(v.begin(), v.end(), host) != v.end(); };
  auto in_added = [&](const std::vector<part_host>& v) {
    return std::any_of(v.begin(), v.end(), [&](const part_host& p) {
      return p.host == host ||
             std::find(p.backups.begin(), p.backups.end(), host) != p.backups.end();
    });
  };
  return job.hosts().contains(host) &&
         (in(start_.shard_hosts) || in(start_.worker_hosts) || in_added(start_.added_shards) ||
          in_added(start_.added_workers) ||
          std::any_of(start_.backup_hosts.begin(), start_.backup_hosts.end(), in));
}

void job_runner::next_add(const runner_env& env, sched::registered_job& job) {
  while (!adds_.empty() && !adds_.front().sent && pending_.empty()) {
    auto& a = adds_.front();
    auto host = env.reg->place(job, a.part.worker, a.node, *env.exec);
    if (!host) {
      // Listed anyway: the node lists stay indexed by rank and shard id.
      env.reg->part_unplaced(job, a.part.worker);
      caf::anon_send(master_, ready_atom::value, a.part.worker, a.part.id, host.error().message);
      adds_.pop_front();
      continue;
    }
    a.host = *host;
    a.sent = true;
    // An added shard of a job with replicas gets its backups (placed here, started with it).
    auto backups = env.reg->part_placed(job, a.part.worker, a.part.id, a.host);
    (a.part.worker ? start_.added_workers : start_.added_shards)
        .push_back({a.part.id, a.host, backups});
    std::vector<std::uint32_t> hosts = backups;
    hosts.push_back(a.host);
    for (auto h : hosts)
      if (std::none_of(start_.peers.begin(), start_.peers.end(),
                       [&](const auto& p) { return p.host == h; }))
        start_.peers.push_back({h, env.nodes->find(h)->last.address,
                                env.nodes->find(h)->last.public_key,
                                env.nodes->find(h)->last.name});
    ctx_->added->place(a.part.worker, a.part.id, a.host, backups);  // the master's view
    // Every node that runs a part of the job hears of it (the new one included).
    for (auto h : job.hosts())
      if (has_part(job, h)) a.pending.insert(h);
    start_job msg = start_;
    msg.start = a.part;
    for (auto h : a.pending) send_start(env, h, msg);
    std::string where = coach::format("'{}'", env.nodes->name(a.host));
    for (std::size_t i = 0; i < backups.size(); ++i)
      where += coach::format("{}'{}'",
                             i                    ? ", "
                             : backups.size() > 1 ? ", its backups on "
                                                  : ", its backup on ",
                             env.nodes->name(backups[i]));
    log::info("job {}: {} {} goes to {}", job.id(), a.part.worker ? "worker" : "shard", a.part.id,
              where);
  }
}

result<job_runner::answer> job_runner::on_reply(const runner_env& env, sched::registered_job& job,
                                                std::uint32_t from, const command_reply& r) {
  // A node that started its part holds the script's files for the run; one that failed may not.
  if (r.failure)
    have_script_.erase(from);
  else if (start_.script)
    have_script_.insert(from);
  if (pending_.empty() && !adds_.empty() && adds_.front().sent) {
    auto& a = adds_.front();
    if (r.failure && !a.failure) a.failure = r.failure;
    if (!a.pending.erase(from) || !a.pending.empty()) return answer::nothing;
    caf::anon_send(master_, ready_atom::value, a.part.worker, a.part.id,
                   a.failure ? a.failure->message : std::string{});
    if (a.failure) env.reg->part_failed(job, a.part.worker, a.part.id);
    adds_.pop_front();
    next_add(env, job);
    return answer::nothing;
  }
  if (r.failure) return std::unexpected(*r.failure);
  if (!pending_.erase(from) || !pending_.empty()) return answer::nothing;
  if (!start_.workers_phase) {
    send_phase(env, job, true);
    return answer::nothing;
  }
  env.reg->started(job);
  next_add(env, job);  // parts asked for while the last workers were starting
  return answer::started;
}

}  // namespace coach::actors
