// worker::row_puller: a step's rows asked of the shards that hold them, taken once each from
// their answers, asked again of their new holder when one says they moved, and the row
// gradients split by holder for the pushes.
#include "worker/row_puller.hpp"

#include <gtest/gtest.h>

#include "ps/shard_rows.hpp"

namespace coach::worker {
namespace {

constexpr std::uint64_t n = 16;  // dense keys: shard 0 holds [0, 8), shard 1 [8, 16)

std::uint32_t by_half(std::uint64_t key) {
  return key < 8 ? 0 : 1;
}

/// Shard `from`'s answer at `step` with rows `ids` of table t, each row's values (id, id + .5).
wire::wire_message answer(std::int64_t step, std::uint32_t t, std::vector<std::uint64_t> ids,
                          std::vector<ps::key_range> moved = {}, std::uint64_t version = 0) {
  wire::wire_message m;
  m.hdr.kind = wire::msg_kind::rows;
  m.hdr.step = step;
  m.hdr.ranges = std::move(moved);
  m.hdr.map_version = version;
  struct mem {
    std::vector<std::uint64_t> ids;
    std::vector<float> v;
  };
  auto p = std::make_shared<mem>();
  p->ids = std::move(ids);
  for (auto id : p->ids) p->v.insert(p->v.end(), {float(id), float(id) + 0.5f});
  const wire::row_frames_part part{t, p->ids, p->v};
  wire::append_row_parts(m, std::span(&part, 1), p, true);
  return m;
}

std::vector<std::uint64_t> ids_of(const row_parts_for& p, std::size_t part) {
  return {p.parts[part].ids.begin(), p.parts[part].ids.end()};
}

TEST(row_puller, asks_each_row_of_its_holder_once_and_takes_each_answer_once) {
  row_puller rp({2}, n);
  // Rows whose keys fall on either half.
  std::vector<std::uint64_t> lo, hi;
  for (std::uint64_t r = 0; lo.size() < 2 || hi.size() < 2; ++r)
    (ps::row_key_of(0, r, n) < 8 ? lo : hi).push_back(r);
  lo.resize(2);
  hi.resize(2);
  std::vector<std::uint64_t> all = {lo[0], lo[1], hi[0], hi[1]};
  std::sort(all.begin(), all.end());
  rp.start(5, {all});
  auto asks = rp.requests(by_half);
  ASSERT_EQ(asks.size(), 2u);
  EXPECT_EQ(ids_of(asks[0], 0),
            (std::vector<std::uint64_t>{std::min(lo[0], lo[1]), std::max(lo[0], lo[1])}));
  EXPECT_TRUE(rp.requests(by_half).empty()) << "asked once";
  EXPECT_FALSE(rp.complete());
  EXPECT_EQ(rp.accept(answer(5, 0, {lo[0]}), 1).error().message,
            "rows from shard 1: row " + std::to_string(lo[0]) + " of table 0 not asked of it");
  ASSERT_TRUE(rp.accept(answer(4, 0, {lo[0]}), 0)) << "another step's answer is ignored";
  ASSERT_TRUE(rp.accept(answer(5, 0, {lo[0], lo[1]}), 0));
  EXPECT_EQ(rp.accept(answer(5, 0, {lo[0]}), 0).error().message,
            "rows from shard 0: row " + std::to_string(lo[0]) + " of table 0 twice");
  ASSERT_TRUE(rp.accept(answer(5, 0, {hi[0], hi[1]}), 1));
  EXPECT_TRUE(rp.complete());
  const auto v = rp.values(0);
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(v[2 * i + 1], float(all[i]) + 0.5f);
}

TEST(row_puller, a_moved_row_is_asked_again_of_its_new_holder) {
  row_puller rp({2}, n);
  std::uint64_t lo = 0;
  while (ps::row_key_of(0, lo, n) >= 8) ++lo;
  rp.start(1, {{lo}});
  ASSERT_EQ(rp.requests(by_half).count(0), 1u);
  // Shard 0 no longer holds keys [0, 8): the configuration 3 gave them to shard 1.
  ASSERT_TRUE(rp.accept(answer(1, 0, {}, {{0, 8}}, 3), 0));
  EXPECT_EQ(rp.moved_version(), 3u);
  EXPECT_FALSE(rp.complete());
  auto again = rp.requests([](std::uint64_t) { return 1u; });
  ASSERT_EQ(again.count(1), 1u);
  EXPECT_EQ(ids_of(again[1], 0), std::vector<std::uint64_t>{lo});
  ASSERT_TRUE(rp.accept(answer(1, 0, {lo}), 1));
  EXPECT_TRUE(rp.complete());
}

TEST(row_puller, rows_asked_of_a_lost_primary_are_asked_again_of_its_backup) {
  row_puller rp({2}, n);
  std::vector<std::uint64_t> lo, hi;
  for (std::uint64_t r = 0; lo.empty() || hi.empty(); ++r)
    (ps::row_key_of(0, r, n) < 8 ? lo : hi).push_back(r);
  std::vector<std::uint64_t> both = {lo[0], hi[0]};
  std::sort(both.begin(), both.end());
  rp.start(3, {both});
  ASSERT_EQ(rp.requests(by_half).size(), 2u);
  ASSERT_TRUE(rp.accept(answer(3, 0, {lo[0]}), 0));
  rp.ask_again(1);  // shard 1's primary died before it answered
  auto again = rp.requests(by_half);
  ASSERT_EQ(again.size(), 1u) << "only the unanswered row, only of shard 1";
  EXPECT_EQ(ids_of(again[1], 0), std::vector<std::uint64_t>{hi[0]});
  ASSERT_TRUE(rp.accept(answer(3, 0, {hi[0]}), 1));
  EXPECT_TRUE(rp.complete());
}

TEST(row_puller, splits_the_row_gradients_by_holder) {
  row_puller rp({1, 3}, n);
  rp.start(0, {{1, 2, 3}, {7}});
  const auto parts = rp.push_parts(by_half, {{10, 20, 30}, {1, 2, 3}});
  std::size_t rows = 0;
  for (const auto& [k, p] : parts)
    for (const auto& part : p.parts) {
      rows += part.ids.size();
      for (std::size_t i = 0; i < part.ids.size(); ++i) {
        EXPECT_EQ(by_half(ps::row_key_of(part.table, part.ids[i], n)), k);
        if (part.table == 0)
          EXPECT_EQ(part.values[i], 10.0f * float(part.ids[i]));
        else
          EXPECT_EQ(std::vector<float>(part.values.begin(), part.values.end()),
                    (std::vector<float>{1, 2, 3}));
      }
    }
  EXPECT_EQ(rows, 4u);
}

}  // namespace
}  // namespace coach::worker
