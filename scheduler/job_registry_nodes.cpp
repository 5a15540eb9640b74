// scheduler/job_registry_nodes.cpp: what nodes do to the registry's jobs: a node lost (workers
// dropped, shards failed over to their backups, or a recovery from the checkpoint), a node
// back, and the stops of earlier runs they answer (job_registry.hpp).
#include <algorithm>

#include "common/format.hpp"
#include "scheduler/job_registry.hpp"

namespace coach::scheduler {

bool job_registry::fail_over(registered_job& job, std::uint32_t host, node_loss& loss) {
  auto f = job.replicas_.fail_over(host, job.alloc_.shard_at);
  if (!f) return false;
  loss.heads = std::move(f->heads);
  loss.cut = std::move(f->cut);
  // Promoted: shard k's primary is its backup's host now.
  for (const auto& [k, h] : f->promoted) {
    job.alloc_.shard_at[k] = h;
    job.shard_hosts_.insert(h);
    ++job.status_.failovers;
  }
  list_nodes(job);
  if (!loss.heads.empty()) record_history(job);
  return true;
}

std::vector<node_loss> job_registry::lose_node(std::uint32_t host) {
  std::vector<node_loss> out;
  for (auto& [id, job] : jobs_) {
    if (job.stops_.stopping(host) || (!job.over() && job.launched_ && job.hosts_.contains(host)))
      left_on_[host].insert(id);
    job.stops_.lost(host);
    if (job.over() || !job.launched_ || !job.hosts_.contains(host)) continue;
    // A node that ran only workers of a running job: the job goes on without them (its master
    // drops them and re-dispenses their chunks; it fails the job itself when none is left).
    node_loss loss{.job = id};
    loss.fails = host == self_host_;
    // A loss that leaves the job no worker recovers too: a run without workers cannot go on
    // (its master would fail the job), and its training state is in its checkpoint.
    const bool every_worker =
        std::ranges::all_of(job.alloc_.worker_at, [&](const auto& w) { return w.second == host; });
    loss.recovers = !loss.fails && (!job.running() || every_worker || !fail_over(job, host, loss));
    if (loss.recovers) {
      // Its shards' state is gone with the node: the job restarts from its checkpoint on the
      // nodes left. The work since the checkpoint (or since this run began from it) is lost.
      const double from = std::max(job.started_, job.checkpoint() ? job.checkpoints_.at() : 0.0);
      job.status_.recoveries_lost_s.push_back(std::max(0.0, now() - from));
      record_history(job);
      loss.stop_hosts = job.hosts_;
      loss.stop_hosts.erase(host);
      stop_to_resume(job, loss.stop_hosts,
                     coach::format("node '{}' lost; recovering", nodes_.name(host)));
      out.push_back(std::move(loss));
      continue;
    }
    for (const auto& [r, h] : job.alloc_.worker_at)
      if (h == host) loss.ranks.push_back(r);
    if (!loss.fails) {
      job.hosts_.erase(host);
      for (auto r : loss.ranks) job.alloc_.worker_at.erase(r);
      std::erase(job.alloc_.planned_workers, host);
      record_allocation(job);
      auto& st = job.status_;
      st.workers -= std::min(st.workers, std::uint32_t(loss.ranks.size()));
      for (auto r : loss.ranks)
        if (r < st.worker_nodes.size()) st.worker_nodes[r] += " (lost)";
      // The master drops them: that change's cause.
      if (!loss.ranks.empty())
        job.causes_.expect({expected_change::kind_type::drop_workers,
                            coach::format("failure: node '{}' lost", nodes_.name(host)), 0, 0, 0,
                            loss.ranks});
    }
    out.push_back(std::move(loss));
  }
  return out;
}

std::set<std::uint64_t> job_registry::came_back(std::uint32_t host) {
  auto left = left_on_.extract(host);
  return left ? std::move(left.mapped()) : std::set<std::uint64_t>{};
}

std::set<std::uint64_t> job_registry::seen(std::uint32_t host) {
  std::set<std::uint64_t> out;
  for (auto& [id, job] : jobs_)
    if (job.stops_.seen(host)) out.insert(id);
  return out;
}

bool job_registry::forget_unseen() {
  bool freed = false;
  const auto alive = [&](std::uint32_t h) {
    const auto* n = nodes_.find(h);
    return n && n->alive;
  };
  for (auto& [id, job] : jobs_) freed |= job.stops_.forget_unseen(alive) && job.may_start();
  return freed;
}

bool job_registry::stop_answered(registered_job& job, std::uint32_t host) {
  return job.stops_.answered(host);
}

std::vector<std::pair<std::uint64_t, std::vector<std::uint32_t>>> job_registry::stops_overdue(
    double after_s) {
  std::vector<std::pair<std::uint64_t, std::vector<std::uint32_t>>> out;
  const double t = now();
  const auto alive = [&](std::uint32_t h) {
    const auto* n = nodes_.find(h);
    return n && n->alive;
  };
  for (auto& [id, job] : jobs_)
    if (auto hosts = job.stops_.overdue(t, after_s, alive); !hosts.empty())
      out.emplace_back(id, std::move(hosts));
  return out;
}

}  // namespace coach::scheduler
