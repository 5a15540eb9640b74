#pragma once
// scheduler::replica_chains: where one job's shard replicas run and which of them still form
// each shard's chain (docs/design.md "Shard replicas"). Backup i of shard k runs on
// backups()[k][i - 1]; replica 0 is the primary the run started with, whose host is the job's
// allocation (allocation::shard_at). A chain is the replicas head..tail that still hold the
// shard: a lost primary promotes the next replica (head + 1), a lost backup cuts the chain
// before it (tail = i - 1). Plain data and rules; job_registry keeps one per job.
//
// Threads: one owner (the registry's).

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

namespace coach::scheduler {

class replica_chains {
 public:
  /// The replicas head..tail of one shard that still hold it (0: its first primary).
  struct chain {
    std::uint32_t head = 0;
    std::uint32_t tail = 0;
  };
  /// What a lost host did to the chains (fail_over).
  struct failover {
    /// Pairs (shard, replica) flattened: the backup that takes over as each shard's primary.
    std::vector<std::uint32_t> heads;
    /// Pairs (shard, replica): the replica that goes on without the replicas after it.
    std::vector<std::uint32_t> cut;
    /// Pairs (shard, host): each promoted shard's primary host now, in the order of `heads`.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> promoted;
  };

  /// Copies of each shard, its primary included (the spec's `replicas`); 1: no backups.
  explicit replica_chains(std::uint32_t replicas = 1) : replicas_(replicas) {}

  std::uint32_t replicas() const noexcept { return replicas_; }
  /// Backup hosts by shard id, in chain order, as the run placed them.
  const std::vector<std::vector<std::uint32_t>>& backups() const noexcept { return backups_; }
  const std::vector<chain>& chains() const noexcept { return chains_; }

  /// A run starts with its shards on `shards` (by id): forgets the last run's chains and
  /// places replicas - 1 backups of each on `usable` (placement.hpp place_backups). Returns
  /// the ids of the shards that got fewer backups than asked (too few usable nodes).
  std::vector<std::uint32_t> place(std::span<const std::uint32_t> shards,
                                   std::span<const std::uint32_t> usable);
  /// Shard `id` is added on `host` while the job runs: its backups, on `usable` but never on
  /// `host`, fewest of the job's copies first (the primaries `shard_at` but `id`'s, and every
  /// backup still in a chain). Returns their hosts in chain order; empty without replicas.
  std::vector<std::uint32_t> place_added(std::uint32_t id, std::uint32_t host,
                                         const std::map<std::uint32_t, std::uint32_t>& shard_at,
                                         std::span<const std::uint32_t> usable);
  /// Shards that own no slice any more (not in `shard_at`) leave their chains: their backups
  /// hold nothing the job needs.
  void keep_only(const std::map<std::uint32_t, std::uint32_t>& shard_at);
  /// `host` is lost, the job's primaries on `shard_at`: each shard's copy there leaves its
  /// chain. nullopt when a shard had no copy left but there (or none was placed for it): the
  /// job must recover from its checkpoint instead (the chains may then be partly changed;
  /// the next run places them again).
  std::optional<failover> fail_over(std::uint32_t host,
                                    const std::map<std::uint32_t, std::uint32_t>& shard_at);

 private:
  std::uint32_t replicas_ = 1;
  std::vector<std::vector<std::uint32_t>> backups_;
  std::vector<chain> chains_;
};

}  // namespace coach::scheduler
