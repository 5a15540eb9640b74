#pragma once
// ps::key_coverage: which keys of one parameter version have arrived so far.
//
// A shard answers a push piece by piece (one params message per piece), so a receiver cannot
// count messages: it counts keys. This class counts them exactly: it refuses a range outside
// [0, num_keys) or one that overlaps a key already received, so complete() means every key
// arrived exactly once, whatever the number and order of the messages.
//
// Not thread-safe: one actor owns it.

#include <cstdint>
#include <map>
#include <span>

#include "common/error.hpp"
#include "ps/shard_map.hpp"

namespace coach::ps {

class key_coverage {
 public:
  /// Tracks the keys [0, num_keys).
  explicit key_coverage(std::uint64_t num_keys) : num_keys_(num_keys) {}

  /// Adds the ranges of one message, all or none. Errors (protocol_error, naming the range): a
  /// range with begin > end, one that reaches past num_keys, one that overlaps a key already
  /// received or another range of the same call. Empty ranges are accepted and add nothing.
  result<void> add(std::span<const key_range> ranges);

  /// Keys received so far.
  std::uint64_t covered() const noexcept { return covered_; }
  std::uint64_t num_keys() const noexcept { return num_keys_; }
  /// True when every key of [0, num_keys) has arrived.
  bool complete() const noexcept { return covered_ == num_keys_; }
  /// The keys of `r` not received yet, ascending (appended to `out`).
  void missing(const key_range& r, std::vector<key_range>& out) const;
  /// Forgets every range: ready for the next version.
  void clear() noexcept {
    by_begin_.clear();
    covered_ = 0;
  }

 private:
  bool overlaps(const key_range& r) const;

  std::uint64_t num_keys_;
  std::map<std::uint64_t, std::uint64_t> by_begin_;  ///< received ranges: begin -> end
  std::uint64_t covered_ = 0;
};

}  // namespace coach::ps
