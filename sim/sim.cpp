#include "sim/sim.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <queue>
#include <random>
#include <unordered_map>

#include "common/enforce.hpp"
#include "common/format.hpp"
#include "report/job_report.hpp"
#include "scheduler/executor.hpp"

namespace coach::scheduler {
namespace {

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr int max_nodes = 1 << 20;
constexpr int max_gpus_per_node = 1024;

struct sim_job {
  // From the trace.
  std::uint64_t id = 0;
  std::size_t line = 0;
  double submit = 0;
  std::string model;
  perf_theta theta{};
  double param_bytes = 0;  ///< the model's parameters; 0: no network time
  double steps = 0;        ///< steps of one epoch at one worker
  bool elastic = true;
  int min_w = 1, max_w = 1, req_w = 1;
  int min_s = 1, max_s = 1, req_s = 1;
  double epochs_total = 0;
  // Simulated.
  bool finished = false;
  job_state state = job_state::queued;
  double state_since = 0;
  int w = 0, s = 0;
  std::vector<std::uint32_t> wn, sn;  ///< node of each worker and shard
  double done = 0;                    ///< epochs, as of `last`
  double last = 0;                    ///< when done and gpu_seconds were brought up to date
  double paused_until = 0;            ///< no progress before this (a rescale or resume in progress)
  double speed = 0;                   ///< epochs per second at (w, s) and this placement
  double net_s = 0;                   ///< network seconds per epoch at this placement
  double cross_per_epoch = 0;         ///< bytes across hosts per epoch at this placement
  std::uint64_t gen = 0;              ///< bumped by every change: older events are stale
  int samples = 0;                    ///< epochs reported since the last allocation change
  double first_start = -1;
  double finish = -1;
  double gpu_seconds = 0;
  int starts = 0, resizes = 0, suspensions = 0, max_w_seen = 0;
  std::size_t view_slot = 0;  ///< position in the views of the current decision
};

enum class event_kind : std::uint8_t { completion, epoch };

struct event {
  double time;
  std::uint64_t seq;  ///< insertion order: ties are processed first in, first out
  event_kind kind;
  std::uint32_t job;
  std::uint64_t gen;
};

struct later {
  bool operator()(const event& a, const event& b) const {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  }
};

const resources worker_demand{1, 1.0, 0};
const resources shard_demand{0, 1.0, 0};

class simulator {
 public:
  simulator(std::vector<sim_job> jobs, const sim_options& options, policy_holder holder,
            executor exec)
      : options_(options),
        jobs_(std::move(jobs)),
        holder_(std::move(holder)),
        exec_(std::move(exec)) {
    for (int n = 0; n < options.nodes; ++n) {
      const resources total{options.gpus_per_node, options.cpus_per_node, 0};
      pool_.add_node(std::uint32_t(n), total, total);
    }
    noise_.seed(options.seed);
  }

  result<sim_result> run(std::string_view policy_name) {
    const auto wall_start = std::chrono::steady_clock::now();
    std::vector<std::size_t> arrivals(jobs_.size());
    for (std::size_t i = 0; i < arrivals.size(); ++i) arrivals[i] = i;
    std::stable_sort(arrivals.begin(), arrivals.end(), [&](std::size_t a, std::size_t b) {
      return jobs_[a].submit < jobs_[b].submit;
    });
    const auto& changes = options_.policy_changes;
    std::size_t next_arrival = 0, next_change = 0, finished = 0;
    double revisit = inf;  // when the policy asked to be called again; inf: never
    while (finished < jobs_.size()) {
      double now = inf;
      if (next_arrival < arrivals.size()) now = jobs_[arrivals[next_arrival]].submit;
      if (next_change < changes.size()) now = std::min(now, changes[next_change].first);
      now = std::min(now, revisit);
      while (!events_.empty() && stale(events_.top())) events_.pop();
      if (!events_.empty()) now = std::min(now, events_.top().time);
      if (now == inf) break;

      bool decide = false;
      while (next_arrival < arrivals.size() && jobs_[arrivals[next_arrival]].submit <= now) {
        arrive(arrivals[next_arrival++], now);
        decide = true;
      }
      while (next_change < changes.size() && changes[next_change].first <= now) {
        auto swapped = holder_.set(changes[next_change++].second);
        COACH_ENFORCE(swapped.has_value(), "policy names were checked before the run");
        decide = true;
      }
      if (revisit <= now) {
        revisit = inf;
        decide = true;
      }
      while (!events_.empty() && events_.top().time <= now) {
        const event e = events_.top();
        events_.pop();
        if (stale(e)) continue;
        auto& j = jobs_[e.job];
        advance(j, now);
        if (e.kind == event_kind::completion) {
          complete(j, now);
          ++finished;
          decide = true;
        } else {
          measure(j);
          schedule(j, now);
        }
      }
      if (!decide) continue;
      const double next = make_decision(now);
      revisit = next > now ? next : inf;
      if (running_ == 0 && finished < jobs_.size() && next_arrival == arrivals.size() &&
          next_change == changes.size()) {
        const auto first =
            std::find_if(jobs_.begin(), jobs_.end(), [](const sim_job& j) { return !j.finished; });
        return fail(errc::internal,
                    "policy '{}' left {} job(s) waiting on an idle cluster (the first: trace "
                    "line {})",
                    holder_.name(), jobs_.size() - finished, first->line);
      }
    }
    COACH_ENFORCE(finished == jobs_.size(), "every job ends");
    auto out = figures(policy_name);
    out.wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    return out;
  }

 private:
  bool stale(const event& e) const { return e.gen != jobs_[e.job].gen; }

  void push(event_kind kind, std::size_t j, double time) {
    events_.push(event{time, seq_++, kind, std::uint32_t(j), jobs_[j].gen});
  }

  void arrive(std::size_t i, double now) {
    auto& j = jobs_[i];
    j.state = job_state::queued;
    j.state_since = j.submit;
    j.last = now;
    active_.push_back(i);
  }

  /// Brings a job's progress and GPU time up to `now`.
  void advance(sim_job& j, double now) {
    if (j.state == job_state::running) {
      const double from = std::max(j.last, j.paused_until);
      if (now > from) {
        const double done = std::min(j.epochs_total, j.done + (now - from) * j.speed);
        cross_bytes_ += (done - j.done) * j.cross_per_epoch;
        network_s_ += (done - j.done) * j.net_s;
        j.done = done;
      }
      j.gpu_seconds += double(j.w) * (now - j.last);
    }
    j.last = now;
  }

  /// Invalidates a job's events and, if it runs, schedules its completion and next measured
  /// epoch.
  void schedule(sim_job& j, double now) {
    ++j.gen;
    if (j.state != job_state::running) return;
    const std::size_t i = std::size_t(&j - jobs_.data());
    const double resume = std::max(now, j.paused_until);
    push(event_kind::completion, i, resume + (j.epochs_total - j.done) / j.speed);
    if (j.samples < options_.samples_per_config) {
      const double next = std::floor(j.done + 1e-9) + 1;
      if (next < j.epochs_total) push(event_kind::epoch, i, resume + (next - j.done) / j.speed);
    }
  }

  void measure(sim_job& j) {
    const double factor = std::max(0.1, 1.0 + options_.noise * normal());
    holder_.model()->observe(j.id, j.model, j.w, j.s,
                             (epoch_seconds(j.theta, j.w, j.s) + j.net_s) * factor);
    ++j.samples;
  }

  double normal() {
    // Box–Muller on mt19937_64, whose output the standard fixes (std::normal_distribution's
    // is not), so a seed gives the same run with any standard library.
    const double u1 = (double(noise_() >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = (double(noise_() >> 11) + 0.5) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
  }

  void release(sim_job& j) {
    for (auto n : j.wn) pool_.give(n, worker_demand);
    for (auto n : j.sn) pool_.give(n, shard_demand);
    j.wn.clear();
    j.sn.clear();
  }

  void complete(sim_job& j, double now) {
    j.done = j.epochs_total;
    release(j);
    j.state = job_state::succeeded;
    j.finished = true;
    j.finish = now;
    j.w = j.s = 0;
    ++j.gen;
    --running_;
    // Left in active_ and skipped, which is compacted once half of it is finished: active_ stays
    // in arrival order (policies get their views in submission order and need not sort them)
    // without an O(jobs) erase per completion.
    ++finished_in_active_;
    if (2 * finished_in_active_ > active_.size()) {
      std::erase_if(active_, [&](std::size_t i) { return jobs_[i].finished; });
      finished_in_active_ = 0;
    }
    holder_.model()->forget_job(j.id);
  }

  /// Decides and applies the actions; returns when the policy wants to be called again (inf:
  /// only when something happens).
  double make_decision(double now) {
    const cluster_view cluster = pool_.view();
    views_.clear();
    views_.reserve(active_.size());
    for (std::size_t i : active_) {
      auto& j = jobs_[i];
      if (j.finished) continue;
      j.view_slot = views_.size();
      job_view v;
      v.id = j.id;
      v.state = j.state;
      v.submitted = at_seconds(j.submit);
      v.state_since = at_seconds(j.state_since);
      v.model = j.model;
      v.elastic = j.elastic;
      v.min_workers = j.min_w;
      v.max_workers = j.max_w;
      v.requested_workers = j.req_w;
      v.min_shards = j.min_s;
      v.max_shards = j.max_s;
      v.requested_shards = j.req_s;
      v.per_worker = worker_demand;
      v.per_shard = shard_demand;
      v.workers = j.w;
      v.shards = j.s;
      v.worker_nodes = j.wn;
      v.shard_nodes = j.sn;
      v.epochs_total = j.epochs_total;
      double done = j.done;
      if (j.state == job_state::running)
        done += std::max(0.0, now - std::max(j.last, j.paused_until)) * j.speed;
      v.epochs_done = std::min(done, j.epochs_total);
      views_.push_back(v);
    }
    const decision d = holder_.decide(cluster, views_, at_seconds(now));
    ++decisions_;
    for (const action& a : d.actions) {
      ++actions_;
      const bool known = a.job >= 1 && a.job <= jobs_.size();
      sim_job* j = known ? &jobs_[a.job - 1] : nullptr;
      if (!j || j->finished || j->view_slot >= views_.size() || views_[j->view_slot].id != a.job) {
        reject(coach::format("{}: no such job waiting or running", to_string(a)));
        continue;
      }
      advance(*j, now);
      auto applied = exec_.apply(pool_, views_[j->view_slot], a, {}, j->wn, j->sn);
      if (!applied) {
        reject(applied.error().message);
        continue;
      }
      const bool was_running = j->state == job_state::running;
      switch (a.kind) {
        case action::kind_type::start:
          if (j->first_start < 0) {
            j->first_start = now;
          } else {
            j->paused_until = now + options_.rescale_cost_s;  // restore from the checkpoint
          }
          j->state = job_state::running;
          j->state_since = now;
          ++j->starts;
          break;
        case action::kind_type::resize:
          j->paused_until = now + options_.rescale_cost_s;
          ++j->resizes;
          ++resizes_;
          break;
        case action::kind_type::suspend:
          j->state = job_state::suspended;
          j->state_since = now;
          ++j->suspensions;
          ++suspensions_;
          break;
      }
      j->w = int(j->wn.size());
      j->s = int(j->sn.size());
      j->max_w_seen = std::max(j->max_w_seen, j->w);
      network(*j);
      j->speed = j->w > 0 ? 1.0 / (epoch_seconds(j->theta, j->w, j->s) + j->net_s) : 0.0;
      j->samples = 0;
      if (was_running && j->state != job_state::running) --running_;
      if (!was_running && j->state == job_state::running) ++running_;
      schedule(*j, now);
    }
    return d.revisit_at ? to_seconds(*d.revisit_at) : inf;
  }

  /// A job's network time and bytes per epoch at its placement (the file comment).
  void network(sim_job& j) const {
    j.net_s = j.cross_per_epoch = 0;
    if (j.w == 0 || j.s == 0 || j.param_bytes <= 0 || j.steps <= 0) return;
    const double pair = 2 * j.param_bytes / double(j.s);  // one worker with one shard, per step
    link_.clear();
    double cross = 0;
    for (auto sn : j.sn)
      for (auto wn : j.wn)
        if (wn != sn) {
          link_[wn] += pair;
          link_[sn] += pair;
          cross += pair;
        }
    double busiest = 0;
    for (const auto& [node, bytes] : link_) busiest = std::max(busiest, bytes);
    const double steps = j.steps / double(j.w);
    j.net_s = steps * busiest / (options_.link_gbps * 1e9 / 8);
    j.cross_per_epoch = steps * cross;
  }

  void reject(std::string why) {
    if (rejected_ == 0) first_rejection_ = std::move(why);
    ++rejected_;
  }

  sim_result figures(std::string_view policy_name) const {
    sim_result r;
    r.policy = std::string(policy_name);
    r.placement = std::string(exec_.placement_name());
    r.cross_host_bytes = cross_bytes_;
    r.network_s = network_s_;
    r.jobs = jobs_.size();
    r.decisions = decisions_;
    r.actions = actions_;
    r.resizes = resizes_;
    r.suspensions = suspensions_;
    r.rejected = rejected_;
    r.first_rejection = first_rejection_;
    r.predictions = holder_.model()->predictions();
    r.model_error = holder_.model()->mean_abs_rel_error();
    if (jobs_.empty()) return r;
    double first_submit = inf, last_finish = 0, jct = 0, queue = 0, gpu_seconds = 0;
    std::vector<double> jcts;
    jcts.reserve(jobs_.size());
    for (const auto& j : jobs_) {
      first_submit = std::min(first_submit, j.submit);
      last_finish = std::max(last_finish, j.finish);
      jcts.push_back(j.finish - j.submit);
      jct += j.finish - j.submit;
      queue += j.first_start - j.submit;
      gpu_seconds += j.gpu_seconds;
      r.per_job.push_back(sim_job_result{j.id, j.submit, j.first_start, j.finish, j.epochs_total,
                                         j.done, j.starts, j.resizes, j.suspensions, j.max_w_seen});
    }
    const double n = double(jobs_.size());
    std::sort(jcts.begin(), jcts.end());
    r.makespan_s = last_finish - first_submit;
    r.avg_jct_s = jct / n;
    r.p95_jct_s = jcts[std::size_t(std::ceil(0.95 * n)) - 1];
    r.avg_queue_s = queue / n;
    const double capacity = double(pool_.total_gpus()) * r.makespan_s;
    r.gpu_utilization = capacity > 0 ? gpu_seconds / capacity : 0.0;
    return r;
  }

  sim_options options_;
  std::vector<sim_job> jobs_;
  policy_holder holder_;
  executor exec_;
  resource_pool pool_;
  mutable std::unordered_map<std::uint32_t, double> link_;  ///< network()'s scratch
  double cross_bytes_ = 0;
  double network_s_ = 0;
  std::priority_queue<event, std::vector<event>, later> events_;
  std::uint64_t seq_ = 0;
  std::vector<std::size_t> active_;  ///< arrived jobs, by arrival (and some finished ones)
  std::size_t finished_in_active_ = 0;
  std::vector<job_view> views_;
  std::mt19937_64 noise_;
  std::size_t running_ = 0;
  std::size_t decisions_ = 0, actions_ = 0, resizes_ = 0, suspensions_ = 0, rejected_ = 0;
  std::string first_rejection_;
};

/// The simulator's jobs from a trace, checked against the models and the cluster.
result<std::vector<sim_job>> build_jobs(const trace& t, const model_table& models,
                                        const sim_options& o) {
  const int total = o.nodes * o.gpus_per_node;
  std::vector<sim_job> out;
  out.reserve(t.jobs.size());
  for (std::size_t k = 0; k < t.jobs.size(); ++k) {
    const auto& tj = t.jobs[k];
    const model_curve* curve = models.find(tj.model);
    if (!curve)
      return fail(errc::invalid_argument, "{}:{}: model '{}' is not in the models file{}", t.source,
                  tj.line, tj.model, tj.model == "default" ? "" : " (give the file with --models)");
    if (tj.num_gpus > total)
      return fail(errc::invalid_argument,
                  "{}:{}: num_gpus {} is more than the cluster's {} GPUs ({} x {})", t.source,
                  tj.line, tj.num_gpus, total, o.nodes, o.gpus_per_node);
    if (!tj.elastic && (tj.min_gpus || tj.max_gpus))
      return fail(errc::invalid_argument,
                  "{}:{}: min_gpus and max_gpus are for elastic jobs; this one has elastic 0",
                  t.source, tj.line);
    sim_job j;
    j.id = k + 1;
    j.line = tj.line;
    j.submit = tj.submit_time;
    j.model = tj.model;
    j.theta = curve->theta;
    j.param_bytes = curve->param_mb * 1e6;
    j.steps = curve->steps;
    j.elastic = tj.elastic;
    j.req_w = tj.num_gpus;
    if (tj.elastic) {
      j.min_w = tj.min_gpus.value_or(1);
      const int scaled = int(std::ceil(o.max_scale * tj.num_gpus));
      j.max_w = tj.max_gpus.value_or(std::clamp(scaled, tj.num_gpus, total));
      if (j.max_w > total)
        return fail(errc::invalid_argument, "{}:{}: max_gpus {} is more than the cluster's {} GPUs",
                    t.source, tj.line, j.max_w, total);
    } else {
      j.min_w = j.max_w = tj.num_gpus;
    }
    j.req_s = tj.num_shards.value_or(best_shards(j.theta, j.req_w, 1, j.req_w));
    j.min_s = tj.elastic ? 1 : j.req_s;
    j.max_s = tj.elastic ? std::max(j.req_s, j.max_w) : j.req_s;
    j.epochs_total = tj.duration / epoch_seconds(j.theta, j.req_w, j.req_s);
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

result<sim_result> simulate(const trace& t, const model_table& models, std::string_view policy,
                            const sim_options& options) {
  // Bounds keep a typo from allocating the machine away (a node costs ~100 bytes).
  if (options.nodes < 1 || options.nodes > max_nodes || options.gpus_per_node < 1 ||
      options.gpus_per_node > max_gpus_per_node)
    return fail(errc::invalid_argument,
                "the cluster needs 1 to {} nodes of 1 to {} GPUs (got {} and {})", max_nodes,
                max_gpus_per_node, options.nodes, options.gpus_per_node);
  if (options.cpus_per_node < 1)
    return fail(errc::invalid_argument, "cpus_per_node {} is less than one worker's 1 CPU",
                options.cpus_per_node);
  if (!(options.link_gbps > 0))
    return fail(errc::invalid_argument, "link_gbps must be > 0 (got {})", options.link_gbps);
  auto exec = executor::make({options.placement, options.seed});
  if (!exec) return std::unexpected(exec.error());
  if (!(options.rescale_cost_s >= 0) || !(options.noise >= 0) || !(options.max_scale >= 1))
    return fail(errc::invalid_argument,
                "rescale_cost_s and noise must be >= 0 and max_scale >= 1 (got {}, {}, {})",
                options.rescale_cost_s, options.noise, options.max_scale);
  for (const auto& [time, name] : options.policy_changes) {
    if (auto p = make_policy(name); !p) return std::unexpected(p.error());
  }
  auto jobs = build_jobs(t, models, options);
  if (!jobs) return std::unexpected(jobs.error());
  policy_options po = options.policy;
  po.rescale_cost_s = options.rescale_cost_s;
  if (!po.model) po.model = std::make_shared<perf_model>();
  auto holder = policy_holder::make(policy, po);
  if (!holder) return std::unexpected(holder.error());
  simulator sim(std::move(*jobs), options, std::move(*holder), std::move(*exec));
  return sim.run(policy);
}

json to_json_value(const sim_result& r) {
  return json{{"policy", r.policy},
              {"placement", r.placement},
              {"jobs", r.jobs},
              {"makespan_s", json_figure(r.makespan_s)},
              {"avg_jct_s", json_figure(r.avg_jct_s)},
              {"p95_jct_s", json_figure(r.p95_jct_s)},
              {"avg_queue_s", json_figure(r.avg_queue_s)},
              {"gpu_utilization", json_figure(r.gpu_utilization)},
              {"wall_s", json_figure(r.wall_s)},
              {"decisions", r.decisions},
              {"actions", r.actions},
              {"resizes", r.resizes},
              {"suspensions", r.suspensions},
              {"rejected", r.rejected},
              {"predictions", r.predictions},
              {"model_error", json_figure(r.model_error)},
              {"cross_host_bytes", json_figure(r.cross_host_bytes)},
              {"network_s", json_figure(r.network_s)}};
}

std::string to_json(const sim_result& r) {
  return to_json_value(r).dump();
}

}  // namespace coach::scheduler
