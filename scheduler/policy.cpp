// The policy seam: factory, holder, the decision contract (check_decision) and the planner the
// policies share. The policies themselves: policy_fifo.cpp (fifo, elastic-fifo),
// policy_round_robin.cpp, policy_coach.cpp.

#include "scheduler/policy.hpp"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>

#include "common/enforce.hpp"
#include "common/format.hpp"
#include "scheduler/policy_detail.hpp"

namespace coach::scheduler {

// Each policy source defines its maker.
namespace detail {
std::unique_ptr<policy> make_fifo(const policy_options& options);
std::unique_ptr<policy> make_elastic_fifo(const policy_options& options);
std::unique_ptr<policy> make_round_robin(const policy_options& options);
std::unique_ptr<policy> make_coach(const policy_options& options);
}  // namespace detail

namespace {

constexpr std::array<std::string_view, 4> known_policies{"fifo", "elastic-fifo", "round-robin",
                                                         "coach"};

/// Takes (or gives) what moving a job from its nodes to (workers, shards) needs: frees first
/// (highest ranks), then takes; all or nothing. Nodes no longer in the pool (a dead node) are
/// dropped without giving anything back.
bool change(resource_pool& pool, const resources& per_worker, const resources& per_shard,
            std::vector<std::uint32_t>& wn, std::vector<std::uint32_t>& sn, int workers,
            int shards) {
  const std::vector<std::uint32_t> old_w = wn, old_s = sn;
  std::vector<std::uint32_t> freed_w, freed_s;
  while (int(wn.size()) > workers) {
    if (pool.contains(wn.back())) {
      pool.give(wn.back(), per_worker);
      freed_w.push_back(wn.back());
    }
    wn.pop_back();
  }
  while (int(sn.size()) > shards) {
    if (pool.contains(sn.back())) {
      pool.give(sn.back(), per_shard);
      freed_s.push_back(sn.back());
    }
    sn.pop_back();
  }
  const int add_w = std::max(0, workers - int(wn.size()));
  const int add_s = std::max(0, shards - int(sn.size()));
  if (pool.take_all(per_worker, add_w, per_shard, add_s, wn, sn)) return true;
  // Undo the frees: the pool is back to where it was after them, so the nodes still fit.
  for (auto it = freed_w.rbegin(); it != freed_w.rend(); ++it) pool.take_on(*it, per_worker);
  for (auto it = freed_s.rbegin(); it != freed_s.rend(); ++it) pool.take_on(*it, per_shard);
  wn = old_w;
  sn = old_s;
  return false;
}

}  // namespace

std::string_view to_string(action::kind_type k) noexcept {
  switch (k) {
    case action::kind_type::start:
      return "start";
    case action::kind_type::resize:
      return "resize";
    case action::kind_type::suspend:
      return "suspend";
  }
  return "unknown";
}

std::string to_string(const action& a) {
  if (a.kind == action::kind_type::suspend) return coach::format("suspend job {}", a.job);
  return coach::format("{} job {} ({} workers, {} shards)", to_string(a.kind), a.job, a.workers,
                       a.shards);
}

std::span<const std::string_view> policy_names() noexcept {
  return known_policies;
}

result<std::unique_ptr<policy>> make_policy(std::string_view name, const policy_options& options) {
  if (name == "fifo") return detail::make_fifo(options);
  if (name == "elastic-fifo") return detail::make_elastic_fifo(options);
  if (name == "round-robin") return detail::make_round_robin(options);
  if (name == "coach") {
    policy_options o = options;
    if (!o.model) o.model = std::make_shared<perf_model>();
    return detail::make_coach(o);
  }
  return fail(errc::invalid_argument,
              "unknown policy '{}' (known: fifo, elastic-fifo, "
              "round-robin, coach)",
              name);
}

// --- policy_holder ---------------------------------------------------------------------------

result<policy_holder> policy_holder::make(std::string_view initial, policy_options options) {
  if (!options.model) options.model = std::make_shared<perf_model>();
  auto p = make_policy(initial, options);
  if (!p) return std::unexpected(p.error());
  return policy_holder(std::move(options), std::move(*p));
}

policy_holder::policy_holder(policy_options options, std::unique_ptr<policy> initial)
    : options_(std::move(options)),
      mutex_(std::make_unique<std::mutex>()),
      active_(std::move(initial)) {}

policy_holder::policy_holder(policy_holder&&) noexcept = default;
policy_holder& policy_holder::operator=(policy_holder&&) noexcept = default;
policy_holder::~policy_holder() = default;

result<void> policy_holder::set(std::string_view name) {
  // Made outside the lock: a decision in progress is not held up by the construction.
  auto p = make_policy(name, options_);
  if (!p) return std::unexpected(p.error());
  std::lock_guard lock(*mutex_);
  active_ = std::move(*p);
  return {};
}

std::string policy_holder::name() const {
  std::lock_guard lock(*mutex_);
  return std::string(active_->name());
}

decision policy_holder::decide(const cluster_view& cluster, std::span<const job_view> jobs,
                               time_point now) {
  std::lock_guard lock(*mutex_);
  return active_->decide(cluster, jobs, now);
}

// --- the decision contract -------------------------------------------------------------------

namespace detail {

bool frees_only(const job_view& job, const action& a) noexcept {
  if (a.kind == action::kind_type::suspend) return true;
  if (a.kind == action::kind_type::start) return false;
  return a.workers <= job.workers && a.shards <= job.shards;
}

}  // namespace detail

result<void> check_action(const job_view& job, const action& a) {
  const std::string what = to_string(a);
  switch (a.kind) {
    case action::kind_type::start:
      if (!job.waiting())
        return fail(errc::invalid_argument, "{}: the job is {}, not queued or suspended", what,
                    to_string(job.state));
      break;
    case action::kind_type::resize:
      if (job.state != job_state::running)
        return fail(errc::invalid_argument, "{}: the job is {}, not running", what,
                    to_string(job.state));
      if (!job.elastic) return fail(errc::invalid_argument, "{}: the job is not elastic", what);
      if (a.workers == job.workers && a.shards == job.shards)
        return fail(errc::invalid_argument, "{}: the job has that already", what);
      break;
    case action::kind_type::suspend:
      if (job.state != job_state::running)
        return fail(errc::invalid_argument, "{}: the job is {}, not running", what,
                    to_string(job.state));
      return {};
  }
  if (a.workers < job.min_workers || a.workers > job.max_workers)
    return fail(errc::invalid_argument, "{}: workers outside the job's range [{}, {}]", what,
                job.min_workers, job.max_workers);
  if (a.shards < job.min_shards || a.shards > job.max_shards)
    return fail(errc::invalid_argument, "{}: shards outside the job's range [{}, {}]", what,
                job.min_shards, job.max_shards);
  if (!job.elastic && (a.workers != job.requested_workers || a.shards != job.requested_shards))
    return fail(errc::invalid_argument,
                "{}: the job is not elastic and asked for {} workers and {} shards", what,
                job.requested_workers, job.requested_shards);
  return {};
}

result<void> apply_action(resource_pool& pool, const job_view& job, const action& a,
                          std::vector<std::uint32_t>& worker_nodes,
                          std::vector<std::uint32_t>& shard_nodes) {
  if (auto ok = check_action(job, a); !ok) return ok;
  const int w = a.kind == action::kind_type::suspend ? 0 : a.workers;
  const int s = a.kind == action::kind_type::suspend ? 0 : a.shards;
  if (!change(pool, job.per_worker, job.per_shard, worker_nodes, shard_nodes, w, s))
    return fail(errc::invalid_argument, "{}: does not fit the free resources", to_string(a));
  return {};
}

result<void> check_decision(const cluster_view& cluster, std::span<const job_view> jobs,
                            const decision& d) {
  std::unordered_map<std::uint64_t, std::size_t> by_id;
  for (std::size_t i = 0; i < jobs.size(); ++i) by_id.emplace(jobs[i].id, i);
  resource_pool pool(cluster);
  std::unordered_set<std::uint64_t> seen;
  bool taken = false;
  for (std::size_t k = 0; k < d.actions.size(); ++k) {
    const action& a = d.actions[k];
    auto it = by_id.find(a.job);
    if (it == by_id.end())
      return fail(errc::invalid_argument, "action {}: {}: no such job", k, to_string(a));
    if (!seen.insert(a.job).second)
      return fail(errc::invalid_argument, "action {}: {}: the job has an earlier action", k,
                  to_string(a));
    const job_view& job = jobs[it->second];
    const bool frees = detail::frees_only(job, a);
    if (frees && taken)
      return fail(errc::invalid_argument, "action {}: {}: frees resources after a take", k,
                  to_string(a));
    taken = taken || !frees;
    std::vector<std::uint32_t> wn(job.worker_nodes.begin(), job.worker_nodes.end());
    std::vector<std::uint32_t> sn(job.shard_nodes.begin(), job.shard_nodes.end());
    if (int(wn.size()) != job.workers || int(sn.size()) != job.shards)
      return fail(errc::invalid_argument,
                  "job {}: {} workers and {} shards but {} worker and {} shard nodes", job.id,
                  job.workers, job.shards, wn.size(), sn.size());
    auto ok = apply_action(pool, job, a, wn, sn);
    if (!ok) return fail(errc::invalid_argument, "action {}: {}", k, ok.error().message);
  }
  return {};
}

// --- planner ---------------------------------------------------------------------------------

namespace detail {

planner::planner(const cluster_view& cluster, std::span<const job_view> jobs)
    : cluster_(cluster), jobs_(jobs), pool_(cluster), targets_(jobs.size()) {
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    COACH_ENFORCE(int(jobs[i].worker_nodes.size()) == jobs[i].workers &&
                      int(jobs[i].shard_nodes.size()) == jobs[i].shards,
                  "a job view lists the node of each of its workers and shards");
    targets_[i].workers = jobs[i].workers;
    targets_[i].shards = jobs[i].shards;
  }
}

void planner::shed_overcommit() {
  // Youngest first: by submission, latest first.
  std::vector<std::size_t> running;
  for (std::size_t i = 0; i < jobs_.size(); ++i)
    if (jobs_[i].state == job_state::running && jobs_[i].elastic) running.push_back(i);
  std::sort(running.begin(), running.end(), [&](std::size_t a, std::size_t b) {
    return jobs_[a].submitted != jobs_[b].submitted ? jobs_[a].submitted > jobs_[b].submitted
                                                    : jobs_[a].id > jobs_[b].id;
  });
  for (std::size_t pos = 0; pos < pool_.size(); ++pos) {
    const std::uint32_t node = pool_.id_at(pos);
    const auto over = [&] { return pool_.free(node).cpus < -1e-9; };
    for (std::size_t k = 0; k < running.size() && over(); ++k) {
      const std::size_t i = running[k];
      while (over() && targets_[i].workers > jobs_[i].min_workers &&
             touch(i).workers.back() == node)
        if (!set(i, targets_[i].workers - 1, targets_[i].shards)) break;
    }
  }
}

planner::node_lists& planner::touch(std::size_t i) {
  auto& t = targets_[i];
  if (t.nodes < 0) {
    t.nodes = int(nodes_.size());
    nodes_.push_back({{jobs_[i].worker_nodes.begin(), jobs_[i].worker_nodes.end()},
                      {jobs_[i].shard_nodes.begin(), jobs_[i].shard_nodes.end()}});
  }
  return nodes_[std::size_t(t.nodes)];
}

bool planner::changed(std::size_t i) const {
  return targets_[i].workers != jobs_[i].workers || targets_[i].shards != jobs_[i].shards;
}

bool planner::set(std::size_t i, int workers, int shards) {
  COACH_ENFORCE((workers == 0 && shards == 0) || (workers >= 1 && shards >= 1),
                "a target is (0, 0) or at least one worker and one shard");
  if (targets_[i].workers == workers && targets_[i].shards == shards) return true;
  auto& lists = touch(i);
  auto& t = targets_[i];
  const bool grows = workers > t.workers || shards > t.shards;
  if (!change(pool_, jobs_[i].per_worker, jobs_[i].per_shard, lists.workers, lists.shards, workers,
              shards))
    return false;
  if (grows && t.first_take == 0) t.first_take = ++takes_;
  t.workers = workers;
  t.shards = shards;
  return true;
}

decision planner::finish(std::optional<time_point> revisit_at) const {
  struct pending {
    std::size_t job;
    action a;
    bool frees;
    std::uint64_t order;
  };
  std::vector<pending> list;
  for (std::size_t i = 0; i < jobs_.size(); ++i) {
    if (!changed(i)) continue;
    const auto& j = jobs_[i];
    const auto& t = targets_[i];
    action a;
    a.job = j.id;
    if (t.workers == 0) {
      if (j.state != job_state::running) continue;  // a waiting job stays waiting
      a.kind = action::kind_type::suspend;
    } else {
      a.kind = j.state == job_state::running ? action::kind_type::resize : action::kind_type::start;
      a.workers = t.workers;
      a.shards = t.shards;
    }
    const bool frees = frees_only(j, a);
    // Frees: suspends before shrinks; takes: in the order the plan first grew each job.
    const std::uint64_t order =
        frees ? (a.kind == action::kind_type::suspend ? 0 : 1) : t.first_take;
    list.push_back({i, a, frees, order});
  }
  std::stable_sort(list.begin(), list.end(), [](const pending& x, const pending& y) {
    if (x.frees != y.frees) return x.frees;
    return x.order < y.order;
  });
  decision d;
  d.revisit_at = revisit_at;
  resource_pool check(cluster_);
  for (const auto& p : list) {
    const auto& j = jobs_[p.job];
    std::vector<std::uint32_t> wn(j.worker_nodes.begin(), j.worker_nodes.end());
    std::vector<std::uint32_t> sn(j.shard_nodes.begin(), j.shard_nodes.end());
    if (scheduler::apply_action(check, j, p.a, wn, sn)) d.actions.push_back(p.a);
  }
  return d;
}

}  // namespace detail
}  // namespace coach::scheduler
