#include "sparse/row_index.hpp"

#include "common/enforce.hpp"
#include "kernels/counter_rng.hpp"

namespace coach::sparse {

std::size_t row_index::home(std::uint64_t row) const noexcept {
  // Rows are often small consecutive numbers: mix them so that they do not fill one run.
  return static_cast<std::size_t>(kernels::counter_rng::mix(row)) & (entries_.size() - 1);
}

std::optional<std::uint32_t> row_index::find(std::uint64_t row) const noexcept {
  if (entries_.empty()) return std::nullopt;
  const std::size_t mask = entries_.size() - 1;
  for (std::size_t i = home(row);; i = (i + 1) & mask) {
    const entry& e = entries_[i];
    if (e.row == row) return e.slot;
    if (e.row == empty_row) return std::nullopt;
  }
}

void row_index::grow() {
  std::vector<entry> old = std::move(entries_);
  entries_.assign(old.empty() ? 16 : old.size() * 2, entry{});
  const std::size_t mask = entries_.size() - 1;
  for (const entry& e : old) {
    if (e.row == empty_row) continue;
    std::size_t i = home(e.row);
    while (entries_[i].row != empty_row) i = (i + 1) & mask;
    entries_[i] = e;
  }
}

void row_index::insert(std::uint64_t row, std::uint32_t slot) {
  COACH_ENFORCE(row != empty_row, "row_index: the empty marker is not a row");
  // Load at most 0.7 after the insert.
  if ((size_ + 1) * 10 > entries_.size() * 7) grow();
  const std::size_t mask = entries_.size() - 1;
  std::size_t i = home(row);
  while (entries_[i].row != empty_row) {
    COACH_ENFORCE(entries_[i].row != row, "row_index: row inserted twice");
    i = (i + 1) & mask;
  }
  entries_[i] = entry{row, slot};
  ++size_;
}

std::optional<std::uint32_t> row_index::erase(std::uint64_t row) noexcept {
  if (entries_.empty()) return std::nullopt;
  const std::size_t mask = entries_.size() - 1;
  std::size_t i = home(row);
  while (entries_[i].row != row) {
    if (entries_[i].row == empty_row) return std::nullopt;
    i = (i + 1) & mask;
  }
  const std::uint32_t slot = entries_[i].slot;
  // Backward shift: move each later entry of the run into the hole when its home does not lie
  // cyclically in (hole, its position], so every entry stays reachable from its home.
  std::size_t hole = i;
  for (std::size_t j = (i + 1) & mask; entries_[j].row != empty_row; j = (j + 1) & mask) {
    const std::size_t h = home(entries_[j].row);
    const bool reachable_without = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (reachable_without) continue;
    entries_[hole] = entries_[j];
    hole = j;
  }
  entries_[hole] = entry{};
  --size_;
  return slot;
}

void row_index::clear() noexcept {
  if (size_ == 0) return;
  for (auto& e : entries_) e = entry{};
  size_ = 0;
}

}  // namespace coach::sparse
