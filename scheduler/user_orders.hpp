#pragma once
// scheduler::user_orders: what a user ordered of one running job that must hold against the
// scheduler's own decisions, until the user releases it (docs/operations.md, "Changing a
// running job").
//
// - A pin: `coach migrate JOB --shard K --to NODE` moved shard K to NODE. A migration starts a
//   new shard there (its id is the next free one) and hands it K's slices, so the pin follows
//   the new shard: the first shard placed on NODE after the order is the one pinned. The
//   rebalancer never moves a pinned shard; `coach migrate JOB --shard K --release` unpins it.
// - A hold: `coach rescale JOB --workers N [--shards M]` holds those counts: no policy resizes
//   them (nor after `coach policy set`), and a restart of the run starts with them;
//   `coach rescale JOB --release` lets the policies size the job again.
//
// Kept in the scheduler's memory with the job's run: a restarted scheduler forgets them.
// Plain logic, no clock. Threads: one owner (the job registry's).

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace coach::scheduler {

class user_orders {
 public:
  /// The user asked to move shard `shard` to `host` (before the master answered: the new shard
  /// may be placed before the answer comes).
  void migrating(std::uint32_t shard, std::uint32_t host);
  /// The master refused that migration: nothing is pinned by it.
  void migration_refused(std::uint32_t shard, std::uint32_t host);
  /// Shard `id` was placed on `host`. True when it is the new shard of a user's migration (it
  /// is pinned there now).
  bool placed(std::uint32_t id, std::uint32_t host);
  /// A change took effect: `live` are the job's shards owning slices now. Pins of shards gone
  /// are dropped (a migration's new shard, placed and still waiting for its slices, is kept).
  void live(std::span<const std::uint32_t> live);
  /// Whether shard `id` is pinned.
  bool pinned(std::uint32_t id) const { return pins_.contains(id); }
  /// The node shard `id` is pinned to, if it is.
  std::optional<std::uint32_t> pin_of(std::uint32_t id) const;
  /// Unpins shard `id`. False when it was not pinned.
  bool release_pin(std::uint32_t id) { return pins_.erase(id) > 0; }
  const std::map<std::uint32_t, std::uint32_t>& pins() const noexcept { return pins_; }
  /// Forgets every pin and pending migration (a new run places its shards anew).
  void clear_pins() {
    pins_.clear();
    pending_.clear();
  }

  /// The user rescaled the job (0: that count unchanged, a hold on it already kept).
  void hold(std::uint32_t workers, std::uint32_t shards);
  /// Releases the hold. False when there was none.
  bool release_hold();
  std::uint32_t held_workers() const noexcept { return held_workers_; }  ///< 0: not held
  std::uint32_t held_shards() const noexcept { return held_shards_; }    ///< 0: not held
  bool holds() const noexcept { return held_workers_ != 0 || held_shards_ != 0; }

  /// Everything in force, for `coach status` ("shard 2 pinned to 'b' (coach migrate)",
  /// "workers 3 held (coach rescale)"). `name` names a host.
  template <class Name>
  std::vector<std::string> describe(Name name) const {
    std::vector<std::string> out;
    for (const auto& [k, h] : pins_)
      out.push_back("shard " + std::to_string(k) + " pinned to '" + name(h) + "' (coach migrate)");
    if (held_workers_)
      out.push_back("workers " + std::to_string(held_workers_) + " held (coach rescale)");
    if (held_shards_)
      out.push_back("shards " + std::to_string(held_shards_) + " held (coach rescale)");
    return out;
  }

  /// Forgets everything (the job ended).
  void clear() { *this = user_orders{}; }

 private:
  struct pending {
    std::uint32_t from = 0;           ///< the shard the user migrated
    std::uint32_t host = 0;           ///< where to
    std::optional<std::uint32_t> to;  ///< its new shard, once placed
  };
  std::map<std::uint32_t, std::uint32_t> pins_;  ///< shard id -> host
  std::vector<pending> pending_;
  std::uint32_t held_workers_ = 0;
  std::uint32_t held_shards_ = 0;
};

}  // namespace coach::scheduler
