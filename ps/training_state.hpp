#pragma once
// ps::training_state: what the shards of a job hold at one version, for the whole parameter
// vector: the values, the optimizer's state and the counters that position the optimizer. A
// checkpoint keeps one (spec/checkpoint_file.hpp). The job master assembles it at an
// epoch's end from every shard's snapshot (shard::snapshot, master::snapshot_assembler::add_state);
// a job resumed from it starts each shard from its part (slice_of, adopted by an empty
// ps::shard). The update of a key depends on nothing but its value, its state, the step's
// learning rate (a function of samples_applied) and Adam's step number (updates), so the steps
// after a resume are bitwise those of the run that was not interrupted, however the vector is
// cut into shards before and after (tests/unit/master/checkpoint_test.cpp).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.hpp"
#include "ps/job_config.hpp"
#include "ps/shard_map.hpp"

namespace coach::ps {

struct training_state {
  std::int64_t version = 0;  ///< steps applied: the next step is `version`
  std::int64_t updates = 0;  ///< steps applied with samples (Adam's t)
  /// Samples of the steps applied: the learning-rate schedule's position (ps/optimizer.hpp).
  std::uint64_t samples_applied = 0;
  std::vector<float> values;   ///< the whole vector
  std::vector<float> state_a;  ///< momentum velocity or Adam m, as long as values; empty for sgd
  std::vector<float> state_b;  ///< Adam v, as long as values; empty otherwise
  /// A model with sparse tables: each shard's rows and their optimizer state
  /// (sparse::row_store's transfer layout, one a shard); empty otherwise. Not yet written to
  /// checkpoint files (docs/sparse.md).
  std::vector<std::vector<std::byte>> rows;
};

/// Checks that `s` fits a job of `num_params` floats whose optimizer keeps `state_per_param`
/// floats per key, and that its counters are possible (version >= updates >= 0). Errors:
/// invalid_argument saying what disagrees.
result<void> check(const training_state& s, std::size_t num_params, std::size_t state_per_param);

/// The keys `ranges` of `s` (ascending, disjoint, within the vector) as the transfer an empty
/// shard `to` adopts (shard::adopt): their values and state, and the counters of `s`.
/// REQUIRES: check(s, ...) passed, ranges within s.values.
slice_transfer slice_of(const training_state& s, const std::vector<key_range>& ranges,
                        std::uint32_t to);

}  // namespace coach::ps
