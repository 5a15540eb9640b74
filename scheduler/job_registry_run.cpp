// scheduler/job_registry_run.cpp: one run of a job as the registry follows it: launched, its
// parts placed and started, changes in effect, progress, epochs and checkpoints, its end or
// its stop to resume later (job_registry.hpp).
#include <algorithm>
#include <cmath>
#include <tuple>

#include "common/format.hpp"
#include "common/log.hpp"
#include "scheduler/job_registry.hpp"
#include "scheduler/placement.hpp"
#include "scheduler/resource_pool.hpp"

namespace coach::scheduler {

void job_registry::shaped(registered_job& job, const run_shape& shape,
                          std::uint64_t samples_epoch) {
  job.shape_ = shape;
  job.status_.samples_epoch = samples_epoch;
}

std::uint32_t job_registry::begin_run(registered_job& job, std::span<const std::uint32_t> workers,
                                      std::span<const std::uint32_t> shards, bool resumed) {
  const std::uint64_t id = job.id();
  if (!job.checkpoint()) job.first_epoch_ = 0;  // no checkpoint: from the seed, the first epoch
  ++job.generation_;
  job.launched_ = true;
  job.alloc_.assign(workers, shards);
  job.hosts_ = {self_host_};
  job.hosts_.insert(workers.begin(), workers.end());
  job.hosts_.insert(shards.begin(), shards.end());
  job.shard_hosts_ = {shards.begin(), shards.end()};
  const auto usable = usable_hosts();
  const auto short_of = job.replicas_.place(shards, usable);
  for (const auto& b : job.replicas_.backups()) job.hosts_.insert(b.begin(), b.end());
  note_short_backups(job, short_of, usable.size());
  auto& st = job.status_;
  st.state = job_state::queued;  // until every part started
  st.workers = std::uint32_t(workers.size());
  st.shards = std::uint32_t(shards.size());
  st.samples_done = 0;
  st.error.clear();
  st.error_code = 0;
  st.worker_nodes.clear();
  for (auto h : workers) st.worker_nodes.push_back(nodes_.name(h));
  // A new run places its shards anew (ids from 0): pins of the last run's shards are gone; a
  // held rescale holds on (the policy started it with those counts).
  job.orders_.clear_pins();
  job.causes_.clear();
  job.last_members_.clear();
  job.last_live_.clear();
  for (std::uint32_t r = 0; r < workers.size(); ++r) job.last_members_.push_back(r);
  for (std::uint32_t k = 0; k < shards.size(); ++k) job.last_live_.push_back(k);
  // The run makes the changes of its spec's schedule from its first step on (a resumed run's:
  // its checkpoint's version), in order.
  const std::int64_t first_step = job.checkpoint() ? job.checkpoint()->version : 0;
  for (const auto& a : job.schedule_) {
    if (a.at_step < first_step) continue;
    expected_change c{expected_change::kind_type::rescale, "the spec's schedule", 0, 0, 0, {}};
    if (a.kind == ps::change_kind::workers) c.workers = a.value;
    if (a.kind == ps::change_kind::shards) c.shards = a.value;
    if (a.kind == ps::change_kind::migrate) {
      c.kind = expected_change::kind_type::migrate;
      c.shard = a.value;
    }
    job.causes_.expect(std::move(c));
  }
  list_nodes(job);
  if (resumed) {
    ++st.resumes;
    record_history(job);
  }
  job.state_ = job_state::running;
  job.state_since_ = job.started_ = now();
  logged(store_->set_state(
             id, job.state_, job.state_since_,
             resumed ? coach::format("resumed at epoch {}", job.first_epoch_ + 1) : std::string{}),
         "cannot record a state");
  record_allocation(job);
  note(job, coach::format("job {} '{}': {} worker(s), {} shard(s) over {} host(s){}", id, st.name,
                          workers.size(), shards.size(), job.hosts_.size(),
                          resumed ? coach::format(", from epoch {}", job.first_epoch_ + 1) : ""));
  return job.generation_;
}

void job_registry::note_short_backups(registered_job& job, std::span<const std::uint32_t> shards,
                                      std::size_t usable) {
  const auto& r = job.replicas_;
  for (const auto k : shards)
    note(job, coach::format("job {}: shard {} runs with {} of its {} backup(s): {} node(s) usable",
                            job.id(), k, r.backups()[k].size(), r.replicas() - 1, usable));
}

void job_registry::started(registered_job& job) {
  job.status_.state = job_state::running;
  job.started_ = now();
}

void job_registry::finished(registered_job& job, const job_result& r) {
  auto& st = job.status_;
  if (!std::isnan(r.test_accuracy) && !r.epochs.empty()) st.test_accuracy = r.test_accuracy;
  st.changes = r.changes;
  st.epochs_done = std::max(st.epochs_done, job.first_epoch_ + std::uint32_t(r.epochs.size()));
}

void job_registry::restore(std::uint64_t id, std::uint32_t generation, const allocation& before,
                           const std::string& cause) {
  auto* job = current(id, generation);
  if (!job || job->over()) return;
  job->alloc_ = before;
  job->causes_.refused(expected_change::kind_type::rescale, cause);
  record_allocation(*job);
}

void job_registry::rescaled(registered_job& job, std::uint32_t workers, std::uint32_t shards) {
  job.alloc_.trim(workers, shards);
  job.orders_.hold(workers, shards);
  record_allocation(job);
}

// The user's orders are noted when asked (the master may ask for their parts before it
// answers), and again only when refused.
void job_registry::user_rescale(registered_job& job, std::uint32_t workers, std::uint32_t shards) {
  job.causes_.expect({expected_change::kind_type::rescale, "user", workers, shards, 0, {}});
  std::string what;
  if (workers) what = coach::format("{} worker(s)", workers);
  if (shards) what += coach::format("{}{} shard(s)", what.empty() ? "" : ", ", shards);
  note(job, coach::format("job {}: the user rescales it to {} (cause: user); held against the "
                          "policies until `coach rescale {} --release`",
                          job.id(), what, job.id()));
}

void job_registry::user_rescale_refused(std::uint64_t id, std::uint32_t generation,
                                        const std::string& why) {
  auto* job = current(id, generation);
  if (!job) return;
  job->causes_.refused(expected_change::kind_type::rescale, "user");
  note(*job, coach::format("job {}: the user's rescale is refused ({}); nothing is held", id, why));
}

void job_registry::user_migrate(registered_job& job, std::uint32_t shard, std::uint32_t host) {
  job.causes_.expect({expected_change::kind_type::migrate, "user", 0, 0, shard, {}});
  job.orders_.migrating(shard, host);
  note(job, coach::format("job {}: the user moves shard {} to '{}' (cause: user); its new shard "
                          "there is pinned until `coach migrate {} --shard ID --release`",
                          job.id(), shard, nodes_.name(host), job.id()));
}

void job_registry::user_migrate_refused(std::uint64_t id, std::uint32_t generation,
                                        std::uint32_t shard, std::uint32_t host,
                                        const std::string& why) {
  auto* job = current(id, generation);
  if (!job) return;
  job->causes_.refused(expected_change::kind_type::migrate, "user");
  job->orders_.migration_refused(shard, host);
  list_nodes(*job);
  note(*job, coach::format("job {}: the user's move of shard {} to '{}' is refused ({}); nothing "
                           "is pinned",
                           id, shard, nodes_.name(host), why));
}

void job_registry::move_refused(std::uint64_t id) {
  if (auto* job = find(id)) job->causes_.refused(expected_change::kind_type::migrate, "rebalancer");
}

result<void> job_registry::release_pin(std::uint64_t id, std::uint32_t shard) {
  auto* job = find(id);
  if (!job) return fail(errc::not_found, "no job {}", id);
  if (!job->orders_.release_pin(shard)) {
    std::string pinned;
    for (const auto& [k, h] : job->orders_.pins())
      pinned += coach::format("{}{}", pinned.empty() ? "" : ", ", k);
    return fail(errc::invalid_argument, "job {}: shard {} is not pinned ({})", id, shard,
                pinned.empty() ? std::string("none is") : "pinned: shard " + pinned);
  }
  list_nodes(*job);
  note(*job, coach::format("job {}: the user releases shard {} (cause: user); the rebalancer "
                           "may move it again",
                           id, shard));
  return {};
}

result<void> job_registry::release_hold(std::uint64_t id) {
  auto* job = find(id);
  if (!job) return fail(errc::not_found, "no job {}", id);
  if (!job->orders_.release_hold())
    return fail(errc::invalid_argument, "job {} holds no rescale of the user's", id);
  list_nodes(*job);
  note(*job, coach::format("job {}: the user releases its rescale (cause: user); the policies "
                           "may resize it again",
                           id));
  return {};
}

void job_registry::list_nodes(registered_job& job) {
  auto& st = job.status_;
  st.shard_nodes.clear();
  st.shard_ids.clear();
  for (const auto& [k, h] : job.alloc_.shard_at) {
    st.shard_ids.push_back(k);
    st.shard_nodes.push_back(nodes_.name(h));
  }
}

void job_registry::stop_run(registered_job& job) {
  job.launched_ = false;
  ++job.generation_;
  job.alloc_.clear();
}

std::set<std::uint32_t> job_registry::end(registered_job& job, job_state state,
                                          std::optional<coach::error> why) {
  if (job.over()) return {};
  auto& st = job.status_;
  st.state = state;
  if (why) {
    st.error = why->message;
    st.error_code = std::uint16_t(why->code);
  }
  if (job.launched_) st.seconds = now() - job.started_;
  auto hosts = std::move(job.hosts_);
  job.hosts_.clear();
  stop_run(job);
  job.orders_.clear();
  job.causes_.clear();
  job.checkpoints_.drop();
  job.state_ = state;
  job.state_since_ = now();
  logged(store_->set_state(st.job, state, job.state_since_, why ? why->message : ""),
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
    return fail(errc::invalid_argument, "job {} already {}", id, to_string(job->state_));
  job->cancel_requested_ = true;
  return job;
}

result<void> job_registry::forget(std::uint64_t id) {
  auto* job = find(id);
  if (!job) return fail(errc::not_found, "no job {}", id);
  if (!job->over())
    return fail(errc::invalid_argument, "job {} is {}: only an ended job can be forgotten", id,
                to_string(job->state_));
  if (!job->stops_.empty())
    return fail(errc::invalid_argument, "job {} is still stopping its parts: forget it later", id);
  if (auto ok = store_->forget_job(id); !ok) return ok;
  jobs_.erase(id);
  return {};
}

void job_registry::stop_to_resume(registered_job& job, std::set<std::uint32_t> stopping,
                                  const std::string& why) {
  store_checkpoint(job);  // a restart of the scheduler while it waits resumes from it too
  job.stops_.ask(std::move(stopping), now());  // it may start again once every one answered
  stop_run(job);
  job.first_epoch_ = job.checkpoints_.resume_epoch();
  auto& st = job.status_;
  st.epochs_done = job.first_epoch_;
  st.epoch_samples.resize(std::min<std::size_t>(st.epoch_samples.size(), job.first_epoch_));
  st.epoch_seconds.resize(st.epoch_samples.size());
  st.epoch_accuracy.resize(st.epoch_samples.size());
  st.state = job_state::queued;
  st.samples_done = 0;
  job.state_ = job_state::suspended;
  job.state_since_ = now();
  logged(store_->set_state(st.job, job.state_, job.state_since_,
                           coach::format("{}; resumes at epoch {}", why, job.first_epoch_ + 1)),
         "cannot record a state");
  record_allocation(job);
}

// --- parts added while it runs ------------------------------------------------------------------

result<std::uint32_t> job_registry::place(registered_job& job, bool worker, const std::string& name,
                                          const executor& exec) {
  if (!name.empty()) return nodes_.by_name(name);
  auto& planned = worker ? job.alloc_.planned_workers : job.alloc_.planned_shards;
  while (!planned.empty()) {
    const auto h = planned.front();
    planned.pop_front();
    if (nodes_.usable(h)) return h;
  }
  placement_request req;
  req.job = job.id();
  req.per_worker = worker_cost(job.rec_);
  req.per_shard = shard_cost(job.rec_);
  req.worker_nodes = job.alloc_.worker_hosts();
  req.shard_nodes = job.alloc_.shard_hosts();
  resource_pool pool(cluster());
  if (auto h = exec.place_one(pool, req, worker, job.placement_)) return *h;
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
  (worker ? job.alloc_.worker_at : job.alloc_.shard_at)[id] = host;
  job.hosts_.insert(host);
  if (!worker) job.shard_hosts_.insert(host);
  const bool pinned = !worker && job.orders_.placed(id, host);
  if (worker) job.status_.worker_nodes.push_back(nodes_.name(host));
  list_nodes(job);
  record_allocation(job);
  const auto cause = pinned ? std::string("user") : job.causes_.adding(worker);
  note(job,
       coach::format("job {}: {} {} placed on '{}'{}{}", job.id(), worker ? "worker" : "shard", id,
                     nodes_.name(host), cause.empty() ? "" : " (cause: " + cause + ")",
                     pinned ? "; pinned there (coach migrate)" : ""),
       false);
  if (worker || job.replicas_.replicas() <= 1) return {};
  const auto usable = usable_hosts();
  auto b = job.replicas_.place_added(id, host, job.alloc_.shard_at, usable);
  job.hosts_.insert(b.begin(), b.end());
  if (b.size() + 1 < job.replicas_.replicas()) {
    const std::uint32_t ids[] = {id};
    note_short_backups(job, ids, usable.size());
  }
  return b;
}

void job_registry::part_unplaced(registered_job& job, bool worker) {
  // Workers are listed by rank, the ones that never started too; shards only where they run.
  if (worker) job.status_.worker_nodes.push_back("(not started)");
  note(job,
       coach::format("job {}: no node could take one more {}", job.id(),
                     worker ? "worker" : "shard"),
       false);
}

void job_registry::part_failed(registered_job& job, bool worker, std::uint32_t id) {
  (worker ? job.alloc_.worker_at : job.alloc_.shard_at).erase(id);
  list_nodes(job);
  record_allocation(job);
}

bool job_registry::layout(registered_job& job, std::span<const std::uint32_t> members,
                          std::span<const std::uint32_t> live) {
  const auto cause =
      job.causes_.took_effect(job.last_members_, job.last_live_, members, live,
                              job.schedule_.empty() ? "the job's master" : "the spec's schedule");
  job.last_members_.assign(members.begin(), members.end());
  job.last_live_.assign(live.begin(), live.end());
  job.orders_.live(live);
  note(job,
       coach::format("job {}: a change is in effect: {} worker(s), {} shard(s) (cause: {})",
                     job.id(), members.size(), live.size(), cause),
       false);
  const bool left = job.alloc_.keep(members, live) != 0;
  list_nodes(job);
  if (!left) return false;
  // A dropped shard's backups hold nothing the job needs: no longer part of a chain.
  job.replicas_.keep_only(job.alloc_.shard_at);
  record_allocation(job);
  return true;
}

// --- what the run reports -----------------------------------------------------------------------

void job_registry::progress(registered_job& job, const progress_event& p) {
  auto& st = job.status_;
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
  const std::uint64_t id = job.id();
  auto& st = job.status_;
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
  job.curve_.resize(std::min<std::size_t>(job.curve_.size(), e.epoch));  // a rerun replaces
  job.curve_.push_back(e);
  note_epoch(job, coach::format("job {}: epoch {}/{}: train loss {:.4f}, test accuracy {:.4f}, "
                                "{:.2f} s, {} worker(s), {} shard(s)",
                                id, e.epoch + 1, st.epochs_total, e.train_loss, e.test_accuracy,
                                e.seconds, e.workers, e.shards));
  const int w = int(e.workers), p = int(e.shards);
  if (!job.perf_) job.perf_.emplace(id, job.rec_.model);
  const auto predicted = job.perf_->epoch(e, model);
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
  if (auto held = job.checkpoints_.release(st.epochs_done))
    checkpoint(job, held->first, std::move(held->second));
}

void job_registry::checkpoint(registered_job& job, std::uint32_t epoch,
                              std::shared_ptr<const ps::training_state> state) {
  const auto& st = job.status_;
  if (job.checkpoints_.offer(epoch, std::move(state), st.epochs_done, st.epochs_total, now()))
    store_checkpoint(job);
}

void job_registry::store_checkpoint(registered_job& job) {
  auto& c = job.checkpoints_;
  if (!c.unstored()) return;
  auto saved = store_->save_checkpoint(job.id(), c.epoch(), c.at(), *c.state());
  logged(saved, "cannot store a checkpoint");
  if (!saved) return;
  c.stored(now());
}

}  // namespace coach::scheduler
