#include "sparse/row_index.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <unordered_map>

namespace coach::sparse {
namespace {

TEST(RowIndex, FindsWhatWasInsertedAndForgetsWhatWasErased) {
  row_index idx;
  EXPECT_FALSE(idx.find(7));
  idx.insert(7, 70);
  idx.insert(0, 1);
  EXPECT_EQ(idx.find(7), 70u);
  EXPECT_EQ(idx.find(0), 1u);
  EXPECT_FALSE(idx.find(8));
  EXPECT_EQ(idx.erase(7), 70u);
  EXPECT_FALSE(idx.erase(7));
  EXPECT_FALSE(idx.find(7));
  EXPECT_EQ(idx.size(), 1u);
  idx.clear();
  EXPECT_EQ(idx.size(), 0u);
  EXPECT_FALSE(idx.find(0));
}

// Random inserts and erases (consecutive ids, as click logs' vocabularies are, and a few huge
// ones) checked against std::unordered_map after every operation's batch: erase's backward
// shift must keep every other row reachable.
TEST(RowIndex, AgreesWithAMapThroughRandomInsertsAndErases) {
  std::mt19937_64 rng(43);
  row_index idx;
  std::unordered_map<std::uint64_t, std::uint32_t> ref;
  std::uint32_t next = 0;
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < 500; ++i) {
      const std::uint64_t row = rng() % 4 == 0 ? rng() >> 2 : rng() % 20000;
      if (rng() % 3 == 0) {
        const auto got = idx.erase(row);
        const auto it = ref.find(row);
        ASSERT_EQ(got.has_value(), it != ref.end()) << row;
        if (got) {
          EXPECT_EQ(*got, it->second);
          ref.erase(it);
        }
      } else if (!ref.contains(row)) {
        idx.insert(row, next);
        ref.emplace(row, next++);
      }
    }
    ASSERT_EQ(idx.size(), ref.size());
    for (const auto& [row, slot] : ref) ASSERT_EQ(idx.find(row), slot) << "row " << row;
  }
  std::size_t seen = 0;
  idx.for_each([&](std::uint64_t row, std::uint32_t slot) {
    ++seen;
    EXPECT_EQ(ref.at(row), slot);
  });
  EXPECT_EQ(seen, ref.size());
}

TEST(RowIndex, StaysWithinSixteenBytesAnEntryAtItsLoad) {
  row_index idx;
  for (std::uint64_t r = 0; r < 100000; ++r) idx.insert(r, static_cast<std::uint32_t>(r));
  // Load between 0.35 and 0.7: at most 16 / 0.35 bytes a row.
  EXPECT_LE(idx.bytes(), 100000u * 16 * 100 / 35);
  EXPECT_GE(idx.bytes(), 100000u * 16 * 10 / 7);
}

}  // namespace
}  // namespace coach::sparse
