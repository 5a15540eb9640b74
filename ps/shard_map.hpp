#pragma once
// ps::shard_map: which shard owns which slice of the flat parameter vector, with a version.
// The vector is cut into fixed-size slices (the last may be shorter). Workers cache the map; a
// change (migration, new shard) bumps the version (DESIGN.md "Shard map, migration").

#include <cstddef>
#include <cstdint>
#include <vector>

namespace coach::ps {

/// A half-open run [begin, end) of parameter indices.
struct key_range {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t size() const noexcept { return end - begin; }
  friend bool operator==(const key_range&, const key_range&) = default;
};

class shard_map {
 public:
  shard_map() = default;

  /// num_params split into slices of slice_size, dealt to num_shards shards in contiguous,
  /// balanced blocks (shard k gets slices [k*S/M, (k+1)*S/M)). Version 1.
  /// REQUIRES: num_params >= 1, slice_size >= 1, num_shards >= 1. When there are fewer slices
  /// than shards, the extra shards own nothing.
  static shard_map even(std::size_t num_params, std::size_t slice_size, std::uint32_t num_shards);

  std::size_t num_params() const noexcept { return num_params_; }
  std::size_t slice_size() const noexcept { return slice_size_; }
  std::size_t num_slices() const noexcept { return owner_.size(); }
  std::uint32_t num_shards() const noexcept { return num_shards_; }
  std::uint64_t version() const noexcept { return version_; }

  std::uint32_t owner(std::size_t slice) const;
  key_range slice_range(std::size_t slice) const;
  /// The parameter ranges a shard owns, adjacent slices merged, in key order.
  std::vector<key_range> ranges_of(std::uint32_t shard) const;

  /// Moves a slice to another shard (which may be new) and bumps the version.
  void assign(std::size_t slice, std::uint32_t shard);

 private:
  std::size_t num_params_ = 0;
  std::size_t slice_size_ = 1;
  std::uint32_t num_shards_ = 0;
  std::uint64_t version_ = 0;
  std::vector<std::uint32_t> owner_;
};

}  // namespace coach::ps
