// scheduler/job_registry.cpp: the cluster scheduler's jobs (job_registry.hpp): loading them from
// the store, adding and finding them, what they hold, and the store's records and the jobs'
// histories. The rest of the registry: job_registry_decide.cpp, job_registry_run.cpp,
// job_registry_nodes.cpp, job_registry_views.cpp.
#include "scheduler/job_registry.hpp"

#include <algorithm>
#include <cmath>

#include "common/format.hpp"

namespace coach::scheduler {

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
template void job_registry::logged(const result<void>&, const char*);
template void job_registry::logged(const result<std::optional<checkpoint_record>>&, const char*);

result<std::size_t> job_registry::load() {
  auto all = store_->jobs();
  if (!all) return std::unexpected(all.error());
  for (auto& rec : *all) resume(std::move(rec));
  return all->size();
}

registered_job& job_registry::resume(job_record rec) {
  const std::uint64_t id = rec.id;
  registered_job& job = jobs_[id];
  auto& st = job.status_;
  st.job = id;
  st.name = rec.name;
  st.epochs_total = std::uint32_t(rec.epochs_total);
  st.test_accuracy = std::nan("");
  st.workers = std::uint32_t(rec.workers);
  st.shards = std::uint32_t(rec.shards);
  job.state_ = rec.state;
  job.state_since_ = rec.state_since;
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
  double store_every_s = checkpoint_config::default_store_every_s;
  if (auto spec = parse_job_spec(rec.spec_yaml, rec.source_name, rec.base_dir)) {
    job.placement_ = spec->placement;
    store_every_s = spec->checkpoint.store_every_s();
    job.replicas_ = replica_chains(spec->replicas);
  }
  job.checkpoints_ = checkpoint_keeper(store_every_s, now());
  if (rec.state == job_state::running || rec.state == job_state::suspended) {
    // It ran under the previous process (or was suspended): it restarts from its checkpoint.
    // Nodes that ran its parts are told to stop them first (when they heartbeat).
    auto ckpt = store_->checkpoint(id);
    logged(ckpt, "cannot read a checkpoint");
    if (ckpt && *ckpt) {
      job.first_epoch_ = (*ckpt)->epoch + 1;
      job.checkpoints_.restore(
          (*ckpt)->epoch, (*ckpt)->at,
          std::make_shared<const ps::training_state>(std::move((*ckpt)->state)));
    }
    st.epochs_done = job.first_epoch_;
    st.epoch_samples.resize(std::min<std::size_t>(st.epoch_samples.size(), job.first_epoch_));
    st.epoch_seconds.resize(st.epoch_samples.size());
    st.epoch_accuracy.resize(st.epoch_samples.size());
    std::set<std::uint32_t> ran(rec.worker_nodes.begin(), rec.worker_nodes.end());
    ran.insert(rec.shard_nodes.begin(), rec.shard_nodes.end());
    ran.erase(self_host_);  // its parts here died with the old process
    job.stops_.ask_unsent(std::move(ran), now());
    if (job.first_epoch_ >= std::uint32_t(rec.epochs_total)) {
      // Killed between its last checkpoint and its end: nothing is left to train.
      st.state = job.state_ = job_state::succeeded;
      logged(store_->set_state(id, job.state_, now()), "cannot record a state");
    } else {
      if (rec.state == job_state::running) {
        job.state_ = job_state::suspended;
        job.state_since_ = now();
        logged(store_->set_state(id, job.state_, job.state_since_,
                                 coach::format("the scheduler restarted; resumes at epoch {}",
                                               job.first_epoch_ + 1)),
               "cannot record a state");
      }
      // Where it resumes, and why not where it was when that is not the same (issue 37: a
      // store that could hold no checkpoint for a while sent a job back 9,944 epochs silently).
      std::string why;
      const auto reached = std::uint32_t(std::max(rec.epochs_done, 0));
      if (!job.checkpoint() && reached > 0)
        why = coach::format(
            ": no checkpoint of it was stored, so its {} epoch(s) are trained "
            "again",
            reached);
      else if (job.checkpoint() && reached > job.first_epoch_)
        why = coach::format(
            ": its last stored checkpoint is after epoch {}, so epochs {}-{} are "
            "trained again",
            job.first_epoch_, job.first_epoch_ + 1, reached);
      note(job, coach::format("job {} '{}' resumes at epoch {} of {}{}", id, st.name,
                              job.first_epoch_ + 1, st.epochs_total, why));
    }
  }
  job.rec_ = std::move(rec);
  return job;
}

result<job_record> job_registry::admit(const job_spec& spec, const submission& s) const {
  return scheduler::admit(spec, s, cluster(), now(), log_);
}

result<registered_job*> job_registry::add(job_record rec, const job_spec& spec,
                                          std::uint64_t samples_epoch, std::uint64_t token) {
  rec.samples_per_epoch = samples_epoch;
  auto id = store_->add_job(rec, token);
  if (!id) return std::unexpected(id.error());
  rec.id = *id;
  registered_job& job = jobs_[*id];
  job.placement_ = spec.placement;
  job.checkpoints_ = checkpoint_keeper(spec.checkpoint.store_every_s(), now());
  job.replicas_ = replica_chains(spec.replicas);
  job.schedule_ = spec.schedule;
  job.state_since_ = rec.submitted;
  auto& st = job.status_;
  st.job = *id;
  st.name = rec.name;
  st.state = job_state::queued;
  st.epochs_total = std::uint32_t(rec.epochs_total);
  st.test_accuracy = std::nan("");
  st.samples_epoch = samples_epoch;
  note(job, coach::format("job {} '{}' submitted ({} worker(s), {} shard(s) asked)", *id, rec.name,
                          rec.requested_workers, rec.requested_shards));
  job.rec_ = std::move(rec);
  return &job;
}

registered_job* job_registry::find(std::uint64_t id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

const registered_job* job_registry::find(std::uint64_t id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

registered_job* job_registry::current(std::uint64_t id, std::uint32_t generation) {
  auto* job = find(id);
  return job && job->launched_ && job->generation_ == generation ? job : nullptr;
}

result<registered_job*> job_registry::running_job(std::uint64_t id) {
  auto* job = find(id);
  if (!job) return fail(errc::not_found, "no job {}", id);
  if (job->over())
    return fail(errc::invalid_argument, "job {} already {}", id, to_string(job->state_));
  if (!job->launched_)
    return fail(errc::invalid_argument, "job {} is waiting for resources; it has no workers", id);
  if (job->status_.state != job_state::running)
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
    if (!job.launched_ || job.over()) continue;
    for (auto h : job.alloc_.worker_hosts()) add(h, worker_cost(job.rec_));
    for (auto h : job.alloc_.shard_hosts()) add(h, shard_cost(job.rec_));
  }
  return out;
}

std::vector<std::uint32_t> job_registry::usable_hosts() const {
  std::vector<std::uint32_t> out;
  for (const auto& [host, n] : nodes_.nodes())
    if (nodes_.usable(host)) out.push_back(host);
  return out;
}

// --- histories and the store's records ----------------------------------------------------------

void job_registry::note(registered_job& job, std::string line, bool log) {
  if (log) log_(line);
  job.log_.add(now(), std::move(line));
}

void job_registry::note_epoch(registered_job& job, std::string line) {
  job.log_.add_epoch(now(), std::move(line));
}

void job_registry::record_history(const registered_job& job) {
  const auto& st = job.status_;
  logged(store_->set_history(st.job, st.recoveries_lost_s, int(st.failovers), int(st.resumes)),
         "cannot record a job's history");
}

void job_registry::record_allocation(const registered_job& job) {
  const auto w = job.alloc_.worker_hosts();
  const auto s = job.alloc_.shard_hosts();
  logged(store_->set_allocation(job.status_.job, now(), int(w.size()), int(s.size()), w, s),
         "cannot record an allocation");
}

}  // namespace coach::scheduler
