#pragma once
// scheduler::resource_pool: the free resources of a set of nodes, and where a worker or a shard
// would go. Policies use one to check that a decision fits, node by node (a worker's GPUs must
// all be on one node, so the cluster's total free GPUs is not enough to know); the simulator
// uses one as its cluster and places parts with it, so that what a policy found to fit does fit.
//
// Placement rule (best fit on GPUs): a part goes to a node where it fits with the fewest free
// GPUs, which keeps whole nodes free for large workers and puts GPU-less parts (shards, CPU
// workers) on nodes whose GPUs are taken; among those, to the node added first. The choice
// depends only on what is free on each node and on the order the nodes were added, never on the
// pool's history, so a pool rebuilt from a cluster_view places exactly as the pool the view was
// taken from: an executor applying a decision to its own pool gets the placement the policy
// checked. Nodes are kept in one bitset per free-GPU count, so a search costs a scan of
// (GPU counts) × (nodes / 64) words at worst: the simulator places tens of thousands of parts
// on a thousand nodes per run.

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "scheduler/cluster_view.hpp"

namespace coach::scheduler {

class resource_pool {
 public:
  resource_pool() = default;
  /// A pool holding what is free on each node of `cluster`.
  explicit resource_pool(const cluster_view& cluster);

  /// Adds a node. REQUIRES: `id` is not in the pool yet; free <= total.
  void add_node(std::uint32_t id, const resources& total, const resources& free);

  /// The node `demand` would go to (see the placement rule), or nullopt if it fits nowhere.
  std::optional<std::uint32_t> find(const resources& demand) const;
  /// As find(), and takes `demand` from that node.
  std::optional<std::uint32_t> take(const resources& demand);
  /// Takes `demand` from node `id`; false (nothing taken) if it does not fit there.
  /// REQUIRES: `id` is in the pool.
  bool take_on(std::uint32_t id, const resources& demand);
  /// Gives `amount` back to node `id` (a part that leaves it). REQUIRES: `id` is in the pool.
  void give(std::uint32_t id, const resources& amount);

  /// Takes `workers` parts of `per_worker` and `shards` of `per_shard`, all or nothing: on
  /// success appends the node of each to the vectors and returns true; otherwise takes nothing.
  bool take_all(const resources& per_worker, int workers, const resources& per_shard, int shards,
                std::vector<std::uint32_t>& worker_nodes, std::vector<std::uint32_t>& shard_nodes);

  bool contains(std::uint32_t id) const;
  /// What is free on node `id`. REQUIRES: `id` is in the pool.
  const resources& free(std::uint32_t id) const;
  /// What node `id` has. REQUIRES: `id` is in the pool.
  const resources& total(std::uint32_t id) const;
  int free_gpus() const noexcept { return free_gpus_; }
  int total_gpus() const noexcept { return total_gpus_; }
  std::size_t size() const noexcept { return nodes_.size(); }
  /// The position (order added, 0-based) of node `id`, or nullopt if it is not in the pool.
  std::optional<std::size_t> position(std::uint32_t id) const { return lookup(id); }
  /// The id of the node added `pos`-th (0-based). REQUIRES: pos < size().
  std::uint32_t id_at(std::size_t pos) const { return nodes_[pos].id; }
  /// What is free on the node added `pos`-th. REQUIRES: pos < size().
  const resources& free_at(std::size_t pos) const { return nodes_[pos].free; }
  /// Whether `demand` fits in `free` (CPUs with a rounding slack).
  static bool fits(const resources& free, const resources& demand) noexcept;
  /// The pool as a cluster_view, nodes in the order they were added.
  cluster_view view() const;

 private:
  struct node {
    std::uint32_t id = 0;
    resources total;
    resources free;
  };
  void unlink(std::size_t n);
  void link(std::size_t n);
  std::size_t index_of(std::uint32_t id) const;
  std::optional<std::size_t> lookup(std::uint32_t id) const;

  /// Ids below this are indexed by a vector (the simulator numbers nodes 0..N-1, and a pool is
  /// built per decision); larger ones (the cluster's hashed host ids) by a hash map.
  static constexpr std::uint32_t dense_limit = 1u << 16;

  std::vector<node> nodes_;
  std::vector<std::uint32_t> dense_;                      ///< id -> position in nodes_ + 1; 0: none
  std::unordered_map<std::uint32_t, std::size_t> index_;  ///< id -> position in nodes_
  /// By free GPU count: a bitset over positions in nodes_ (bit n of word n / 64).
  std::vector<std::vector<std::uint64_t>> buckets_;
  std::size_t words_ = 0;  ///< words per bitset: ceil(nodes / 64)
  int free_gpus_ = 0;
  int total_gpus_ = 0;
};

}  // namespace coach::scheduler
