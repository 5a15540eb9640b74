#pragma once
// master::snapshot_assembler: the whole parameter vectors a job master assembles from its shards'
// snapshots, one per version it wants: the version after an epoch's last step (evaluated and
// checkpointed) or the job's last version (a cancelled job's result). Each version is asked of
// the shards once, under the configuration of the step it is asked at (to_ask()); the shards
// answer with their keys, in pieces, and a version is whole once every key arrived exactly
// once. An epoch whose end moved (a dead worker's chunks went back) has its version forgotten
// and asked again at the new end (reopen()). A version wanted with the optimizer state (a
// checkpoint: ps/training_state.hpp) is answered by each shard with its snapshot (ps::shard::
// snapshot: values, state and counters of the keys it owns) and assembled into a
// training_state: the counters must agree on the version; the update counts and samples
// applied may differ between shards after a worker's death (ps/shard.hpp, adopt), and the
// larger is kept, as adopt does. The job master (master/job_master.hpp) sends the requests
// and passes the answers in; tests/unit/master/snapshot_assembler_test.cpp drives it alone.
//
// Threads: one owner (the master).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "common/error.hpp"
#include "ps/job_config.hpp"
#include "ps/key_coverage.hpp"
#include "ps/training_state.hpp"

namespace coach::master {

using ps::job_config;
using ps::key_coverage;
using ps::key_range;
using ps::slice_transfer;
using ps::training_state;

class snapshot_assembler {
 public:
  /// Vectors of `num_params` floats, whose optimizer keeps `state_per_param` floats per key
  /// (0, 1 or 2: what a snapshot with state carries).
  explicit snapshot_assembler(std::uint64_t num_params, std::size_t state_per_param = 0)
      : num_params_(num_params), state_per_param_(state_per_param) {}

  /// Version `version` is wanted, as the end of `epoch`; `final`: the job's last version (not
  /// evaluated); `with_state`: with the optimizer state and counters (a checkpoint). Wanting a
  /// version again only adds `final`, and `with_state` while it is not asked yet.
  void request(std::int64_t version, std::uint32_t epoch, bool final, bool with_state = false);
  /// The versions up to `step` wanted and not asked of the shards yet, oldest first; they
  /// count as asked from now on.
  std::vector<std::int64_t> to_ask(std::int64_t step);
  /// Whether `version` is wanted with the optimizer state (the shards are asked for their
  /// snapshots, not their values).
  bool wants_state(std::int64_t version) const;
  /// Whether `version` was asked of the shards and is not whole yet.
  bool asked(std::int64_t version) const;
  /// The versions asked of the shards and not whole yet, oldest first.
  std::vector<std::int64_t> asked_versions() const;
  /// Whether some key of `ranges` of an asked `version` has not arrived (a shard whose answer
  /// may have been lost with it is asked again only then).
  bool lacks(std::int64_t version, std::span<const key_range> ranges) const;
  /// Forgets the versions (not final ones) that ended these epochs: their ends moved.
  void reopen(const std::set<std::uint32_t>& epochs);

  /// A version assembled whole.
  struct assembled {
    std::int64_t version = 0;
    std::uint32_t epoch = 0;
    bool final = false;
    std::shared_ptr<std::vector<float>> values;
    /// Wanted with the state: everything at `version` (its values a copy of `values`); else null.
    std::shared_ptr<training_state> state;
  };
  /// A shard's answer for `version`: `pieces[i]` holds the keys `ranges[i]`. The whole vector
  /// once every key arrived (the version is forgotten then); nullopt before, and for a version
  /// not wanted (a late answer). Errors (protocol_error, nothing taken): a piece whose length
  /// differs from its range's, keys outside the vector, keys already received, a version
  /// wanted with the state (its answers are snapshots).
  result<std::optional<assembled>> add(std::int64_t version, std::span<const key_range> ranges,
                                       std::span<const std::span<const float>> pieces);
  /// A shard's snapshot (ps::shard::snapshot) for version `t.version`, as add(). Errors
  /// (protocol_error, nothing taken): those of add, state of another length than the keys
  /// times state_per_param, counters that disagree with the version (more updates than steps),
  /// a version wanted without the state. Taken by value: its sparse rows (gigabytes with a
  /// large table) move into the assembled state instead of being copied.
  result<std::optional<assembled>> add_state(slice_transfer t);

  /// Versions wanted and not whole yet.
  std::size_t pending() const noexcept { return wanted_.size(); }

 private:
  struct assembly {
    std::uint32_t epoch = 0;
    bool final = false;
    bool asked = false;
    bool with_state = false;
    std::shared_ptr<std::vector<float>> values;
    key_coverage received;
    std::shared_ptr<training_state> state;  ///< with_state: state and counters so far
  };
  using wanted_map = std::map<std::int64_t, assembly>;
  /// Checks `ranges` against `pieces` and the keys received, and takes them.
  result<void> take(std::int64_t version, assembly& a, std::span<const key_range> ranges,
                    std::span<const std::span<const float>> pieces);
  /// The version whole, forgotten here.
  std::optional<assembled> if_whole(wanted_map::iterator it);

  std::uint64_t num_params_;
  std::size_t state_per_param_;
  wanted_map wanted_;  ///< by version
};

}  // namespace coach::master
