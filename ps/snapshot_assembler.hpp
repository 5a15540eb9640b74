#pragma once
// ps::snapshot_assembler: the whole parameter vectors a job master assembles from its shards'
// snapshots, one per version it wants: the version after an epoch's last step (evaluated and
// checkpointed) or the job's last version (a cancelled job's result). Each version is asked of
// the shards once, under the configuration of the step it is asked at (to_ask()); the shards
// answer with their keys, in pieces, and a version is whole once every key arrived exactly
// once. An epoch whose end moved (a dead worker's chunks went back) has its version forgotten
// and asked again at the new end (reopen()). The job master (actors/master_actor.cpp) sends the
// requests and passes the answers in; tests/unit/snapshot_assembler_test.cpp drives it alone.
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
#include "ps/key_coverage.hpp"

namespace coach::ps {

class snapshot_assembler {
 public:
  /// Vectors of `num_params` floats.
  explicit snapshot_assembler(std::uint64_t num_params) : num_params_(num_params) {}

  /// Version `version` is wanted, as the end of `epoch`; `final`: the job's last version (not
  /// evaluated). Wanting a version again only adds `final`.
  void request(std::int64_t version, std::uint32_t epoch, bool final);
  /// The versions up to `step` wanted and not asked of the shards yet, oldest first; they
  /// count as asked from now on.
  std::vector<std::int64_t> to_ask(std::int64_t step);
  /// Forgets the versions (not final ones) that ended these epochs: their ends moved.
  void reopen(const std::set<std::uint32_t>& epochs);

  /// A version assembled whole.
  struct assembled {
    std::int64_t version = 0;
    std::uint32_t epoch = 0;
    bool final = false;
    std::shared_ptr<std::vector<float>> values;
  };
  /// A shard's answer for `version`: `pieces[i]` holds the keys `ranges[i]`. The whole vector
  /// once every key arrived (the version is forgotten then); nullopt before, and for a version
  /// not wanted (a late answer). Errors (protocol_error, nothing taken): a piece whose length
  /// differs from its range's, keys outside the vector, keys already received.
  result<std::optional<assembled>> add(std::int64_t version, std::span<const key_range> ranges,
                                       std::span<const std::span<const float>> pieces);

  /// Versions wanted and not whole yet.
  std::size_t pending() const noexcept { return wanted_.size(); }

 private:
  struct assembly {
    std::uint32_t epoch = 0;
    bool final = false;
    bool asked = false;
    std::shared_ptr<std::vector<float>> values;
    key_coverage received;
  };

  std::uint64_t num_params_;
  std::map<std::int64_t, assembly> wanted_;  ///< by version
};

}  // namespace coach::ps
