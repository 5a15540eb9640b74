#include "scheduler/executor.hpp"

#include <algorithm>

#include "common/enforce.hpp"
#include "common/format.hpp"

namespace coach::scheduler {

result<executor> executor::make(const executor_options& options) {
  std::vector<std::unique_ptr<placement>> all;
  const placement* def = nullptr;
  for (auto name : placement_names()) {
    auto p = make_placement(name, options.seed);
    COACH_ENFORCE(p.has_value(), "every listed placement can be made");
    if (name == options.placement) def = p->get();
    all.push_back(std::move(*p));
  }
  if (!def) {
    auto p = make_placement(options.placement);  // the error names the unknown placement
    return std::unexpected(p.error());
  }
  return executor(std::move(all), def);
}

executor::executor(std::vector<std::unique_ptr<placement>> all, const placement* def)
    : all_(std::move(all)), default_(def) {
  for (const auto& p : all_)
    if (p->name() == "best-fit") best_fit_ = p.get();
}

result<const placement*> executor::find(std::string_view name) const {
  if (name.empty()) return default_;
  for (const auto& p : all_)
    if (p->name() == name) return p.get();
  auto p = make_placement(name);
  return std::unexpected(p.error());
}

result<std::string_view> executor::apply(resource_pool& pool, const job_view& job, const action& a,
                                         std::string_view placement_name,
                                         std::vector<std::uint32_t>& worker_nodes,
                                         std::vector<std::uint32_t>& shard_nodes,
                                         std::span<const double> shard_bytes) const {
  if (auto ok = check_action(job, a); !ok) return std::unexpected(ok.error());
  auto chosen = find(placement_name);
  if (!chosen) return std::unexpected(chosen.error());
  const int workers = a.kind == action::kind_type::suspend ? 0 : a.workers;
  const int shards = a.kind == action::kind_type::suspend ? 0 : a.shards;
  const resources per_worker = job.per_worker, per_shard = job.per_shard;

  // Frees first: the highest ranks and ids leave. Nodes no longer in the pool (dead) give
  // nothing back.
  std::vector<std::uint32_t> freed_w, freed_s;
  while (int(worker_nodes.size()) > workers) {
    if (pool.contains(worker_nodes.back())) pool.give(worker_nodes.back(), per_worker);
    freed_w.push_back(worker_nodes.back());
    worker_nodes.pop_back();
  }
  while (int(shard_nodes.size()) > shards) {
    if (pool.contains(shard_nodes.back())) pool.give(shard_nodes.back(), per_shard);
    freed_s.push_back(shard_nodes.back());
    shard_nodes.pop_back();
  }
  placement_request req;
  req.job = job.id;
  req.per_worker = per_worker;
  req.per_shard = per_shard;
  req.worker_nodes = worker_nodes;
  req.shard_nodes = shard_nodes;
  req.add_workers = std::max(0, workers - int(worker_nodes.size()));
  req.add_shards = std::max(0, shards - int(shard_nodes.size()));
  req.shard_bytes = shard_bytes;
  const placement* used = *chosen;
  auto placed = used->place(pool, req);
  if (!placed && used != best_fit_) {
    used = best_fit_;
    placed = used->place(pool, req);
  }
  if (!placed) {
    // Undo the frees, in reverse: the pool is as it was after them, so they fit again.
    for (auto it = freed_w.rbegin(); it != freed_w.rend(); ++it) {
      if (pool.contains(*it)) pool.take_on(*it, per_worker);
      worker_nodes.push_back(*it);
    }
    for (auto it = freed_s.rbegin(); it != freed_s.rend(); ++it) {
      if (pool.contains(*it)) pool.take_on(*it, per_shard);
      shard_nodes.push_back(*it);
    }
    return fail(errc::invalid_argument, "{}: does not fit the free resources ({})", to_string(a),
                placed.error().message);
  }
  worker_nodes.insert(worker_nodes.end(), placed->workers.begin(), placed->workers.end());
  shard_nodes.insert(shard_nodes.end(), placed->shards.begin(), placed->shards.end());
  return used->name();
}

result<std::uint32_t> executor::place_one(resource_pool& pool, const placement_request& job,
                                          bool worker, std::string_view placement_name) const {
  auto chosen = find(placement_name);
  if (!chosen) return std::unexpected(chosen.error());
  placement_request req = job;
  req.add_workers = worker ? 1 : 0;
  req.add_shards = worker ? 0 : 1;
  auto placed = (*chosen)->place(pool, req);
  if (!placed && *chosen != best_fit_) placed = best_fit_->place(pool, req);
  if (!placed) return std::unexpected(placed.error());
  return worker ? placed->workers.front() : placed->shards.front();
}

}  // namespace coach::scheduler
