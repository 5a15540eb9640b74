#pragma once
// scheduler::placement: where the parts of a job (its workers and parameter-server shards) run.
// A seam with four implementations, chosen by name (coach-node --scheduler --placement, the job
// spec's `placement:`, coach-sim --placement), shared by the cluster scheduler and the
// simulator through scheduler::executor:
//
//   spread    each part goes where it fits with the fewest parts of its job, ties broken by a
//             rotation through the nodes in pool order: worker r of a new job on the r-th node,
//             shards continuing the rotation. Spreads a job's load; every worker-shard pair of
//             a job spread over n nodes crosses hosts but for 1/n of them.
//   best-fit  resource_pool's rule: the node with the fewest free GPUs that fits, then the one
//             added first. Packs nodes; co-locates only by accident.
//   random    a node drawn uniformly among those where the part fits (seeded: the job's id and
//             the placement's seed give the same draw every time).
//   dltap     co-location by traffic (DLTAP's "aggregation degree"): in a data-parallel step
//             every worker pulls from and pushes to every shard the bytes of the slices that
//             shard owns, so the bytes between worker w and shard k are proportional to k's
//             share of the model. A new worker goes where the job's shards that it would
//             exchange the most bytes with run; a new shard where the most of the job's workers
//             run (the largest shards are placed first). With nothing of the job placed yet, the
//             first part goes to the node that holds the whole rest of the job most tightly (or,
//             if none holds it, the node with the most room), and the parts after it follow.
//             Ties: the node with more of the job's parts, then more room, then pool order.
//             Room is counted in parts (how many more of the part's kind fit), never in
//             fractions of a CPU: measured CPUs move by tenths between heartbeats, and the same
//             job on nodes that hold as many of its parts lands on the same nodes.
//
// Every placement places every part it is asked for or none (all or nothing), and never takes
// more than a node has free (the contract tests/unit/scheduler/placement_test.cpp checks on each).
//
// Cost: each part scans the pool's nodes once (O(nodes)); the simulator places ~10^5 parts on
// 10^3 nodes per run.

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "scheduler/resource_pool.hpp"

namespace coach::scheduler {

/// One job's new parts to place, with the parts it keeps.
struct placement_request {
  std::uint64_t job = 0;  ///< seeds `random`
  resources per_worker;   ///< what one worker uses, all on one node
  resources per_shard;
  /// Where the job's parts that stay run (by rank, by shard id): a rescale places beside them.
  std::span<const std::uint32_t> worker_nodes;
  std::span<const std::uint32_t> shard_nodes;
  int add_workers = 0;  ///< how many workers to place
  int add_shards = 0;
  /// The share of the model each shard owns (bytes or slices; any unit), by shard id: the
  /// shards that stay, then the new ones. Empty, or shorter than the shards: equal shares.
  std::span<const double> shard_bytes;
};

/// Where the new parts went.
struct placement_result {
  std::vector<std::uint32_t> workers;  ///< node of each added worker, in the order added
  std::vector<std::uint32_t> shards;   ///< node of each added shard
};

/// The interface every placement implements.
class placement {
 public:
  virtual ~placement() = default;
  /// "spread", "best-fit", "random" or "dltap".
  virtual std::string_view name() const noexcept = 0;
  /// Places the request's new parts on `pool`, taking what they use: all or nothing. Errors:
  /// resource_exhausted naming the part that fits nowhere; the pool is unchanged then.
  /// Deterministic: the same pool and request give the same result.
  virtual result<placement_result> place(resource_pool& pool,
                                         const placement_request& request) const = 0;
};

/// The names make_placement accepts: spread, best-fit, random, dltap.
std::span<const std::string_view> placement_names() noexcept;

/// Makes the placement `name`; `seed` seeds `random`. Errors: invalid_argument naming the
/// unknown placement and listing the known ones.
result<std::unique_ptr<placement>> make_placement(std::string_view name, std::uint64_t seed = 1);

/// Hosts for the backups of each shard of a job with replicas (docs/design.md "Shard
/// replicas"): for shard k on shard_hosts[k], up to `backups` distinct hosts among
/// `candidates`, none of them shard_hosts[k], so that no single host holds two copies of a
/// shard. Each pick is the candidate holding the fewest of the job's shard copies so far
/// (primaries and backups), ties to the earlier candidate; fewer than `backups` when the
/// candidates run out (the caller says so). `held`: hosts of copies the job holds already
/// (a shard added while it runs: its other shards' primaries and backups), one entry a copy.
/// Result by shard id, in chain order.
std::vector<std::vector<std::uint32_t>> place_backups(std::span<const std::uint32_t> shard_hosts,
                                                      std::uint32_t backups,
                                                      std::span<const std::uint32_t> candidates,
                                                      std::span<const std::uint32_t> held = {});

/// Bytes of one step of a job that cross hosts, per unit of `shard_bytes`: every worker
/// exchanges shard k's share with shard k, so a pair on two nodes adds shard_bytes[k] (equal
/// shares of 1 when `shard_bytes` is short).
double cross_host_share(std::span<const std::uint32_t> worker_nodes,
                        std::span<const std::uint32_t> shard_nodes,
                        std::span<const double> shard_bytes = {});

/// The job's aggregation degree: the share of its worker-shard bytes that stay on one host,
/// in [0, 1] (1: every worker beside every shard it uses). 0 for a job with no parts.
double aggregation_degree(std::span<const std::uint32_t> worker_nodes,
                          std::span<const std::uint32_t> shard_nodes,
                          std::span<const double> shard_bytes = {});

}  // namespace coach::scheduler
