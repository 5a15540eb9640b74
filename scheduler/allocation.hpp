#pragma once
// scheduler::allocation: where a job's parts run as the cluster scheduler counts them (hosts by
// worker rank and shard id, and the hosts a policy's resize planned for parts not asked for
// yet), and how that follows launches, resizes, user rescales and changes that took effect.
// Plain data and logic; job_registry keeps one per job.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <vector>

namespace coach::scheduler {

/// Where a job's parts run, as the scheduler counts them.
struct allocation {
  std::map<std::uint32_t, std::uint32_t> worker_at;  ///< host of each live worker, by rank
  std::map<std::uint32_t, std::uint32_t> shard_at;   ///< host of each shard owning slices, by id
  /// Hosts a policy resize chose for parts the job's master has not asked for yet.
  std::deque<std::uint32_t> planned_workers;
  std::deque<std::uint32_t> planned_shards;

  int workers() const noexcept { return int(worker_at.size() + planned_workers.size()); }
  int shards() const noexcept { return int(shard_at.size() + planned_shards.size()); }
  /// Hosts by rank (shard id), then the planned ones.
  std::vector<std::uint32_t> worker_hosts() const;
  std::vector<std::uint32_t> shard_hosts() const;
  void clear();
  /// A launch: rank r on workers[r], shard k on shards[k].
  void assign(std::span<const std::uint32_t> workers, std::span<const std::uint32_t> shards);
  /// Follows what the executor made of worker_hosts() and shard_hosts(): it kept a prefix and
  /// appended the new parts. The planned parts leave first, then the highest ranks (ids); the
  /// new ones are planned.
  void follow(std::span<const std::uint32_t> workers, std::span<const std::uint32_t> shards);
  /// A user's rescale to `workers` and `shards` (0: unchanged): the planned parts leave first,
  /// then the highest ranks (ids). More than now changes nothing: those are counted when the
  /// master asks for them.
  void trim(std::uint32_t workers, std::uint32_t shards);
  /// A change took effect: workers that are not `members` and shards not `live` are gone.
  /// Returns how many parts left.
  std::size_t keep(std::span<const std::uint32_t> members, std::span<const std::uint32_t> live);
  friend bool operator==(const allocation&, const allocation&) = default;
};

}  // namespace coach::scheduler
