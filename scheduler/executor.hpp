#pragma once
// scheduler::executor: carries out what a policy decided, through a placement. The one piece
// that turns an action (start, resize, suspend) into parts on nodes, shared by the cluster
// scheduler (actors/cluster_scheduler) and the simulator (sim/sim), so that both place a
// decision the same way.
//
// Each job is placed by its own placement (the spec's `placement:`) or the executor's default
// (coach-node --scheduler --placement, coach-sim --placement). A policy checks that its decision
// fits with resource_pool's best-fit rule; another placement may fail to place a part that best
// fit would have placed (GPU fragmentation), so when the job's placement cannot place a change
// the executor places it by best fit, which then always succeeds for a decision that met its
// contract. Frees come first: the highest ranks and shard ids leave.
//
// Threads: none of its own; const methods may be called from several threads.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "scheduler/placement.hpp"
#include "scheduler/policy.hpp"

namespace coach::scheduler {

/// Settings of an executor.
struct executor_options {
  std::string placement = "dltap";  ///< the default placement's name
  std::uint64_t seed = 1;           ///< of the random placement
};

class executor {
 public:
  /// Errors: invalid_argument for an unknown placement name.
  static result<executor> make(const executor_options& options = {});

  /// The default placement's name.
  std::string_view placement_name() const noexcept { return default_->name(); }
  /// The placement `name` names; the default for an empty name. Errors: as make_placement.
  result<const placement*> find(std::string_view name) const;

  /// Carries out `a` for `job` on `pool`: checks it (as apply_action does: state, ranges,
  /// elasticity), frees first (the highest ranks and ids leave), then places the added parts
  /// with the placement `placement_name` (empty: the default), by best fit if that one cannot.
  /// `worker_nodes` and `shard_nodes` are the job's nodes by rank and shard id, updated in
  /// place; `shard_bytes` each shard's share of the model (may be empty: equal shares).
  /// Returns the name of the placement that placed the change. Errors: invalid_argument naming
  /// the action and what is wrong; nothing is changed then. Reads of `job` are limited to its
  /// state, ranges and per-part resources, so its spans may point into the vectors updated.
  result<std::string_view> apply(resource_pool& pool, const job_view& job, const action& a,
                                 std::string_view placement_name,
                                 std::vector<std::uint32_t>& worker_nodes,
                                 std::vector<std::uint32_t>& shard_nodes,
                                 std::span<const double> shard_bytes = {}) const;

  /// The node of one more part of a running job (a worker when `worker`), placed beside its
  /// parts by the job's placement, else by best fit; takes what it uses. Errors:
  /// resource_exhausted when it fits nowhere (nothing taken).
  result<std::uint32_t> place_one(resource_pool& pool, const placement_request& job, bool worker,
                                  std::string_view placement_name) const;

 private:
  explicit executor(std::vector<std::unique_ptr<placement>> all, const placement* def);
  std::vector<std::unique_ptr<placement>> all_;  ///< one of each, in placement_names() order
  const placement* default_ = nullptr;
  const placement* best_fit_ = nullptr;
};

}  // namespace coach::scheduler
