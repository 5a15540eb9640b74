// scheduler/job_registry.cpp: the cluster scheduler's jobs and their life (job_registry.hpp).
#include "scheduler/job_registry.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <tuple>

#include "common/format.hpp"
#include "common/json.hpp"
#include "common/log.hpp"
#include "scheduler/perf_tracker.hpp"
#include "scheduler/placement.hpp"
#include "scheduler/resource_pool.hpp"

namespace coach::scheduler {

// --- the registry -------------------------------------------------------------------------------

resources worker_cost(const job_record& r) {
  return {r.gpus_per_worker, 1.0, 0};
}
resources shard_cost(const job_record&) {
  return {0, 1.0, 0};
}

job_registry::job_registry(std::shared_ptr<job_store> store, const node_table& nodes,
                           const clock_source& wall, std::uint32_t self_host, log_sink log)
    : store_(std::move(store)),
      nodes_(nodes),
      wall_(wall),
      self_host_(self_host),
      log_(std::move(log)) {
  if (!log_) log_ = [](const std::string&) {};
}

template <class T>
void job_registry::logged(const result<T>& r, const char* what) {
  // The scheduler goes on (the job runs; only its record is behind).
  if (r) return;
  if (auto suffix = store_errors_->allow())
    log_(coach::format("job store: {}: {}{}", what, r.error().message, *suffix));
}

result<std::size_t> job_registry::load() {
  auto all = store_->jobs();
  if (!all) return std::unexpected(all.error());
  for (auto& rec : *all) resume(std::move(rec));
  return all->size();
}

registered_job& job_registry::resume(job_record rec) {
  const std::uint64_t id = rec.id;
  registered_job& job = jobs_[id];
  auto& st = job.status;
  st.job = id;
  st.name = rec.name;
  st.epochs_total = std::uint32_t(rec.epochs_total);
  st.test_accuracy = std::nan("");
  st.workers = std::uint32_t(rec.workers);
  st.shards = std::uint32_t(rec.shards);
  job.state = rec.state;
  job.state_since = rec.state_since;
  if (auto epochs = store_->epochs(id); epochs) {
    for (const auto& e : *epochs) {
      st.epoch_samples.push_back(e.samples);
      st.epoch_seconds.push_back(e.seconds);
      st.epoch_accuracy.push_back(e.test_accuracy);
      st.test_accuracy = e.test_accuracy;
    }
  }
  st.epochs_done = std::uint32_t(rec.epochs_done);
  // Its data set's rows; a store of schema 2 did not keep them: the most an epoch trained.
  st.samples_epoch = rec.samples_per_epoch;
  if (st.samples_epoch == 0 && !st.epoch_samples.empty())
    st.samples_epoch = *std::ranges::max_element(st.epoch_samples);
  st.recoveries_lost_s = rec.recoveries_lost_s;
  st.failovers = std::uint32_t(std::max(rec.failovers, 0));
  st.resumes = std::uint32_t(std::max(rec.resumes, 0));
  st.state = rec.state == job_state::running || rec.state == job_state::suspended
                 ? job_state::queued
                 : rec.state;
  if (rec.state == job_state::failed || rec.state == job_state::cancelled) st.error = rec.message;
  if (auto spec = parse_job_spec(rec.spec_yaml, rec.source_name, rec.base_dir)) {
    job.placement = spec->placement;
    job.store_every_s = spec->checkpoint.store_every_s();
    job.replicas = spec->replicas;
  }
  job.stored_at = now();
  if (rec.state == job_state::running || rec.state == job_state::suspended) {
    // It ran under the previous process (or was suspended): it restarts from its checkpoint.
    // Nodes that ran its parts are told to stop them first (when they heartbeat).
    auto ckpt = store_->checkpoint(id);
    logged(ckpt, "cannot read a checkpoint");
    if (ckpt && *ckpt) {
      job.first_epoch = (*ckpt)->epoch + 1;
      job.checkpoint_epoch = (*ckpt)->epoch;
      job.checkpoint_at = (*ckpt)->at;
      job.checkpoint = std::make_shared<const ps::training_state>(std::move((*ckpt)->state));
    }
    st.epochs_done = job.first_epoch;
    st.epoch_samples.resize(std::min<std::size_t>(st.epoch_samples.size(), job.first_epoch));
    st.epoch_seconds.resize(st.epoch_samples.size());
    st.epoch_accuracy.resize(st.epoch_samples.size());
    job.stop_unsent.insert(rec.worker_nodes.begin(), rec.worker_nodes.end());
    job.stop_unsent.insert(rec.shard_nodes.begin(), rec.shard_nodes.end());
    job.stop_unsent.erase(self_host_);  // its parts here died with the old process
    job.stopping = job.stop_unsent;
    job.stops_asked_at = now();
    if (job.first_epoch >= std::uint32_t(rec.epochs_total)) {
      // Killed between its last checkpoint and its end: nothing is left to train.
      st.state = job.state = job_state::succeeded;
      logged(store_->set_state(id, job.state, now()), "cannot record a state");
    } else {
      if (rec.state == job_state::running) {
        job.state = job_state::suspended;
        job.state_since = now();
        logged(store_->set_state(id, job.state, job.state_since,
                                 coach::format("the scheduler restarted; resumes at epoch {}",
                                               job.first_epoch + 1)),
               "cannot record a state");
      }
      // Where it resumes, and why not where it was when that is not the same (issue 37: a
      // store that could hold no checkpoint for a while sent a job back 9,944 epochs silently).
      std::string why;
      const auto reached = std::uint32_t(std::max(rec.epochs_done, 0));
      if (!job.checkpoint && reached > 0)
        why = coach::format(
            ": no checkpoint of it was stored, so its {} epoch(s) are trained "
            "again",
            reached);
      else if (job.checkpoint && reached > job.first_epoch)
        why = coach::format(
            ": its last stored checkpoint is after epoch {}, so epochs {}-{} are "
            "trained again",
            job.first_epoch, job.first_epoch + 1, reached);
      note(job, coach::format("job {} '{}' resumes at epoch {} of {}{}", id, st.name,
                              job.first_epoch + 1, st.epochs_total, why));
    }
  }
  job.rec = std::move(rec);
  return job;
}

result<job_record> job_registry::admit(const job_spec& spec, const submission& s) const {
  auto pick = [&](std::uint32_t asked, const count_range& range, const char* what) -> result<int> {
    if (asked == 0) return range.initial;
    if (int(asked) < range.min || int(asked) > range.max)
      return fail(errc::invalid_argument, "--{} {} is outside the job's {} range [{}, {}]", what,
                  asked, what, range.min, range.max);
    return int(asked);
  };
  auto workers = pick(s.workers, spec.workers, "workers");
  if (!workers) return std::unexpected(workers.error());
  auto shards = pick(s.shards, spec.shards, "shards");
  if (!shards) return std::unexpected(shards.error());

  job_record rec;
  rec.name = spec.name;
  rec.model = spec.name;  // jobs of one name share a performance curve (as a rule, one model)
  rec.spec_yaml = s.spec_yaml;
  rec.source_name = s.source_name;
  rec.base_dir = s.base_dir;
  rec.submitted = now();
  rec.elastic = spec.workers.min < spec.workers.max || spec.shards.min < spec.shards.max;
  rec.min_workers = spec.workers.min;
  rec.max_workers = spec.workers.max;
  rec.requested_workers = *workers;
  rec.min_shards = spec.shards.min;
  rec.max_shards = spec.shards.max;
  rec.requested_shards = *shards;
  rec.gpus_per_worker = spec.gpus_per_worker;
  rec.epochs_total = spec.epochs;
  rec.state_since = rec.submitted;

  const auto view = cluster();
  if (view.nodes.empty())
    return fail(errc::resource_exhausted, "no live node to run job '{}'", spec.name);
  cluster_view empty = view;
  for (auto& n : empty.nodes) n.free = n.total;
  auto fits = [&](int w, int p) {
    resource_pool pool(empty);
    std::vector<std::uint32_t> wn, sn;
    return pool.take_all(worker_cost(rec), w, shard_cost(rec), p, wn, sn);
  };
  if (!fits(rec.min_workers, rec.min_shards)) {
    double cpus = 0;
    for (const auto& n : view.nodes) cpus += n.total.cpus;
    if (spec.gpus_per_worker > 0 &&
        std::none_of(view.nodes.begin(), view.nodes.end(),
                     [&](const auto& n) { return n.total.gpus >= spec.gpus_per_worker; }))
      return fail(errc::resource_exhausted,
                  "job '{}' needs {} free GPU(s) per worker and no live node has them", spec.name,
                  spec.gpus_per_worker);
    return fail(errc::resource_exhausted,
                "job '{}' needs at least {} worker(s) and {} shard(s) (1 CPU each, {} GPU(s) per "
                "worker); the live nodes have {} CPU(s) and {} GPU(s) in all",
                spec.name, rec.min_workers, rec.min_shards, spec.gpus_per_worker, cpus,
                view.total_gpus());
  }
  if (!fits(rec.requested_workers, rec.requested_shards)) {
    // A policy that runs jobs at their request would otherwise never start it.
    const int asked_w = rec.requested_workers, asked_s = rec.requested_shards;
    bool found = false;
    for (int w = asked_w; w >= rec.min_workers && !found; --w)
      for (int p = asked_s; p >= rec.min_shards && !found; --p)
        if (fits(w, p)) {
          rec.requested_workers = w;
          rec.requested_shards = p;
          found = true;
        }
    log_(
        coach::format("job '{}' asks for {} worker(s) and {} shard(s), more than the cluster "
                      "has; it asks for {} and {}",
                      spec.name, asked_w, asked_s, rec.requested_workers, rec.requested_shards));
  }
  return rec;
}

result<registered_job*> job_registry::add(job_record rec, const job_spec& spec,
                                          std::uint64_t samples_epoch, std::uint64_t token) {
  rec.samples_per_epoch = samples_epoch;
  auto id = store_->add_job(rec, token);
  if (!id) return std::unexpected(id.error());
  rec.id = *id;
  registered_job& job = jobs_[*id];
  job.placement = spec.placement;
  job.store_every_s = spec.checkpoint.store_every_s();
  job.replicas = spec.replicas;
  job.stored_at = now();
  job.state_since = rec.submitted;
  auto& st = job.status;
  st.job = *id;
  st.name = rec.name;
  st.state = job_state::queued;
  st.epochs_total = std::uint32_t(rec.epochs_total);
  st.test_accuracy = std::nan("");
  st.samples_epoch = samples_epoch;
  note(job, coach::format("job {} '{}' submitted ({} worker(s), {} shard(s) asked)", *id, rec.name,
                          rec.requested_workers, rec.requested_shards));
  job.rec = std::move(rec);
  return &job;
}

registered_job* job_registry::find(std::uint64_t id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

registered_job* job_registry::current(std::uint64_t id, std::uint32_t generation) {
  auto* job = find(id);
  return job && job->launched && job->generation == generation ? job : nullptr;
}

result<registered_job*> job_registry::running_job(std::uint64_t id) {
  auto* job = find(id);
  if (!job) return fail(errc::not_found, "no job {}", id);
  if (job->over())
    return fail(errc::invalid_argument, "job {} already {}", id, to_string(job->state));
  if (!job->launched)
    return fail(errc::invalid_argument, "job {} is waiting for resources; it has no workers", id);
  if (job->status.state != job_state::running)
    return fail(errc::invalid_argument, "job {} is still starting; try again in a moment", id);
  return job;
}

std::map<std::uint32_t, resources> job_registry::reserved() const {
  std::map<std::uint32_t, resources> out;
  auto add = [&](std::uint32_t h, const resources& r) {
    out[h].gpus += r.gpus;
    out[h].cpus += r.cpus;
  };
  for (const auto& [id, job] : jobs_) {
    if (!job.launched || job.over()) continue;
    for (auto h : job.alloc.worker_hosts()) add(h, worker_cost(job.rec));
    for (auto h : job.alloc.shard_hosts()) add(h, shard_cost(job.rec));
  }
  return out;
}

// --- decisions ----------------------------------------------------------------------------------

orders job_registry::decide(policy_holder& policy, const executor& exec, rebalancer* rebal,
                            const std::function<bool(std::uint64_t)>& busy) {
  orders out;
  const auto view = cluster();
  // The views point into `lists`, which outlives the decide() call.
  std::vector<job_view> views;
  std::vector<std::vector<std::uint32_t>> lists;
  lists.reserve(2 * jobs_.size());
  for (auto& [id, job] : jobs_) {
    if (!job.may_start() && !(job.launched && !job.over())) continue;
    job_view v;
    const auto& r = job.rec;
    v.id = id;
    v.state = job.launched ? job_state::running : job.state;
    v.submitted = at_seconds(r.submitted);
    v.state_since = at_seconds(job.state_since);
    v.model = r.model;
    v.elastic = r.elastic;
    v.min_workers = r.min_workers;
    v.max_workers = r.max_workers;
    v.requested_workers = r.requested_workers;
    v.min_shards = r.min_shards;
    v.max_shards = r.max_shards;
    v.requested_shards = r.requested_shards;
    v.per_worker = worker_cost(r);
    v.per_shard = shard_cost(r);
    if (job.launched) {
      const auto& w = lists.emplace_back(job.alloc.worker_hosts());
      const auto& s = lists.emplace_back(job.alloc.shard_hosts());
      v.workers = int(w.size());
      v.shards = int(s.size());
      v.worker_nodes = w;
      v.shard_nodes = s;
    }
    v.epochs_total = double(r.epochs_total);
    const auto& st = job.status;
    const double part = st.samples_epoch ? double(st.samples_done) / double(st.samples_epoch) : 0.0;
    v.epochs_done = std::min(v.epochs_total, double(st.epochs_done) + std::min(part, 0.99));
    views.push_back(v);
  }
  if (views.empty()) return out;
  const auto d = policy.decide(view, views, wall_.now());
  resource_pool pool(view);
  const std::string name = policy.name();
  for (const auto& a : d.actions) {
    auto* job = find(a.job);
    auto v = std::find_if(views.begin(), views.end(), [&](const auto& x) { return x.id == a.job; });
    if (!job || v == views.end()) continue;
    log_(coach::format("policy {}: {}", name, to_string(a)));
    switch (a.kind) {
      case action::kind_type::start:
        start(*job, *v, a, pool, exec, out);
        break;
      case action::kind_type::resize:
        resize(*job, *v, a, pool, exec, out);
        break;
      case action::kind_type::suspend:
        suspend(*job, pool, name, out);
        break;
    }
  }
  if (rebal) rebalance(pool, *rebal, busy, out);  // what the policy left free
  return out;
}

void job_registry::start(registered_job& job, const job_view& v, const action& a,
                         resource_pool& pool, const executor& exec, orders& out) {
  if (!job.may_start()) return;
  launch_order o{job.status.job, {}, {}};
  auto used = exec.apply(pool, v, a, job.placement, o.workers, o.shards);
  if (!used) {
    note(job,
         coach::format("job {} does not fit any more; it waits ({})", o.job, used.error().message));
    return;
  }
  job.status.placement = std::string(*used);
  out.launches.push_back(std::move(o));
}

void job_registry::resize(registered_job& job, const job_view& v, const action& a,
                          resource_pool& pool, const executor& exec, orders& out) {
  if (!job.running() || job.cancel_requested) return;  // starting or ending: decided again later
  const int w0 = job.alloc.workers(), s0 = job.alloc.shards();
  if (a.workers == w0 && a.shards == s0) return;
  auto w = job.alloc.worker_hosts();
  auto s = job.alloc.shard_hosts();
  if (auto used = exec.apply(pool, v, a, job.placement, w, s); !used) {
    log_(coach::format("job {}: {}", job.status.job, used.error().message));
    return;
  }
  resize_order o{job.status.job, job.generation, 0, 0, job.alloc};
  job.alloc.follow(w, s);
  const int w1 = job.alloc.workers(), s1 = job.alloc.shards();
  o.workers = std::uint32_t(w1 != w0 ? w1 : 0);
  o.shards = std::uint32_t(s1 != s0 ? s1 : 0);
  record_allocation(job);
  out.resizes.push_back(std::move(o));
}

void job_registry::suspend(registered_job& job, resource_pool& pool, const std::string& policy,
                           orders& out) {
  if (!job.launched || job.over()) return;
  for (auto h : job.alloc.worker_hosts())
    if (pool.contains(h)) pool.give(h, worker_cost(job.rec));
  for (auto h : job.alloc.shard_hosts())
    if (pool.contains(h)) pool.give(h, shard_cost(job.rec));
  out.stops.push_back({job.status.job, job.hosts});
  stop_to_resume(job, job.hosts, coach::format("suspended by {}", policy));
}

void job_registry::stop_to_resume(registered_job& job, std::set<std::uint32_t> stopping,
                                  const std::string& why) {
  store_checkpoint(job);  // a restart of the scheduler while it waits resumes from it too
  job.stopping = std::move(stopping);  // it may start again once every one of them answered
  job.stops_asked_at = now();
  stop_run(job);
  job.first_epoch = job.checkpoint ? job.checkpoint_epoch + 1 : 0;
  auto& st = job.status;
  st.epochs_done = job.first_epoch;
  st.epoch_samples.resize(std::min<std::size_t>(st.epoch_samples.size(), job.first_epoch));
  st.epoch_seconds.resize(st.epoch_samples.size());
  st.epoch_accuracy.resize(st.epoch_samples.size());
  st.state = job_state::queued;
  st.samples_done = 0;
  job.state = job_state::suspended;
  job.state_since = now();
  logged(store_->set_state(st.job, job.state, job.state_since,
                           coach::format("{}; resumes at epoch {}", why, job.first_epoch + 1)),
         "cannot record a state");
  record_allocation(job);
}

void job_registry::rebalance(resource_pool& pool, rebalancer& rebal,
                             const std::function<bool(std::uint64_t)>& busy, orders& out) {
  for (auto& [id, job] : jobs_) {
    const auto& st = job.status;
    if (!job.running() || job.cancel_requested || st.placement != "dltap") continue;
    if ((busy && busy(id)) || !job.alloc.planned_workers.empty() ||
        !job.alloc.planned_shards.empty() || job.alloc.shard_at.empty() ||
        st.samples_per_second <= 0 || job.batch_size <= 0)
      continue;  // a change in flight, or no step rate yet
    rebalance_job r;
    r.job = id;
    r.worker_nodes = job.alloc.worker_hosts();
    std::vector<std::uint32_t> shard_ids;
    for (const auto& [k, h] : job.alloc.shard_at) {
      shard_ids.push_back(k);
      r.shard_nodes.push_back(h);
    }
    // The shards split the model evenly (ps::shard_map::even; changes keep it near even).
    r.shard_bytes.assign(r.shard_nodes.size(), job.model_bytes / double(r.shard_nodes.size()));
    r.state_factor = job.state_factor;
    // A fixed global batch is the step's; otherwise each worker adds its batch.
    const double step_samples =
        job.global_batch > 0 ? job.global_batch : job.batch_size * double(r.worker_nodes.size());
    r.steps_per_s = st.samples_per_second / step_samples;
    const double total = double(st.epochs_total) * double(st.samples_epoch);
    const double done = double(st.epochs_done) * double(st.samples_epoch) + double(st.samples_done);
    r.seconds_left = std::max(0.0, total - done) / st.samples_per_second;
    r.per_shard = shard_cost(job.rec);
    auto m = rebal.propose(r, pool);
    if (!m) continue;
    const std::uint32_t shard = shard_ids[m->shard];
    char gain[160];
    std::snprintf(gain, sizeof gain,
                  "saves %.1f MB/s between hosts, %.1f MB over the %.0f s left, for %.3f MB moved",
                  m->saved_bytes_per_s / 1e6, m->saved_bytes / 1e6, r.seconds_left,
                  m->moved_bytes / 1e6);
    note(job, coach::format("dltap: job {}: shard {} moves from '{}' to '{}' ({})", id, shard,
                            nodes_.name(m->from), nodes_.name(m->to), gain));
    rebal.moved(id);
    pool.give(m->from, r.per_shard);
    pool.take_on(m->to, r.per_shard);
    out.moves.push_back({id, shard, nodes_.name(m->to), *m});
  }
}

// --- a run --------------------------------------------------------------------------------------

std::uint32_t job_registry::begin_run(registered_job& job, std::span<const std::uint32_t> workers,
                                      std::span<const std::uint32_t> shards, bool resumed) {
  const std::uint64_t id = job.status.job;
  ++job.generation;
  job.launched = true;
  job.alloc.assign(workers, shards);
  job.hosts = {self_host_};
  job.hosts.insert(workers.begin(), workers.end());
  job.hosts.insert(shards.begin(), shards.end());
  job.shard_hosts = {shards.begin(), shards.end()};
  place_backups_of(job, shards);
  auto& st = job.status;
  st.state = job_state::queued;  // until every part started
  st.workers = std::uint32_t(workers.size());
  st.shards = std::uint32_t(shards.size());
  st.samples_done = 0;
  st.error.clear();
  st.error_code = 0;
  st.worker_nodes.clear();
  st.shard_nodes.clear();
  for (auto h : workers) st.worker_nodes.push_back(nodes_.name(h));
  for (auto h : shards) st.shard_nodes.push_back(nodes_.name(h));
  if (resumed) {
    ++st.resumes;
    record_history(job);
  }
  job.state = job_state::running;
  job.state_since = job.started = now();
  logged(store_->set_state(
             id, job.state, job.state_since,
             resumed ? coach::format("resumed at epoch {}", job.first_epoch + 1) : std::string{}),
         "cannot record a state");
  record_allocation(job);
  note(job, coach::format("job {} '{}': {} worker(s), {} shard(s) over {} host(s){}", id, st.name,
                          workers.size(), shards.size(), job.hosts.size(),
                          resumed ? coach::format(", from epoch {}", job.first_epoch + 1) : ""));
  return job.generation;
}

void job_registry::place_backups_of(registered_job& job, std::span<const std::uint32_t> shards) {
  job.chains.clear();
  job.backups.clear();
  if (job.replicas <= 1) return;
  std::vector<std::uint32_t> candidates;
  for (const auto& [host, n] : nodes_.nodes())
    if (nodes_.usable(host)) candidates.push_back(host);
  job.backups = place_backups(shards, job.replicas - 1, candidates);
  for (std::uint32_t k = 0; k < job.backups.size(); ++k) {
    const auto& b = job.backups[k];
    job.chains.push_back({0, std::uint32_t(b.size())});
    job.hosts.insert(b.begin(), b.end());
    if (b.size() + 1 < job.replicas)
      note(job,
           coach::format("job {}: shard {} runs with {} of its {} backup(s): {} node(s) usable",
                         job.status.job, k, b.size(), job.replicas - 1, candidates.size()));
  }
}

void job_registry::started(registered_job& job) {
  job.status.state = job_state::running;
  job.started = now();
}

void job_registry::restore(std::uint64_t id, std::uint32_t generation, const allocation& before) {
  auto* job = current(id, generation);
  if (!job || job->over()) return;
  job->alloc = before;
  record_allocation(*job);
}

void job_registry::rescaled(registered_job& job, std::uint32_t workers, std::uint32_t shards) {
  job.alloc.trim(workers, shards);
  record_allocation(job);
}

void job_registry::stop_run(registered_job& job) {
  job.launched = false;
  ++job.generation;
  job.alloc.clear();
}

std::set<std::uint32_t> job_registry::end(registered_job& job, job_state state,
                                          std::optional<coach::error> why) {
  if (job.over()) return {};
  auto& st = job.status;
  st.state = state;
  if (why) {
    st.error = why->message;
    st.error_code = std::uint16_t(why->code);
  }
  if (job.launched) st.seconds = now() - job.started;
  auto hosts = std::move(job.hosts);
  job.hosts.clear();
  stop_run(job);
  job.checkpoint.reset();
  job.state = state;
  job.state_since = now();
  logged(store_->set_state(st.job, state, job.state_since, why ? why->message : ""),
         "cannot record a state");
  record_allocation(job);
  note(job, coach::format("job {} '{}' {}{}{}", st.job, st.name, to_string(state), why ? ": " : "",
                          why ? why->message : ""));
  return hosts;
}

result<registered_job*> job_registry::cancel(std::uint64_t id) {
  auto* job = find(id);
  if (!job) return fail(errc::not_found, "no job {}", id);
  if (job->over())
    return fail(errc::invalid_argument, "job {} already {}", id, to_string(job->state));
  job->cancel_requested = true;
  return job;
}

result<std::uint32_t> job_registry::place(registered_job& job, bool worker, const std::string& name,
                                          const executor& exec) {
  if (!name.empty()) return nodes_.by_name(name);
  auto& planned = worker ? job.alloc.planned_workers : job.alloc.planned_shards;
  while (!planned.empty()) {
    const auto h = planned.front();
    planned.pop_front();
    if (nodes_.usable(h)) return h;
  }
  placement_request req;
  req.job = job.status.job;
  req.per_worker = worker_cost(job.rec);
  req.per_shard = shard_cost(job.rec);
  req.worker_nodes = job.alloc.worker_hosts();
  req.shard_nodes = job.alloc.shard_hosts();
  resource_pool pool(cluster());
  if (auto h = exec.place_one(pool, req, worker, job.placement)) return *h;
  std::map<std::uint32_t, std::size_t> count;
  for (auto h : worker ? req.worker_nodes : req.shard_nodes) ++count[h];
  const node_entry* best = nullptr;
  auto key = [&](const node_entry* e) {
    return std::tuple(count[e->last.host], e->last.parts_running, e->last.name);
  };
  for (const auto& [host, n] : nodes_.nodes())
    if (nodes_.usable(host) && (!best || key(&n) < key(best))) best = &n;
  if (!best) return fail(errc::resource_exhausted, "no live node to run a new part");
  return best->last.host;
}

std::vector<std::uint32_t> job_registry::part_placed(registered_job& job, bool worker,
                                                     std::uint32_t id, std::uint32_t host) {
  // A shard it empties is dropped by layout() when the change takes effect.
  (worker ? job.alloc.worker_at : job.alloc.shard_at)[id] = host;
  job.hosts.insert(host);
  if (!worker) job.shard_hosts.insert(host);
  (worker ? job.status.worker_nodes : job.status.shard_nodes).push_back(nodes_.name(host));
  record_allocation(job);
  note(job,
       coach::format("job {}: {} {} placed on '{}'", job.status.job, worker ? "worker" : "shard",
                     id, nodes_.name(host)),
       false);
  return worker ? std::vector<std::uint32_t>{} : place_added_backups(job, id, host);
}

std::vector<std::uint32_t> job_registry::place_added_backups(registered_job& job, std::uint32_t id,
                                                             std::uint32_t host) {
  if (job.replicas <= 1) return {};
  std::vector<std::uint32_t> candidates, held;
  for (const auto& [h, n] : nodes_.nodes())
    if (nodes_.usable(h)) candidates.push_back(h);
  for (const auto& [k, h] : job.alloc.shard_at)
    if (k != id) held.push_back(h);
  for (std::uint32_t k = 0; k < job.chains.size(); ++k)
    for (auto i = job.chains[k].head + 1; i <= job.chains[k].tail; ++i)  // the head: shard_at
      held.push_back(job.backups[k][i - 1]);
  const std::uint32_t primary[] = {host};
  auto b = std::move(place_backups(primary, job.replicas - 1, candidates, held)[0]);
  if (job.backups.size() <= id) job.backups.resize(id + 1);
  if (job.chains.size() <= id) job.chains.resize(id + 1);
  job.backups[id] = b;
  job.chains[id] = {0, std::uint32_t(b.size())};
  job.hosts.insert(b.begin(), b.end());
  if (b.size() + 1 < job.replicas)
    note(job, coach::format("job {}: shard {} runs with {} of its {} backup(s): {} node(s) usable",
                            job.status.job, id, b.size(), job.replicas - 1, candidates.size()));
  return b;
}

void job_registry::part_failed(registered_job& job, bool worker, std::uint32_t id) {
  (worker ? job.alloc.worker_at : job.alloc.shard_at).erase(id);
  record_allocation(job);
}

bool job_registry::layout(registered_job& job, std::span<const std::uint32_t> members,
                          std::span<const std::uint32_t> live) {
  note(job,
       coach::format("job {}: a change is in effect: {} worker(s), {} shard(s)", job.status.job,
                     members.size(), live.size()),
       false);
  if (job.alloc.keep(members, live) == 0) return false;
  // A dropped shard's backups hold nothing the job needs: no longer part of a chain.
  for (std::uint32_t k = 0; k < job.chains.size(); ++k)
    if (!job.alloc.shard_at.contains(k)) job.chains[k] = {};
  record_allocation(job);
  return true;
}

void job_registry::progress(registered_job& job, const progress_event& p) {
  auto& st = job.status;
  st.epochs_done = p.epoch;
  st.samples_done = p.samples_done;
  st.samples_epoch = p.samples_total;
  st.loss = p.train_loss;
  st.samples_per_second = p.samples_per_s;
  st.workers = p.workers;
  st.shards = p.shards;
  st.changes_done = p.changes_done;
  if (p.invocations) st.invocations = p.invocations;
}

void job_registry::epoch(registered_job& job, const epoch_report& e, perf_model& model) {
  const std::uint64_t id = job.status.job;
  auto& st = job.status;
  st.epochs_done = e.epoch + 1;
  // Epochs are reported in order, each once (a rerun after a recovery replaces from its first):
  // a gap means an epoch's report was lost, said so rather than hidden in the history.
  if (e.epoch > st.epoch_samples.size())
    log::warn("job {}: epoch {} reported after {} epoch record(s): a report is missing", id,
              e.epoch + 1, st.epoch_samples.size());
  st.epoch_samples.resize(std::min<std::size_t>(st.epoch_samples.size(), e.epoch));
  st.epoch_samples.push_back(e.samples);
  st.epoch_seconds.resize(st.epoch_samples.size() - 1);
  st.epoch_seconds.push_back(e.seconds);
  st.epoch_accuracy.resize(st.epoch_samples.size() - 1);
  st.epoch_accuracy.push_back(e.test_accuracy);
  st.test_accuracy = e.test_accuracy;
  st.samples_per_second = e.samples_per_s;
  st.loss = e.train_loss;
  // Progress comes at most every 200 ms: a job whose last change came after its last progress
  // event would otherwise end showing the allocation before it.
  st.workers = e.workers;
  st.shards = e.shards;
  job.curve.resize(std::min<std::size_t>(job.curve.size(), e.epoch));  // a rerun replaces
  job.curve.push_back(e);
  note_epoch(job, coach::format("job {}: epoch {}/{}: train loss {:.4f}, test accuracy {:.4f}, "
                                "{:.2f} s, {} worker(s), {} shard(s)",
                                id, e.epoch + 1, st.epochs_total, e.train_loss, e.test_accuracy,
                                e.seconds, e.workers, e.shards));
  const int w = int(e.workers), p = int(e.shards);
  if (!job.perf) job.perf.emplace(id, job.rec.model);
  const auto predicted = job.perf->epoch(e, model);
  epoch_record rec;
  rec.epoch = e.epoch;
  rec.at = now();
  rec.workers = w;
  rec.shards = p;
  rec.seconds = e.seconds;
  rec.samples = e.samples;
  rec.train_loss = e.train_loss;
  rec.test_loss = e.test_loss;
  rec.test_accuracy = e.test_accuracy;
  rec.predicted_seconds = predicted;
  logged(store_->add_epoch(id, rec), "cannot record an epoch");
  if (job.held_checkpoint && job.held_checkpoint->first < st.epochs_done) {
    auto [at, values] = std::move(*job.held_checkpoint);
    job.held_checkpoint.reset();
    checkpoint(job, at, std::move(values));
  }
}

void job_registry::checkpoint(registered_job& job, std::uint32_t epoch,
                              std::shared_ptr<const ps::training_state> state) {
  if (!state) return;
  // A checkpoint may overtake its epoch's record; taken first, a restart in between would
  // resume after an epoch the store has no record of (its samples missing from the status).
  if (epoch >= job.status.epochs_done) {
    job.held_checkpoint.emplace(epoch, std::move(state));
    return;
  }
  job.checkpoint = std::move(state);
  job.checkpoint_epoch = epoch;
  job.checkpoint_at = now();
  job.checkpoint_stored = false;
  if (epoch + 1 >= job.status.epochs_total || now() - job.stored_at >= job.store_every_s)
    store_checkpoint(job);
}

void job_registry::store_checkpoint(registered_job& job) {
  if (!job.checkpoint || job.checkpoint_stored) return;
  auto saved = store_->save_checkpoint(job.status.job, job.checkpoint_epoch, job.checkpoint_at,
                                       *job.checkpoint);
  logged(saved, "cannot store a checkpoint");
  if (!saved) return;
  job.checkpoint_stored = true;
  job.stored_at = now();
}

// --- nodes --------------------------------------------------------------------------------------

bool job_registry::fail_over(registered_job& job, std::uint32_t host, node_loss& loss) {
  // A shard whose primary was on `host` and that has no chain (none was placed) recovers.
  for (const auto& [k, h] : job.alloc.shard_at)
    if (h == host && k >= job.chains.size()) return false;
  std::vector<std::uint32_t> heads, cut;
  for (std::uint32_t k = 0; k < job.chains.size(); ++k) {
    auto& c = job.chains[k];
    auto on_host = [&](std::uint32_t i) {
      return i == 0 ? job.alloc.shard_at.contains(k) && job.alloc.shard_at.at(k) == host
                    : job.backups[k][i - 1] == host;
    };
    for (std::uint32_t i = c.head; i <= c.tail; ++i) {
      if (!on_host(i)) continue;
      if (i == c.head) {
        if (c.head == c.tail) return false;  // no copy left: recover from the checkpoint
        ++c.head;
        heads.insert(heads.end(), {k, c.head});
      } else {
        c.tail = i - 1;
        cut.insert(cut.end(), {k, i - 1});
      }
      break;  // a host holds one copy of a shard at most
    }
  }
  loss.heads = std::move(heads);
  loss.cut = std::move(cut);
  // Promoted: shard k's primary is its backup's host now.
  for (std::size_t j = 0; j < loss.heads.size(); j += 2) {
    const auto k = loss.heads[j];
    const auto h = job.backups[k][loss.heads[j + 1] - 1];
    job.alloc.shard_at[k] = h;
    job.shard_hosts.insert(h);
    if (k < job.status.shard_nodes.size()) job.status.shard_nodes[k] = nodes_.name(h);
    ++job.status.failovers;
  }
  if (!loss.heads.empty()) record_history(job);
  return true;
}

std::vector<node_loss> job_registry::lose_node(std::uint32_t host) {
  std::vector<node_loss> out;
  for (auto& [id, job] : jobs_) {
    if (job.stopping.contains(host) || (!job.over() && job.launched && job.hosts.contains(host)))
      left_on_[host].insert(id);
    job.stopping.erase(host);
    if (job.over() || !job.launched || !job.hosts.contains(host)) continue;
    // A node that ran only workers of a running job: the job goes on without them (its master
    // drops them and re-dispenses their chunks; it fails the job itself when none is left).
    node_loss loss{.job = id};
    loss.fails = host == self_host_;
    // A loss that leaves the job no worker recovers too: a run without workers cannot go on
    // (its master would fail the job), and its training state is in its checkpoint.
    const bool every_worker =
        std::ranges::all_of(job.alloc.worker_at, [&](const auto& w) { return w.second == host; });
    loss.recovers = !loss.fails && (!job.running() || every_worker || !fail_over(job, host, loss));
    if (loss.recovers) {
      // Its shards' state is gone with the node: the job restarts from its checkpoint on the
      // nodes left. The work since the checkpoint (or since this run began from it) is lost.
      const double from = std::max(job.started, job.checkpoint ? job.checkpoint_at : 0.0);
      job.status.recoveries_lost_s.push_back(std::max(0.0, now() - from));
      record_history(job);
      loss.stop_hosts = job.hosts;
      loss.stop_hosts.erase(host);
      stop_to_resume(job, loss.stop_hosts,
                     coach::format("node '{}' lost; recovering", nodes_.name(host)));
      out.push_back(std::move(loss));
      continue;
    }
    for (const auto& [r, h] : job.alloc.worker_at)
      if (h == host) loss.ranks.push_back(r);
    if (!loss.fails) {
      job.hosts.erase(host);
      for (auto r : loss.ranks) job.alloc.worker_at.erase(r);
      std::erase(job.alloc.planned_workers, host);
      record_allocation(job);
      auto& st = job.status;
      st.workers -= std::min(st.workers, std::uint32_t(loss.ranks.size()));
      for (auto r : loss.ranks)
        if (r < st.worker_nodes.size()) st.worker_nodes[r] += " (lost)";
    }
    out.push_back(std::move(loss));
  }
  return out;
}

std::set<std::uint64_t> job_registry::came_back(std::uint32_t host) {
  auto left = left_on_.extract(host);
  return left ? std::move(left.mapped()) : std::set<std::uint64_t>{};
}

bool job_registry::forget_unseen() {
  bool freed = false;
  for (auto& [id, job] : jobs_) {
    const bool had = !job.stop_unsent.empty();
    std::erase_if(job.stop_unsent, [&](std::uint32_t h) {
      if (const auto* n = nodes_.find(h); n && n->alive) return false;
      job.stopping.erase(h);
      return true;
    });
    freed |= had && job.may_start();
  }
  return freed;
}

bool job_registry::stop_answered(registered_job& job, std::uint32_t host) {
  return job.stopping.erase(host) && job.stopping.empty();
}

std::vector<std::pair<std::uint64_t, std::vector<std::uint32_t>>> job_registry::stops_overdue(
    double after_s) {
  std::vector<std::pair<std::uint64_t, std::vector<std::uint32_t>>> out;
  const double t = now();
  for (auto& [id, job] : jobs_) {
    if (job.stopping.empty() || t - job.stops_asked_at <= after_s) continue;
    std::vector<std::uint32_t> hosts;
    for (const auto h : job.stopping)
      if (const auto* n = nodes_.find(h); n && n->alive && !job.stop_unsent.contains(h))
        hosts.push_back(h);
    job.stops_asked_at = t;
    if (!hosts.empty()) out.emplace_back(id, std::move(hosts));
  }
  return out;
}

// --- what coach status shows --------------------------------------------------------------------

void job_registry::record_history(const registered_job& job) {
  const auto& st = job.status;
  logged(store_->set_history(st.job, st.recoveries_lost_s, int(st.failovers), int(st.resumes)),
         "cannot record a job's history");
}

void job_registry::record_allocation(const registered_job& job) {
  const auto w = job.alloc.worker_hosts();
  const auto s = job.alloc.shard_hosts();
  logged(store_->set_allocation(job.status.job, now(), int(w.size()), int(s.size()), w, s),
         "cannot record an allocation");
}

job_status job_registry::snapshot(const registered_job& job, perf_model* model,
                                  std::string_view policy) const {
  job_status s = job.status;
  if (job.running()) s.seconds = now() - job.started;
  s.waiting = why_waiting(job);
  if (model) s.model_json = model_json(job, *model, policy);
  if (job.launched && !job.over()) {
    const auto w = job.alloc.worker_hosts();
    const auto sh = job.alloc.shard_hosts();
    if (!w.empty() && !sh.empty()) s.aggregation_degree = aggregation_degree(w, sh);
  }
  return s;
}

void job_registry::note(registered_job& job, std::string line, bool log) {
  if (log) log_(line);
  job.log.add(now(), std::move(line));
}

void job_registry::note_epoch(registered_job& job, std::string line) {
  job.log.add_epoch(now(), std::move(line));
}

std::string job_registry::why_waiting(const registered_job& job) const {
  if (!job.waiting()) return {};
  if (job.cancel_requested) return "being cancelled";
  if (!job.stopping.empty() || !job.stop_unsent.empty())
    return coach::format("its parts of the last run are still stopping on {} node(s)",
                         job.stopping.size() + job.stop_unsent.size());
  const auto& r = job.rec;
  const auto view = cluster();
  if (view.nodes.empty()) return "no live node to run on";
  double free_cpus = 0;
  for (const auto& n : view.nodes) free_cpus += std::max(0.0, n.free.cpus);
  free_cpus = std::floor(free_cpus * 10 + 1e-6) / 10;
  const int free_gpus = view.free_gpus();
  // The least it can start with (an elastic policy may start it so), then what it asks for.
  for (const bool least : {true, false}) {
    const int w = std::max(1, least ? r.min_workers : r.requested_workers);
    const int p = std::max(1, least ? r.min_shards : r.requested_shards);
    const double cpus = w * worker_cost(r).cpus + p * shard_cost(r).cpus;
    const int gpus = w * r.gpus_per_worker;
    const auto parts =
        coach::format("{} worker(s) and {} shard(s){}", w, p, least ? " at least" : "");
    const char* verb = least ? "needs" : "asks for";
    if (gpus > free_gpus)
      return coach::format("{} {} GPUs ({}), {} free", verb, gpus, parts, free_gpus);
    if (cpus > free_cpus + 1e-9)
      return coach::format("{} {} CPUs ({}), {} free", verb, cpus, parts, free_cpus);
  }
  // It fits: an earlier job waits first (FIFO order), or the next decision starts it.
  for (const auto& [id, other] : jobs_)
    if (id < job.status.job && other.waiting() && !other.cancel_requested)
      return coach::format("behind job {} in the queue", id);
  return "starts at the scheduler's next decision";
}

std::string model_json(const registered_job& job, perf_model& model, std::string_view policy) {
  const std::uint64_t id = job.status.job;
  json theta = nullptr;
  if (auto t = model.job_theta(id, job.rec.model)) {
    theta = json::array();
    for (double x : *t) theta.push_back(json_figure(x));
  }
  const int w = int(job.status.workers), p = int(job.status.shards);
  json predicted = nullptr;
  if (w >= 1 && p >= 1)
    if (auto x = model.predict(id, job.rec.model, w, p)) predicted = json_figure(*x);
  json out{{"model", job.rec.model},
           {"theta", std::move(theta)},
           {"workers", w},
           {"shards", p},
           {"predicted_epoch_s", std::move(predicted)}};
  // The job's record against the model: predictions, their error, each change's.
  const auto record = job.perf ? job.perf->to_json() : perf_tracker(id, job.rec.model).to_json();
  for (const auto& [key, value] : record.items()) out[key] = value;
  out["policy"] = policy;
  out["perf_model"] = model.to_json();
  return out.dump();
}

}  // namespace coach::scheduler
