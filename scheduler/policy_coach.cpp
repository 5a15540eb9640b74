// coach: allocation by the performance model's marginal gain (after Optimus, Peng et al.,
// EuroSys 2018, section 5.1). docs/scheduler.md gives the rule with an example.

#include <algorithm>
#include <array>
#include <cmath>
#include <queue>
#include <utility>

#include "common/enforce.hpp"
#include "scheduler/policy.hpp"
#include "scheduler/policy_detail.hpp"

namespace coach::scheduler::detail {
namespace {

/// coach. For a job whose model predicts it (elastic, known length, a fit from its own or its
/// model's epochs), T(w) = remaining epochs × t(w, best shards at w) is its predicted time to
/// finish with w workers. Then, each decision:
///   1. Admission, in submission order: a waiting job starts at its minimum (a job without a
///      prediction: as many as fit up to its request, as elastic-fifo does). When that does
///      not fit, predicted jobs give up workers, the one that loses least per GPU first, down
///      to their minimum, until it fits; if it cannot, nothing is taken and the rest wait.
///   2. Jobs without a prediction grow back to their request, oldest first.
///   3. Growth: each free GPU goes to the job whose T it shortens most per GPU, until no gain
///      is left or nothing fits. A running job keeps its growth only if it saves more than the
///      pause of a rescale (policy_options::rescale_cost_s); what it gives back is offered
///      again to the others.
///   4. Re-balancing: a job past its best worker count gives the extra back; then a worker
///      moves from the job that loses least by it to the one that gains most, while the gain
///      exceeds the loss by policy_options::move_margin; the moves are kept only if, together,
///      they shorten the sum of the predicted times by more than the rescale pauses they cost.
///   5. Shards: a running job whose shard count is not the best for its workers changes it
///      when the saving exceeds the rescale pause.
/// Steps 1 to 3 run at every decision; 4 and 5, which weigh every running job against every
/// other, at most once per policy_options::revisit.
/// Jobs without a prediction, and jobs that are not elastic, are never shrunk below their
/// request nor grown beyond it.
class coach_policy final : public policy {
 public:
  explicit coach_policy(policy_options options) : options_(std::move(options)) {
    COACH_ENFORCE(options_.model != nullptr, "a coach policy has a model");
  }

  std::string_view name() const noexcept override { return "coach"; }

  decision decide(const cluster_view& cluster, std::span<const job_view> jobs,
                  time_point now) override {
    planner plan(cluster, jobs);
    plan.shed_overcommit();
    prepare(jobs);
    const auto by_submit = [](const job_view& j) { return j.submitted; };
    const auto waiting = order_by(jobs, by_submit, [](const job_view& j) { return j.waiting(); });
    const auto all = order_by(jobs, by_submit, [](const job_view&) { return true; });

    // 1. Admission.
    for (std::size_t i : waiting) {
      if (start(plan, i)) continue;
      if (!start_by_reclaiming(plan, i)) break;
    }
    // 2. Jobs without a prediction: back to their request.
    for (std::size_t i : all) {
      const auto& j = jobs[i];
      if (plan.workers(i) == 0 || info_[i].known || !j.elastic) continue;
      for (int w = std::min(j.requested_workers, plan.workers(i) + room(plan, i));
           w > plan.workers(i); --w) {
        if (plan.set(i, w, std::max(plan.shards(i), proportional_shards(j, w)))) break;
      }
    }
    // 3. Growth into free resources, twice: the second pass offers what running jobs gave back.
    std::vector<bool> frozen(jobs.size(), false);
    for (int pass = 0; pass < 2; ++pass) {
      grow(plan, frozen);
      bool reverted = false;
      for (std::size_t i : all) {
        const auto& j = jobs[i];
        if (j.state != job_state::running || !info_[i].known || frozen[i]) continue;
        if (plan.workers(i) <= j.workers) continue;
        const double saving = current_time(i) - time_at(i, plan.workers(i));
        if (saving <= options_.rescale_cost_s) {
          frozen[i] = true;
          reverted = plan.set(i, j.workers, j.shards) || reverted;
        }
      }
      if (!reverted) break;
    }
    // 4 and 5 look at every running job: at most once per `revisit` (Optimus, too, re-allocates
    // at intervals), which also bounds how often a job can be moved.
    const bool periodic = !last_rebalance_ || now - *last_rebalance_ >= options_.revisit;
    if (periodic) last_rebalance_ = now;
    // 4. Re-balancing between predicted jobs.
    if (periodic) {
      shed(plan, jobs);
      rebalance(plan, jobs);
    }
    // 5. Shards of running jobs whose workers stay.
    for (std::size_t i : all) {
      if (!periodic) break;
      const auto& j = jobs[i];
      if (j.state != job_state::running || !info_[i].known || plan.changed(i)) continue;
      const int best = shards_at(i, j.workers);
      if (best == j.shards) continue;
      const auto& theta = *info_[i].theta;
      const double saving = info_[i].remaining * (epoch_seconds(theta, j.workers, j.shards) -
                                                  epoch_seconds(theta, j.workers, best));
      if (saving > options_.rescale_cost_s) plan.set(i, j.workers, best);
    }
    bool busy = false;
    for (std::size_t i = 0; i < jobs.size(); ++i) busy = busy || plan.workers(i) > 0;
    return plan.finish(busy ? std::optional<time_point>(now + options_.revisit) : std::nullopt);
  }

 private:
  struct job_info {
    std::optional<perf_theta> theta;
    double remaining = 0;  ///< epochs
    double cost = 1;       ///< what one worker uses: GPUs, else CPUs, else 1
    bool known = false;
    /// T(w) for the last few w asked (by w mod 4): a decision asks for w - 1 .. w + 2 around
    /// a job's count again and again.
    mutable std::array<std::pair<int, double>, 4> memo{{{-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}}};
  };

  void prepare(std::span<const job_view> jobs) {
    info_.assign(jobs.size(), job_info{});
    jobs_ = jobs;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const auto& j = jobs[i];
      auto& in = info_[i];
      in.cost = j.per_worker.gpus > 0   ? double(j.per_worker.gpus)
                : j.per_worker.cpus > 0 ? j.per_worker.cpus
                                        : 1.0;
      in.remaining = std::max(0.0, j.epochs_total - j.epochs_done);
      if (!j.elastic || j.epochs_total <= 0) continue;
      in.theta = options_.model->job_theta(j.id, j.model);
      in.known = in.theta.has_value();
    }
  }

  /// Predicted seconds to finish job i at w workers (and the best shards for them).
  double time_at(std::size_t i, int w) const {
    auto& slot = info_[i].memo[std::size_t(w) & 3];
    if (slot.first == w) return slot.second;
    const auto& j = jobs_[i];
    const auto& theta = *info_[i].theta;
    slot = {w, info_[i].remaining *
                   epoch_seconds(theta, w, best_shards(theta, w, j.min_shards, j.max_shards))};
    return slot.second;
  }
  /// Predicted seconds to finish job i as it runs now.
  double current_time(std::size_t i) const {
    const auto& j = jobs_[i];
    return info_[i].remaining * epoch_seconds(*info_[i].theta, j.workers, j.shards);
  }
  int shards_at(std::size_t i, int w) const {
    const auto& j = jobs_[i];
    if (!info_[i].known) return proportional_shards(j, w);
    return best_shards(*info_[i].theta, w, j.min_shards, j.max_shards);
  }
  /// Seconds saved per unit of cost by going from w to w + 1 workers.
  double gain(std::size_t i, int w) const {
    return (time_at(i, w) - time_at(i, w + 1)) / info_[i].cost;
  }

  static int proportional_shards(const job_view& j, int workers) {
    const double ratio = double(j.requested_shards) / double(j.requested_workers);
    return std::clamp(int(std::lround(ratio * workers)), j.min_shards, j.max_shards);
  }

  static int room(const planner& plan, std::size_t i) {
    const auto& j = plan.job(i);
    if (j.per_worker.gpus <= 0) return j.max_workers;
    return plan.pool().free_gpus() / j.per_worker.gpus;
  }

  bool start(planner& plan, std::size_t i) {
    const auto& j = jobs_[i];
    if (!j.elastic) return plan.set(i, j.requested_workers, j.requested_shards);
    if (info_[i].known) return plan.set(i, j.min_workers, shards_at(i, j.min_workers));
    const int hi = std::min(j.requested_workers, room(plan, i));
    for (int w = hi; w >= j.min_workers; --w)
      if (plan.set(i, w, proportional_shards(j, w))) return true;
    return false;
  }

  /// Takes workers from predicted jobs, least loss per unit first, until job i starts.
  bool start_by_reclaiming(planner& plan, std::size_t i) {
    std::vector<std::array<int, 3>> undo;          // job, workers, shards
    using entry = std::pair<double, std::size_t>;  // loss per unit, job: smallest first
    std::priority_queue<entry, std::vector<entry>, std::greater<>> donors;
    for (std::size_t r = 0; r < jobs_.size(); ++r) {
      if (r == i || !info_[r].known || plan.workers(r) <= jobs_[r].min_workers) continue;
      const int w = plan.workers(r);
      donors.push({(time_at(r, w - 1) - time_at(r, w)) / info_[r].cost, r});
    }
    bool started = false;
    while (!started && !donors.empty()) {
      const std::size_t r = donors.top().second;
      donors.pop();
      const int w = plan.workers(r);
      undo.push_back({int(r), w, plan.shards(r)});
      plan.set(r, w - 1, std::min(plan.shards(r), shards_at(r, w - 1)));
      if (w - 1 > jobs_[r].min_workers)
        donors.push({(time_at(r, w - 2) - time_at(r, w - 1)) / info_[r].cost, r});
      started = start(plan, i);
    }
    if (!started) {
      for (auto it = undo.rbegin(); it != undo.rend(); ++it)
        plan.set(std::size_t((*it)[0]), (*it)[1], (*it)[2]);
    }
    return started;
  }

  /// Gives free resources to the job with the largest gain per unit, one worker at a time.
  void grow(planner& plan, const std::vector<bool>& frozen) {
    struct entry {
      double gain;
      std::size_t job;
      int workers;
      bool operator<(const entry& o) const {  // max-heap on gain; the earlier job on ties
        return gain != o.gain ? gain < o.gain : job > o.job;
      }
    };
    std::priority_queue<entry> heap;
    // Whether one more worker of a shape fits anywhere, asked once per shape: on a full cluster
    // this skips every job without computing its gain.
    std::vector<std::pair<resources, bool>> fits;
    const auto room_for = [&](const resources& demand) {
      for (const auto& [d, ok] : fits)
        if (d == demand) return ok;
      fits.emplace_back(demand, plan.pool().find(demand).has_value());
      return fits.back().second;
    };
    for (std::size_t i = 0; i < jobs_.size(); ++i) {
      const int w = plan.workers(i);
      if (w == 0 || frozen[i] || !info_[i].known || w >= jobs_[i].max_workers) continue;
      if (!room_for(jobs_[i].per_worker)) continue;
      const double g = gain(i, w);
      if (g > 0) heap.push({g, i, w});
    }
    while (!heap.empty()) {
      const entry e = heap.top();
      heap.pop();
      const std::size_t i = e.job;
      const int w = plan.workers(i);
      if (w != e.workers) continue;
      if (!plan.set(i, w + 1, shards_at(i, w + 1))) continue;  // does not fit: out of the race
      if (w + 1 < jobs_[i].max_workers) {
        const double g = gain(i, w + 1);
        if (g > 0) heap.push({g, i, w + 1});
      }
    }
  }

  /// Step 4, first part: a running job past its best worker count (the model predicts it
  /// faster with fewer) gives the extra workers back, if that saves more than the pause.
  void shed(planner& plan, std::span<const job_view> jobs) {
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const auto& j = jobs[i];
      if (j.state != job_state::running || !info_[i].known || plan.changed(i)) continue;
      int w = j.workers;
      while (w > j.min_workers && time_at(i, w - 1) < time_at(i, w)) --w;
      if (w == j.workers) continue;
      if (current_time(i) - time_at(i, w) > options_.rescale_cost_s)
        plan.set(i, w, std::min(j.shards, shards_at(i, w)));
    }
  }

  /// Step 4 (see the class comment).
  void rebalance(planner& plan, std::span<const job_view> jobs) {
    // Heap entries carry their job's version; a move bumps it, so older entries are skipped.
    struct entry {
      double value;
      std::size_t job;
      int version;
    };
    const auto larger_first = [](const entry& a, const entry& b) {
      return a.value != b.value ? a.value < b.value : a.job > b.job;
    };
    const auto smaller_first = [](const entry& a, const entry& b) {
      return a.value != b.value ? a.value > b.value : a.job > b.job;
    };
    std::priority_queue<entry, std::vector<entry>, decltype(larger_first)> receivers(larger_first);
    std::priority_queue<entry, std::vector<entry>, decltype(smaller_first)> donors(smaller_first);
    std::vector<int> version(jobs.size(), 0);
    std::vector<bool> dropped(jobs.size(), false);
    const auto push = [&](std::size_t i) {
      const int w = plan.workers(i);
      if (w == 0 || !info_[i].known) return;
      if (w < jobs[i].max_workers) receivers.push({gain(i, w), i, version[i]});
      if (w > jobs[i].min_workers)
        donors.push({(time_at(i, w - 1) - time_at(i, w)) / info_[i].cost, i, version[i]});
    };
    std::vector<bool> changed_before(jobs.size());
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      changed_before[i] = plan.changed(i);
      push(i);
    }
    std::vector<std::array<int, 3>> undo;  // job, workers, shards: the state before each move
    const std::size_t max_moves = 2 * jobs.size();
    for (std::size_t moves = 0; moves < max_moves; ++moves) {
      while (!receivers.empty() && (receivers.top().version != version[receivers.top().job] ||
                                    dropped[receivers.top().job]))
        receivers.pop();
      while (!donors.empty() && donors.top().version != version[donors.top().job]) donors.pop();
      if (receivers.empty() || donors.empty()) break;
      const entry r = receivers.top(), d = donors.top();
      // A job that is both the best receiver and the cheapest donor: every other donor loses
      // more than it, and it loses at least what it would gain (diminishing returns), so no
      // move pays.
      if (r.job == d.job) break;
      if (!(r.value > options_.move_margin * d.value)) break;
      if (!move(plan, d.job, r.job, undo)) {
        dropped[r.job] = true;
        continue;
      }
      ++version[d.job];
      ++version[r.job];
      push(d.job);
      push(r.job);
    }
    if (undo.empty()) return;
    // Keep the moves only if they shorten the sum of predicted times by more than the pauses.
    std::vector<bool> seen(jobs.size(), false);
    double delta = 0;
    for (const auto& u : undo) {
      const std::size_t i = std::size_t(u[0]);
      if (seen[i]) continue;
      seen[i] = true;  // the first record of a job is its state before every move
      delta += time_at(i, plan.workers(i)) - time_at(i, u[1]);
      if (jobs[i].state == job_state::running && !changed_before[i] && plan.changed(i))
        delta += options_.rescale_cost_s;
    }
    if (delta < 0) return;
    for (auto it = undo.rbegin(); it != undo.rend(); ++it)
      plan.set(std::size_t((*it)[0]), (*it)[1], (*it)[2]);
  }

  /// Moves one worker from d to r; false (nothing changed) if r's new worker does not fit.
  bool move(planner& plan, std::size_t d, std::size_t r, std::vector<std::array<int, 3>>& undo) {
    const int wd = plan.workers(d), sd = plan.shards(d);
    const int wr = plan.workers(r), sr = plan.shards(r);
    plan.set(d, wd - 1, std::min(sd, shards_at(d, wd - 1)));
    if (!plan.set(r, wr + 1, shards_at(r, wr + 1))) {
      plan.set(d, wd, sd);
      return false;
    }
    undo.push_back({int(d), wd, sd});
    undo.push_back({int(r), wr, sr});
    return true;
  }

  policy_options options_;
  std::vector<job_info> info_;
  std::span<const job_view> jobs_;
  /// When steps 4 and 5 last ran. Lost on a swap, which only makes the next decision run them.
  std::optional<time_point> last_rebalance_;
};

}  // namespace

std::unique_ptr<policy> make_coach(const policy_options& options) {
  return std::make_unique<coach_policy>(options);
}

}  // namespace coach::scheduler::detail
