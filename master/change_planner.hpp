#pragma once
// master::plan_change: what one change of a running job's configuration at a step boundary is, as
// plain logic (docs/design.md, "Elastic jobs"). The job master (master/job_master.hpp) asks it
// when a change begins; it says which configuration follows, which workers and shards must
// start, and which slices each shard hands to which (the migrate orders). Starting a part is the
// caller's: `starters` start one and say whether it could; a worker that cannot start is left
// out and no more are added; a shard that cannot start ends the adding of shards. Unit-tested in
// tests/unit/master/change_planner_test.cpp; tests/unit/elastic_test.cpp drives it under random
// changes with real shards.
//
// The orders: a slice moved twice within one change (to a shard added, then on to another)
// goes straight from where it is to where it ends; one order per (source, destination) pair,
// adjacent slices as one range, released once `step` steps are applied.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ps/change_kind.hpp"
#include "ps/job_config.hpp"

namespace coach::master {

using ps::change_kind;
using ps::job_config;
using ps::key_range;
using ps::shard_map;
using ps::slice_move;

/// A change asked of a running job.
struct job_change {
  using kind_type = change_kind;
  kind_type kind = kind_type::workers;
  std::uint32_t value = 0;  ///< workers: the new count; shards: the new count; migrate: shard id
  /// migrate: the shard that takes the slices, started ahead (none: a new one is started).
  std::optional<std::uint32_t> to;
};

/// Shard `from` hands `ranges` over to shard `to` once `at_version` steps are applied.
struct release_order {
  std::uint32_t from = 0;
  std::uint32_t to = 0;
  std::int64_t at_version = 0;
  std::uint64_t config_version = 0;  ///< the configuration the move leads to
  std::vector<key_range> ranges;     ///< ascending, disjoint, adjacent ones merged
  friend bool operator==(const release_order&, const release_order&) = default;
};

/// Starts the parts a change adds (the caller's side effects).
struct change_starters {
  /// Starts worker `rank`, a member of `next` from next.from_step on; false: it could not.
  std::function<bool(std::uint32_t rank, const job_config& next)> worker;
  /// Starts a new shard and returns its id; nullopt: it could not.
  std::function<std::optional<std::uint32_t>()> shard;
};

struct change_plan {
  job_config next;                    ///< version + 1, from the change's step on
  std::vector<std::uint32_t> added;   ///< worker ranks started
  std::vector<release_order> orders;  ///< by (source, destination)
  std::uint64_t moved_keys = 0;       ///< keys the orders hand over
  /// Why nothing changes (a migration of a shard that owns nothing); empty otherwise.
  std::string ignored;
};

/// The change `c` of configuration `cfg` at step `step`; new ranks from `next_rank` on (it
/// advances past the ranks used).
change_plan plan_change(const job_config& cfg, const job_change& c, std::int64_t step,
                        std::uint32_t& next_rank, const change_starters& start);

/// Shards that own slices in `from` and none in `to`: they hand everything over.
std::vector<std::uint32_t> emptied_shards(const shard_map& from, const shard_map& to);

}  // namespace coach::master
