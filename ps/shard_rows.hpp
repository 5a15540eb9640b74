#pragma once
// ps::shard_rows: how a shard's sparse rows follow its dense key ranges.
//
// A job's embedding tables hash their rows into sparse::bucket_count buckets
// (sparse/row_hash.hpp). Bucket b rides with dense key k(b) = floor(b * N / bucket_count), N the
// model's dense parameters: the shard that owns key k(b) owns the rows of bucket b. So the shard
// map that cuts the dense vector also places the rows, and everything that moves key ranges —
// a migration, an added shard, a drained one, a replica's copy, a checkpoint — moves the rows
// with them, through the same transfers, with no second map to keep in step. A shard owning a
// share f of the keys owns a share f of the buckets (to within one bucket a range), so the rows
// spread as evenly as the slices do.
//
// The rows' learning rate follows the dense optimizer's schedule: a step's rate for the rows is
// sparse_optimizer.learning_rate times the dense rate of the step over the dense base rate
// (warm-up, decay, lr_scaling and adascale alike), and lazy_adam's step number is the dense
// Adam's (steps with samples applied), which every shard counts alike.

#include <cstdint>
#include <span>
#include <vector>

#include "ps/shard_map.hpp"
#include "sparse/row_store.hpp"

namespace coach::ps {

/// What a shard needs to hold a job's sparse rows (shard_options::rows).
struct sparse_rows_config {
  std::uint64_t seed = 0;                    ///< the job's seed (initial rows)
  std::vector<sparse::table_config> tables;  ///< the model's tables, in order
  sparse::row_optimizer_config optimizer;    ///< spec `sparse_optimizer:`
  std::uint64_t num_params = 0;  ///< N: the model's dense parameters, in [1, max_rows_num_params]
  friend bool operator==(const sparse_rows_config&, const sparse_rows_config&) = default;
};

/// Dense parameters a model with sparse tables may have: bucket * num_params fits 64 bits.
inline constexpr std::uint64_t max_rows_num_params = std::uint64_t{1} << 47;

/// The dense key bucket b rides with: floor(b * num_params / bucket_count).
/// REQUIRES: num_params <= max_rows_num_params.
inline std::uint64_t bucket_key(std::uint32_t bucket, std::uint64_t num_params) {
  static_assert(sparse::bucket_count == 1u << 16);
  return (std::uint64_t{bucket} * num_params) >> 16;
}

/// The buckets whose keys lie in `ranges` (ascending, disjoint), as bucket ranges.
std::vector<sparse::bucket_range> buckets_of(std::span<const key_range> ranges,
                                             std::uint64_t num_params);

/// The key (and so, through a shard map, the shard) that holds row `row` of table `table`.
inline std::uint64_t row_key_of(std::uint32_t table, std::uint64_t row, std::uint64_t num_params) {
  return bucket_key(sparse::bucket_of(table, row), num_params);
}

}  // namespace coach::ps
