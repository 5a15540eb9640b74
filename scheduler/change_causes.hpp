#pragma once
// scheduler::change_causes: who asked for the changes of one running job, so that every change
// in its history (`coach logs`) names its cause. Each change asked of the job's master is
// expected here with its cause — the user (coach rescale, coach migrate), a policy by name, the
// rebalancer, a failure (a node lost), the spec's `schedule:` (each entry, expected when the run
// starts) — and what it will look like once in effect (a count of workers or shards, a shard
// gone, ranks gone). When a change takes effect, the first expected change it matches is its
// cause; a migration's first step (its new shard owning slices beside the one it replaces) is
// the migration's, which stays expected; a change nobody asked for that dropped workers is a
// failure (they died), any other the job's own.
//
// Plain logic. Threads: one owner (the job registry's).

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

namespace coach::scheduler {

/// A change asked of a job's master and its cause.
struct expected_change {
  enum class kind_type { rescale, migrate, drop_workers };
  kind_type kind = kind_type::rescale;
  /// "user", "policy fifo", "rebalancer", "failure: node 'b' lost".
  std::string cause;
  std::uint32_t workers = 0;         ///< rescale: the new count (0: unchanged)
  std::uint32_t shards = 0;          ///< rescale: the new count (0: unchanged)
  std::uint32_t shard = 0;           ///< migrate: the shard that leaves
  std::vector<std::uint32_t> ranks;  ///< drop_workers: the workers that leave
};

class change_causes {
 public:
  /// At most this many are expected at once (the oldest is forgotten: a change the master
  /// merged or dropped never takes effect).
  static constexpr std::size_t max_expected = 32;

  /// A change was asked for.
  void expect(expected_change c);
  /// It was refused: the latest expected change of that kind and cause is forgotten.
  void refused(expected_change::kind_type kind, const std::string& cause);
  /// A change took effect: workers `members` and shards `live` now, where `before_workers`
  /// and `before_shards` were before. Returns its cause (see the file comment);
  /// `own` is the cause of a change nobody asked for that dropped no worker.
  std::string took_effect(std::span<const std::uint32_t> before_workers,
                          std::span<const std::uint32_t> before_shards,
                          std::span<const std::uint32_t> members,
                          std::span<const std::uint32_t> live, const std::string& own);
  /// The cause of a part added now (a worker when `worker`): the first expected change that
  /// adds one; empty when none does.
  std::string adding(bool worker) const;
  void clear() { expected_.clear(); }

 private:
  std::deque<expected_change> expected_;
};

}  // namespace coach::scheduler
