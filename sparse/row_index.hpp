#pragma once
// sparse::row_index: the rows of one table a shard holds, row id -> slot in the table's arena.
//
// Open addressing with linear probing over a power-of-two array of (row, slot) pairs, 12 bytes
// of payload in a 16-byte entry, grown (doubled, every entry re-inserted) past a load of 0.7.
// Why not std::unordered_map: a node per row (~40 bytes, one allocation each) would cost more
// memory than the rows themselves at dimension 8 (32 bytes), and a table of 10^8 rows is the
// size this has to hold. Erase shifts the following entries back (no tombstones), so a table
// that loses rows to a migration and gains others stays as fast as a fresh one.
//
// Not thread-safe.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace coach::sparse {

class row_index {
 public:
  /// No row is ever this value (rows are < a table's row count, at most 2^63).
  static constexpr std::uint64_t empty_row = ~std::uint64_t{0};

  row_index() = default;

  /// The slot of `row`, if held.
  std::optional<std::uint32_t> find(std::uint64_t row) const noexcept;
  /// Holds `row` at `slot`. REQUIRES: row != empty_row and not held.
  void insert(std::uint64_t row, std::uint32_t slot);
  /// Forgets `row`; returns its slot, if it was held.
  std::optional<std::uint32_t> erase(std::uint64_t row) noexcept;

  /// Asks the CPU to bring `row`'s home entry into the cache (a lookup a few rows later then
  /// finds it there).
  void prefetch(std::uint64_t row) const noexcept {
    if (!entries_.empty()) __builtin_prefetch(&entries_[home(row)]);
  }
  /// Forgets every row, keeping the entry array (a step's sums reuse it).
  void clear() noexcept;

  /// Rows held.
  std::size_t size() const noexcept { return size_; }
  /// Bytes of the entry array.
  std::size_t bytes() const noexcept { return entries_.size() * sizeof(entry); }

  /// Calls f(row, slot) for every row held, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& e : entries_)
      if (e.row != empty_row) f(e.row, e.slot);
  }

 private:
  struct entry {
    std::uint64_t row = empty_row;
    std::uint32_t slot = 0;
  };
  std::size_t home(std::uint64_t row) const noexcept;
  void grow();

  std::vector<entry> entries_;  ///< size 0 or a power of two
  std::size_t size_ = 0;
};

}  // namespace coach::sparse
