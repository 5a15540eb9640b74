#pragma once
// sparse::row_hash: where a row of an embedding table lives and what it holds before its first
// update. Both are pure functions of the row's identity, so any shard that creates a row creates
// the same one, and a row moved between shards, or created again after a checkpoint that did not
// hold it, is the row every other run would have had.
//
// Identity: (table, row), table an index in the model's list of sparse tables, row in [0, rows).
//
// Placement: rows are spread over bucket_count buckets by a hash of (table, row); a job's sparse
// map (sparse/bucket_map.hpp) gives each shard a set of bucket ranges, as the dense map gives key
// ranges. Hashing (not row ranges) because ids are skewed: in click logs the most frequent ids are
// a few, often small numbers (a vocabulary sorted by count), and row ranges would put them all on
// one shard. 65,536 buckets: a shard move or an added shard moves a 1/65,536 grain of the rows,
// while a bucket's row count stays large enough (10^8 rows: ~1,500 a bucket) for the grain to be
// even.
//
// Initial values: element i of row (table, row) is uniform in [-scale, scale], drawn from the
// SplitMix64 mixer (kernels/counter_rng.hpp) keyed by (seed, table, row): integer arithmetic and
// one float multiply, identical on every compiler and device.

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/counter_rng.hpp"

namespace coach::sparse {

/// Buckets the rows of every table are hashed into (a power of two).
inline constexpr std::uint32_t bucket_count = 1u << 16;

/// A row of a table.
struct row_key {
  std::uint32_t table = 0;
  std::uint64_t row = 0;
  friend bool operator==(const row_key&, const row_key&) = default;
};

/// The 64-bit hash of (table, row) everything else derives from.
inline std::uint64_t row_hash(std::uint32_t table, std::uint64_t row) {
  using kernels::counter_rng::mix;
  return mix(row ^ mix(0x5eed'7ab1'e000'0000ull + table));
}

/// The bucket of (table, row), in [0, bucket_count): the hash's top bits.
inline std::uint32_t bucket_of(std::uint32_t table, std::uint64_t row) {
  return static_cast<std::uint32_t>(row_hash(table, row) >> 48);
}

/// Writes the initial values of (table, row) into `out` (its size is the table's dimension):
/// uniform in [-scale, scale] (to float rounding), a pure function of (seed, table, row, i).
inline void init_row(std::uint64_t seed, std::uint32_t table, std::uint64_t row, float scale,
                     std::span<float> out) {
  using kernels::counter_rng::mix;
  const std::uint64_t key = mix(seed ^ row_hash(table, row));
  for (std::size_t i = 0; i < out.size(); ++i) {
    // 24 bits: u in [0, 1) exactly representable; 2u - 1 in [-1, 1).
    const auto u = static_cast<float>(mix(key + i) >> 40) * (1.0f / 16777216.0f);
    out[i] = (2.0f * u - 1.0f) * scale;
  }
}

}  // namespace coach::sparse
