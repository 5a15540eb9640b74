// scheduler/job_registry_decide.cpp: a policy's decision carried out by the registry
// (job_registry::decide): starts, resizes and suspends as orders, then the rebalancer's moves.
#include <algorithm>
#include <cstdio>

#include "common/format.hpp"
#include "scheduler/job_registry.hpp"
#include "scheduler/resource_pool.hpp"

namespace coach::scheduler {

job_view job_registry::view_of(const registered_job& job,
                               std::vector<std::vector<std::uint32_t>>& lists) const {
  job_view v;
  const auto& r = job.rec_;
  v.id = job.id();
  v.state = job.launched_ ? job_state::running : job.state_;
  v.submitted = at_seconds(r.submitted);
  v.state_since = at_seconds(job.state_since_);
  v.model = r.model;
  v.elastic = r.elastic;
  v.min_workers = r.min_workers;
  v.max_workers = r.max_workers;
  v.requested_workers = r.requested_workers;
  v.min_shards = r.min_shards;
  v.max_shards = r.max_shards;
  v.requested_shards = r.requested_shards;
  // The user's rescale holds (user_orders.hpp): the policy sees those counts as the only ones.
  const auto& o = job.orders_;
  if (o.held_workers()) v.min_workers = v.max_workers = v.requested_workers = int(o.held_workers());
  if (o.held_shards()) v.min_shards = v.max_shards = v.requested_shards = int(o.held_shards());
  v.per_worker = worker_cost(r);
  v.per_shard = shard_cost(r);
  if (job.launched_) {
    const auto& w = lists.emplace_back(job.alloc_.worker_hosts());
    const auto& s = lists.emplace_back(job.alloc_.shard_hosts());
    v.workers = int(w.size());
    v.shards = int(s.size());
    v.worker_nodes = w;
    v.shard_nodes = s;
  }
  v.epochs_total = double(r.epochs_total);
  const auto& st = job.status_;
  const double part = st.samples_epoch ? double(st.samples_done) / double(st.samples_epoch) : 0.0;
  v.epochs_done = std::min(v.epochs_total, double(st.epochs_done) + std::min(part, 0.99));
  return v;
}

orders job_registry::decide(policy_holder& policy, const executor& exec, rebalancer* rebal,
                            const std::function<bool(std::uint64_t)>& busy) {
  orders out;
  const auto view = cluster();
  // The views point into `lists`, which outlives the decide() call (reserved: no reallocation).
  std::vector<job_view> views;
  std::vector<std::vector<std::uint32_t>> lists;
  lists.reserve(2 * jobs_.size());
  for (auto& [id, job] : jobs_)
    if (job.may_start() || (job.launched_ && !job.over())) views.push_back(view_of(job, lists));
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
        resize(*job, *v, a, pool, exec, name, out);
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
  launch_order o{job.id(), {}, {}};
  auto used = exec.apply(pool, v, a, job.placement_, o.workers, o.shards);
  if (!used) {
    note(job,
         coach::format("job {} does not fit any more; it waits ({})", o.job, used.error().message));
    return;
  }
  job.status_.placement = std::string(*used);
  out.launches.push_back(std::move(o));
}

void job_registry::resize(registered_job& job, const job_view& v, const action& asked,
                          resource_pool& pool, const executor& exec, const std::string& policy,
                          orders& out) {
  if (!job.running() || job.cancel_requested_) return;  // starting or ending: decided again later
  const int w0 = job.alloc_.workers(), s0 = job.alloc_.shards();
  // A user's rescale holds against every policy (user_orders.hpp): its counts stay.
  action a = asked;
  if (const auto held = job.orders_.held_workers()) a.workers = int(held);
  if (const auto held = job.orders_.held_shards()) a.shards = int(held);
  if (a.workers == w0 && a.shards == s0) return;
  auto w = job.alloc_.worker_hosts();
  auto s = job.alloc_.shard_hosts();
  if (auto used = exec.apply(pool, v, a, job.placement_, w, s); !used) {
    log_(coach::format("job {}: {}", job.id(), used.error().message));
    return;
  }
  const std::string cause = "policy " + policy;
  resize_order o{job.id(), job.generation_, 0, 0, job.alloc_, cause};
  job.alloc_.follow(w, s);
  const int w1 = job.alloc_.workers(), s1 = job.alloc_.shards();
  o.workers = std::uint32_t(w1 != w0 ? w1 : 0);
  o.shards = std::uint32_t(s1 != s0 ? s1 : 0);
  record_allocation(job);
  note(job, coach::format("job {}: policy {} resizes it to {} worker(s), {} shard(s) (cause: {})",
                          job.id(), policy, w1, s1, cause));
  job.causes_.expect({expected_change::kind_type::rescale, cause, o.workers, o.shards, 0, {}});
  out.resizes.push_back(std::move(o));
}

void job_registry::suspend(registered_job& job, resource_pool& pool, const std::string& policy,
                           orders& out) {
  if (!job.launched_ || job.over()) return;
  for (auto h : job.alloc_.worker_hosts())
    if (pool.contains(h)) pool.give(h, worker_cost(job.rec_));
  for (auto h : job.alloc_.shard_hosts())
    if (pool.contains(h)) pool.give(h, shard_cost(job.rec_));
  out.stops.push_back({job.id(), job.hosts_});
  note(job, coach::format("job {}: suspended by policy {} (cause: policy {})", job.id(), policy,
                          policy));
  stop_to_resume(job, job.hosts_, coach::format("suspended by {}", policy));
}

void job_registry::rebalance(resource_pool& pool, rebalancer& rebal,
                             const std::function<bool(std::uint64_t)>& busy, orders& out) {
  for (auto& [id, job] : jobs_) {
    const auto& st = job.status_;
    const auto& alloc = job.alloc_;
    const auto& shape = job.shape_;
    if (!job.running() || job.cancel_requested_ || st.placement != "dltap") continue;
    if ((busy && busy(id)) || !alloc.planned_workers.empty() || !alloc.planned_shards.empty() ||
        alloc.shard_at.empty() || st.samples_per_second <= 0 || shape.batch_size <= 0)
      continue;  // a change in flight, or no step rate yet
    rebalance_job r;
    r.job = id;
    r.worker_nodes = alloc.worker_hosts();
    std::vector<std::uint32_t> shard_ids;
    for (const auto& [k, h] : alloc.shard_at) {
      shard_ids.push_back(k);
      r.shard_nodes.push_back(h);
    }
    // The shards split the model evenly (ps::shard_map::even; changes keep it near even).
    r.shard_bytes.assign(r.shard_nodes.size(), shape.model_bytes / double(r.shard_nodes.size()));
    r.state_factor = shape.state_factor;
    // A fixed global batch is the step's; otherwise each worker adds its batch.
    const double step_samples = shape.global_batch > 0
                                    ? shape.global_batch
                                    : shape.batch_size * double(r.worker_nodes.size());
    r.steps_per_s = st.samples_per_second / step_samples;
    const double total = double(st.epochs_total) * double(st.samples_epoch);
    const double done = double(st.epochs_done) * double(st.samples_epoch) + double(st.samples_done);
    r.seconds_left = std::max(0.0, total - done) / st.samples_per_second;
    r.per_shard = shard_cost(job.rec_);
    // A shard the user migrated stays where the user put it (user_orders.hpp).
    for (auto k : shard_ids) r.pinned.push_back(job.orders_.pinned(k));
    auto m = rebal.propose(r, pool);
    if (!m) continue;
    const std::uint32_t shard = shard_ids[m->shard];
    char gain[160];
    std::snprintf(gain, sizeof gain,
                  "saves %.1f MB/s between hosts, %.1f MB over the %.0f s left, for %.3f MB moved",
                  m->saved_bytes_per_s / 1e6, m->saved_bytes / 1e6, r.seconds_left,
                  m->moved_bytes / 1e6);
    note(job, coach::format("dltap: job {}: shard {} moves from '{}' to '{}' ({}) (cause: "
                            "rebalancer)",
                            id, shard, nodes_.name(m->from), nodes_.name(m->to), gain));
    job.causes_.expect({expected_change::kind_type::migrate, "rebalancer", 0, 0, shard, {}});
    rebal.moved(id);
    pool.give(m->from, r.per_shard);
    pool.take_on(m->to, r.per_shard);
    out.moves.push_back({id, shard, nodes_.name(m->to), *m});
  }
}

}  // namespace coach::scheduler
