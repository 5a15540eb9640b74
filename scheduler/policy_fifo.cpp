// fifo and elastic-fifo (Schedulearn's baselines; docs/scheduler.md has the rules).

#include <algorithm>
#include <cmath>

#include "scheduler/policy.hpp"
#include "scheduler/policy_detail.hpp"

namespace coach::scheduler::detail {
namespace {

time_point submitted(const job_view& j) {
  return j.submitted;
}
bool is_waiting(const job_view& j) {
  return j.waiting();
}
bool is_any(const job_view&) {
  return true;
}
bool is_running(const job_view& j) {
  return j.state == job_state::running;
}

/// fifo: submission order, each job at its request, the first that does not fit blocks the
/// rest. Never touches a running job, whatever its allocation (after a swap from an elastic
/// policy it keeps what it has).
class fifo_policy final : public policy {
 public:
  std::string_view name() const noexcept override { return "fifo"; }

  decision decide(const cluster_view& cluster, std::span<const job_view> jobs,
                  time_point) override {
    planner plan(cluster, jobs);
    for (std::size_t i : order_by(jobs, submitted, is_waiting)) {
      const auto& j = jobs[i];
      if (!plan.set(i, j.requested_workers, j.requested_shards)) break;
    }
    return plan.finish(std::nullopt);
  }
};

/// Shards for `workers` workers: the job's requested ratio of shards to workers, kept within
/// its range (a job that asked for 8 workers and 2 shards gets 1 shard at 4 workers, 4 at 16).
int proportional_shards(const job_view& j, int workers) {
  const double ratio = double(j.requested_shards) / double(j.requested_workers);
  const int s = int(std::lround(ratio * workers));
  return std::clamp(s, j.min_shards, j.max_shards);
}

/// How many more workers of job `j` the pool could hold at most, counting GPUs only (an
/// upper bound that spares trying counts that cannot fit).
int gpu_room(const planner& plan, const job_view& j) {
  if (j.per_worker.gpus <= 0) return j.max_workers;
  return plan.pool().free_gpus() / j.per_worker.gpus;
}

/// elastic-fifo: fifo's order, but elastic.
///   1. Admission, in submission order: a waiting job starts with as many workers as fit, up to
///      its request and down to its minimum (shards in its requested proportion). When even
///      the minimum does not fit, running jobs that grew beyond their request give the excess
///      back, youngest first, until it does. The first job that cannot start blocks the rest.
///   2. Running jobs below their request grow back to it, oldest first.
///   3. Only when no job waits: running jobs grow into the free GPUs up to their maximum,
///      oldest first.
/// A job that is not elastic is started at its request only and never resized.
class elastic_fifo_policy final : public policy {
 public:
  std::string_view name() const noexcept override { return "elastic-fifo"; }

  decision decide(const cluster_view& cluster, std::span<const job_view> jobs,
                  time_point) override {
    planner plan(cluster, jobs);
    plan.shed_overcommit();
    const auto waiting = order_by(jobs, submitted, is_waiting);
    const auto running = order_by(jobs, submitted, is_running);
    std::size_t admitted = 0;
    for (; admitted < waiting.size(); ++admitted) {
      const std::size_t i = waiting[admitted];
      if (start(plan, i)) continue;
      std::vector<std::array<int, 3>> undo;  // job, workers, shards
      bool started = false;
      for (auto it = running.rbegin(); it != running.rend() && !started; ++it) {
        const std::size_t r = *it;
        const auto& j = jobs[r];
        if (!j.elastic || plan.workers(r) <= j.requested_workers) continue;
        undo.push_back({int(r), plan.workers(r), plan.shards(r)});
        const int shards = std::min(plan.shards(r), proportional_shards(j, j.requested_workers));
        plan.set(r, j.requested_workers, std::max(shards, j.min_shards));
        started = start(plan, i);
      }
      if (!started) {
        // Nothing gained: give the reclaimed workers back rather than pause jobs for nothing.
        for (auto it = undo.rbegin(); it != undo.rend(); ++it)
          plan.set(std::size_t((*it)[0]), (*it)[1], (*it)[2]);
        break;
      }
    }
    const auto all = order_by(jobs, submitted, is_any);
    for (std::size_t i : all)
      if (plan.workers(i) > 0) grow(plan, i, jobs[i].requested_workers);
    if (admitted == waiting.size()) {
      for (std::size_t i : all)
        if (plan.workers(i) > 0) grow(plan, i, jobs[i].max_workers);
    }
    return plan.finish(std::nullopt);
  }

 private:
  static bool start(planner& plan, std::size_t i) {
    const auto& j = plan.job(i);
    if (!j.elastic) return plan.set(i, j.requested_workers, j.requested_shards);
    const int hi = std::min(j.requested_workers, gpu_room(plan, j));
    for (int w = hi; w >= j.min_workers; --w)
      if (plan.set(i, w, proportional_shards(j, w))) return true;
    return false;
  }

  static void grow(planner& plan, std::size_t i, int limit) {
    const auto& j = plan.job(i);
    const int cur = plan.workers(i);
    if (!j.elastic || cur >= limit) return;
    const int hi = std::min(limit, cur + gpu_room(plan, j));
    for (int w = hi; w > cur; --w) {
      const int shards = std::max(plan.shards(i), proportional_shards(j, w));
      if (plan.set(i, w, shards)) return;
    }
  }
};

}  // namespace

std::unique_ptr<policy> make_fifo(const policy_options&) {
  return std::make_unique<fifo_policy>();
}

std::unique_ptr<policy> make_elastic_fifo(const policy_options&) {
  return std::make_unique<elastic_fifo_policy>();
}

}  // namespace coach::scheduler::detail
