#include "scheduler/rebalance.hpp"

#include <algorithm>

namespace coach::scheduler {

std::optional<shard_move> rebalancer::propose(const rebalance_job& job,
                                              const resource_pool& pool) const {
  if (job.steps_per_s <= 0 || job.seconds_left <= 0 || job.worker_nodes.empty()) return {};
  if (auto it = last_move_.find(job.job);
      it != last_move_.end() && clock_.now() - it->second < options_.min_interval)
    return {};
  std::map<std::uint32_t, int> workers_on;
  for (auto n : job.worker_nodes) ++workers_on[n];
  const auto on = [&](std::uint32_t n) {
    auto it = workers_on.find(n);
    return it == workers_on.end() ? 0 : it->second;
  };
  std::optional<shard_move> best;
  for (std::uint32_t k = 0; k < job.shard_nodes.size(); ++k) {
    const double bytes = k < job.shard_bytes.size() ? job.shard_bytes[k] : 0.0;
    if (bytes <= 0 || (k < job.pinned.size() && job.pinned[k])) continue;
    const auto from = job.shard_nodes[k];
    // Only nodes with more of the job's workers than the shard's own can save bytes.
    for (const auto& [to, count] : workers_on) {
      if (to == from || count <= on(from) || !pool.contains(to)) continue;
      if (!resource_pool::fits(pool.free(to), job.per_shard)) continue;
      shard_move m;
      m.shard = k;
      m.from = from;
      m.to = to;
      m.saved_bytes_per_s = 2 * bytes * (count - on(from)) * job.steps_per_s;
      m.saved_bytes = m.saved_bytes_per_s * job.seconds_left;
      m.moved_bytes = bytes * job.state_factor;
      if (m.saved_bytes <= options_.min_gain * m.moved_bytes) continue;
      const auto pos = [&](std::uint32_t n) { return pool.position(n).value_or(pool.size()); };
      if (!best || m.saved_bytes_per_s > best->saved_bytes_per_s ||
          (m.saved_bytes_per_s == best->saved_bytes_per_s &&
           (m.shard < best->shard || (m.shard == best->shard && pos(m.to) < pos(best->to)))))
        best = m;
    }
  }
  return best;
}

void rebalancer::moved(std::uint64_t job) {
  last_move_[job] = clock_.now();
}

}  // namespace coach::scheduler
