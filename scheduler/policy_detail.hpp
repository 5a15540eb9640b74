#pragma once
// scheduler::detail::planner: what the policies share: a decision in the making. It starts from
// the allocation every job has, keeps a resource_pool exact while a policy moves jobs to new
// targets (shrinking gives back the highest ranks' nodes, as the caller will), and turns the
// targets into actions in the order the decision contract asks for. Private to the policy
// sources (scheduler/policy*.cpp).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "scheduler/policy.hpp"
#include "scheduler/resource_pool.hpp"

namespace coach::scheduler::detail {

/// Whether `a` only frees resources (it may then come before any action that takes some).
bool frees_only(const job_view& job, const action& a) noexcept;

/// Indices of the jobs that `pick` selects, ordered by `key` then id (strict, deterministic).
/// Keys are computed once; input that is in order already (the simulator passes jobs by
/// submission) is not sorted again.
template <class Key, class Pick>
std::vector<std::size_t> order_by(std::span<const job_view> jobs, Key key, Pick pick) {
  using key_type = decltype(key(jobs[0]));
  struct item {
    key_type key;
    std::uint64_t id;
    std::size_t index;
  };
  std::vector<item> items;
  items.reserve(jobs.size());
  for (std::size_t i = 0; i < jobs.size(); ++i)
    if (pick(jobs[i])) items.push_back({key(jobs[i]), jobs[i].id, i});
  const auto less = [](const item& a, const item& b) {
    return a.key != b.key ? a.key < b.key : a.id < b.id;
  };
  if (!std::is_sorted(items.begin(), items.end(), less))
    std::sort(items.begin(), items.end(), less);
  std::vector<std::size_t> out(items.size());
  for (std::size_t k = 0; k < items.size(); ++k) out[k] = items[k].index;
  return out;
}

class planner {
 public:
  planner(const cluster_view& cluster, std::span<const job_view> jobs);

  std::size_t size() const noexcept { return jobs_.size(); }
  const job_view& job(std::size_t i) const { return jobs_[i]; }
  /// Job i's target; 0 workers: not running (left waiting, or to be suspended).
  int workers(std::size_t i) const { return targets_[i].workers; }
  int shards(std::size_t i) const { return targets_[i].shards; }
  /// Whether job i's target differs from what it has.
  bool changed(std::size_t i) const;

  /// Moves job i's target to (workers, shards), taking or giving the difference in the pool;
  /// (0, 0) stops it. All or nothing: false, and nothing changed, when the growth does not fit.
  /// REQUIRES: workers == 0 == shards, or both >= 1.
  bool set(std::size_t i, int workers, int shards);

  const resource_pool& pool() const noexcept { return pool_; }

  /// Where programs that are not Coach's took CPUs that jobs hold (a node's free CPUs below 0,
  /// node_view): running elastic jobs give workers back, youngest first, down to their minimum,
  /// while their highest-rank worker is on that node (a resize drops the highest ranks), until
  /// the node is no longer over-committed. Jobs that are not elastic keep what they hold.
  void shed_overcommit();

  /// The actions that take every job from what it has to its target: frees first (suspends,
  /// then resizes that only shrink), then takes in the order the jobs first grew in this plan.
  /// Each is checked on a fresh pool in that order and a take that would not fit there is
  /// dropped, so the decision always meets its contract.
  decision finish(std::optional<time_point> revisit_at) const;

 private:
  struct target {
    int workers = 0;
    int shards = 0;
    int nodes = -1;  ///< index in nodes_ once the job's node lists are copied from its view
    std::uint64_t first_take = 0;
  };
  struct node_lists {
    std::vector<std::uint32_t> workers;
    std::vector<std::uint32_t> shards;
  };
  node_lists& touch(std::size_t i);

  const cluster_view& cluster_;
  std::span<const job_view> jobs_;
  resource_pool pool_;
  std::vector<target> targets_;
  std::vector<node_lists> nodes_;  ///< only for the jobs a plan changes
  std::uint64_t takes_ = 0;
};

}  // namespace coach::scheduler::detail
