// scheduler/admission.cpp: taking a job in and why a job waits (admission.hpp).
#include "scheduler/admission.hpp"

#include <algorithm>
#include <cmath>

#include "common/format.hpp"
#include "scheduler/resource_pool.hpp"

namespace coach::scheduler {

resources worker_cost(const job_record& r) {
  return {r.gpus_per_worker, 1.0, 0};
}
resources shard_cost(const job_record&) {
  return {0, 1.0, 0};
}

result<job_record> admit(const job_spec& spec, const submission& s, const cluster_view& view,
                         double now, const std::function<void(const std::string&)>& log) {
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
  rec.submitted = now;
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
    if (log)
      log(
          coach::format("job '{}' asks for {} worker(s) and {} shard(s), more than the cluster "
                        "has; it asks for {} and {}",
                        spec.name, asked_w, asked_s, rec.requested_workers, rec.requested_shards));
  }
  return rec;
}

double free_cpus_shown(double free) {
  return std::floor(std::max(0.0, free) * 10 + 1e-6) / 10;
}

std::string why_waiting(const registered_job& job, const cluster_view& view,
                        const std::map<std::uint64_t, registered_job>& jobs, double external_cpus) {
  if (job.cancel_requested()) return "being cancelled";
  if (!job.stops().empty())
    return coach::format("its parts of the last run are still stopping on {} node(s)",
                         job.stops().count());
  const auto& r = job.rec();
  if (view.nodes.empty()) return "no live node to run on";
  double free_cpus = 0, total_cpus = 0;
  for (const auto& n : view.nodes) {
    free_cpus += free_cpus_shown(n.free.cpus);
    total_cpus += n.total.cpus;
  }
  free_cpus = std::round(free_cpus * 10) / 10;
  const double external = std::floor(std::clamp(external_cpus, 0.0, total_cpus) * 10 + 1e-6) / 10;
  const double held = std::max(0.0, std::round((total_cpus - free_cpus - external) * 10) / 10);
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
    if (cpus > free_cpus + 1e-9) {
      // What holds the CPUs, and what would change it (docs/scheduler.md, "Cluster view").
      std::string holds = coach::format("Coach's jobs hold {} (a CPU per worker or shard)", held);
      if (external > 0)
        holds += coach::format(
            ", other programs keep {} busy (--cpu-accounting measured, the default; coach-node "
            "--cpu-accounting reserved counts only Coach's jobs)",
            external);
      else
        holds += "; it starts when they end, or coach-node --cpus N advertises more";
      return coach::format("{} {} CPUs ({}), {} free of {}: {}", verb, cpus, parts, free_cpus,
                           total_cpus, holds);
    }
  }
  // It fits: an earlier job waits first (FIFO order), or the next decision starts it.
  for (const auto& [id, other] : jobs)
    if (id < job.id() && other.waiting() && !other.cancel_requested())
      return coach::format("behind job {} in the queue", id);
  return "starts at the scheduler's next decision";
}

}  // namespace coach::scheduler
