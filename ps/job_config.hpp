#pragma once
// ps::job_config: who computes and who owns what, from a given step on. The job master owns the
// job's configuration and changes it only at step boundaries; every change bumps the version.
// Workers and shards receive each new configuration before the first chunk grant that refers to
// it (docs/design.md, "Elastic jobs"), and every push names the configuration it was made under.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "common/buffer_pool.hpp"
#include "ps/shard_map.hpp"

namespace coach::ps {

struct job_config {
  std::uint64_t version = 1;           ///< +1 per change
  std::int64_t from_step = 0;          ///< the first step this configuration governs
  std::vector<std::uint32_t> members;  ///< worker ranks contributing to each step, ascending
  shard_map map;                       ///< which shard owns which slice

  bool is_member(std::uint32_t rank) const noexcept {
    return std::binary_search(members.begin(), members.end(), rank);
  }
  friend bool operator==(const job_config&, const job_config&) = default;
};

/// Slices leaving one shard for another at a step boundary, as the source hands them over:
/// their values and optimizer state at version `version` (every step before it applied).
struct slice_transfer {
  std::uint32_t from = 0;
  std::uint32_t to = 0;
  std::int64_t version = 0;  ///< steps applied to the values
  std::int64_t updates = 0;  ///< steps with samples applied (Adam's t)
  /// Samples of the steps applied: the learning-rate schedule's position (ps/optimizer.hpp).
  std::uint64_t samples_applied = 0;
  std::vector<key_range> ranges;  ///< ascending, disjoint
  std::vector<float> values;      ///< the ranges' values, concatenated (unless `buffer` is set)
  /// Instead of `values`: a buffer that holds them, taken over without a copy (a shard that
  /// hands over everything it owns gives its own; a transfer received from another process is
  /// held in the memory it arrived in). An empty shard adopts it as its storage.
  std::shared_ptr<float_buffer> buffer;
  /// Others still read `buffer` (the source's last answers are being sent): nobody writes it
  /// again, and a shard that adopts the transfer copies it.
  bool buffer_shared = false;
  std::vector<float> state_a;  ///< momentum velocity or Adam m (empty for sgd)
  std::vector<float> state_b;  ///< Adam v (empty otherwise)
  /// The sparse rows of the buckets the ranges carry (ps/shard_rows.hpp), in
  /// sparse::row_store's transfer layout; empty for a model without sparse tables.
  std::vector<std::byte> rows;
  /// lr_scaling adascale: the source's gain estimate (adascale_gain::state(); empty: none).
  std::vector<double> gain_state;

  /// The values, wherever they are.
  std::span<const float> values_span() const noexcept {
    return buffer ? std::as_const(*buffer).span() : std::span<const float>(values);
  }
};

}  // namespace coach::ps
