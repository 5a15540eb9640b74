#pragma once
// ps::shard_map: which shard owns which slice of the flat parameter vector, with a version.
// The vector is cut into fixed-size slices (the last may be shorter). Workers cache the map; a
// change (migration, new shard) bumps the version (DESIGN.md "Shard map, migration").

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.hpp"

namespace coach::ps {

/// One slice changing owner (a step of a migration plan).
struct slice_move {
  std::size_t slice = 0;
  std::uint32_t from = 0;
  std::uint32_t to = 0;
  friend bool operator==(const slice_move&, const slice_move&) = default;
};

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

  /// A map from its parts, as a configuration message carries them. Errors (invalid_argument,
  /// saying what is wrong): a zero size, owners.size() != ceil(num_params / slice_size), an owner
  /// id of max_shards or more.
  static result<shard_map> from_owners(std::size_t num_params, std::size_t slice_size,
                                       std::vector<std::uint32_t> owners, std::uint64_t version);
  /// Shard ids a map may name (a bound for maps that arrive from the network).
  static constexpr std::uint32_t max_shards = 1u << 16;

  /// The owner of each slice, by slice index.
  const std::vector<std::uint32_t>& owners() const noexcept { return owner_; }
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
  /// Applies every move of a plan and bumps the version once.
  /// REQUIRES: each move's `from` is the slice's current owner.
  void apply(const std::vector<slice_move>& moves);

  /// Slices owned by each shard id in [0, num_shards()).
  std::vector<std::size_t> load() const;
  /// The shards that own at least one slice, ascending.
  std::vector<std::uint32_t> live_shards() const;
  /// The slices a shard owns, ascending.
  std::vector<std::size_t> slices_of(std::uint32_t shard) const;

  // Plans: pure functions of the map, deterministic (ties go to the lower shard id and the
  // higher slice index), so every run of a schedule moves the same slices.

  /// The moves that give a new, empty shard `to` an even share: slices are taken from the most
  /// loaded shards (their last slices) until `to` holds floor(S / (live + 1)), where live counts
  /// the shards that own slices. REQUIRES: `to` owns nothing.
  std::vector<slice_move> plan_add(std::uint32_t to) const;
  /// The moves that empty shard `from` onto the other shards that own slices, each slice to the
  /// least loaded of them. Empty when `from` owns nothing; REQUIRES: another shard owns slices
  /// or `from` owns nothing.
  std::vector<slice_move> plan_drain(std::uint32_t from) const;
  /// The moves that hand every slice of `from` to `to` (a shard migrating whole to another
  /// place). REQUIRES: from != to.
  std::vector<slice_move> plan_migrate(std::uint32_t from, std::uint32_t to) const;

  friend bool operator==(const shard_map&, const shard_map&) = default;

 private:
  std::size_t num_params_ = 0;
  std::size_t slice_size_ = 1;
  std::uint32_t num_shards_ = 0;
  std::uint64_t version_ = 0;
  std::vector<std::uint32_t> owner_;
};

}  // namespace coach::ps
