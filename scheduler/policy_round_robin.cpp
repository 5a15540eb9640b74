// round-robin: jobs take turns of `slice` (docs/scheduler.md).

#include <algorithm>
#include <array>

#include "scheduler/policy.hpp"
#include "scheduler/policy_detail.hpp"

namespace coach::scheduler::detail {
namespace {

/// round-robin: every job runs at its request, in turns.
///   - Waiting jobs start in the order they began to wait (submission, or their last
///     suspension), so a suspended job goes to the back of the line.
///   - When the first of them does not fit, running jobs whose turn is over (running for
///     `slice` or more) are suspended, the longest-running first, until it does; if suspending
///     all of them would not make room, none is suspended and the line waits.
///   - No job waits: nobody is suspended, however long it has run (a turn ends only for
///     someone else's sake).
/// It asks to be called again when the next turn ends while jobs wait. Its only state is in the
/// job views (state_since), so it carries on after a swap with any allocation it finds.
class round_robin_policy final : public policy {
 public:
  explicit round_robin_policy(seconds slice) : slice_(slice) {}

  std::string_view name() const noexcept override { return "round-robin"; }

  decision decide(const cluster_view& cluster, std::span<const job_view> jobs,
                  time_point now) override {
    planner plan(cluster, jobs);
    const auto since = [](const job_view& j) { return j.state_since; };
    const auto waiting = order_by(jobs, since, [](const job_view& j) { return j.waiting(); });
    std::vector<std::size_t> expired;
    for (std::size_t i :
         order_by(jobs, since, [](const job_view& j) { return j.state == job_state::running; })) {
      if (now - jobs[i].state_since >= slice_) expired.push_back(i);
    }
    std::size_t next_expired = 0;
    for (std::size_t i : waiting) {
      const auto& j = jobs[i];
      if (plan.set(i, j.requested_workers, j.requested_shards)) continue;
      std::vector<std::array<int, 3>> undo;  // job, workers, shards
      bool started = false;
      while (!started && next_expired < expired.size()) {
        const std::size_t r = expired[next_expired++];
        undo.push_back({int(r), plan.workers(r), plan.shards(r)});
        plan.set(r, 0, 0);
        started = plan.set(i, j.requested_workers, j.requested_shards);
      }
      if (!started) {
        for (auto it = undo.rbegin(); it != undo.rend(); ++it)
          plan.set(std::size_t((*it)[0]), (*it)[1], (*it)[2]);
        break;
      }
    }
    // Someone waits after this decision (left waiting, or suspended by it): look again when
    // the next turn ends.
    bool someone_waits = false;
    for (std::size_t i = 0; i < jobs.size(); ++i) someone_waits |= plan.workers(i) == 0;
    std::optional<time_point> revisit;
    if (someone_waits) {
      // The next turn to end among the jobs that keep running (those started now begin theirs).
      for (std::size_t i = 0; i < jobs.size(); ++i) {
        if (plan.workers(i) == 0) continue;
        const time_point began = jobs[i].state == job_state::running ? jobs[i].state_since : now;
        const time_point ends = began + slice_;
        if (ends > now && (!revisit || ends < *revisit)) revisit = ends;
      }
    }
    return plan.finish(revisit);
  }

 private:
  seconds slice_;
};

}  // namespace

std::unique_ptr<policy> make_round_robin(const policy_options& options) {
  return std::make_unique<round_robin_policy>(options.slice);
}

}  // namespace coach::scheduler::detail
