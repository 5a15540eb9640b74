// wire/row_frames: sparse rows' frames built and read back, and every malformed layout refused;
// a transfer's rows frame round-trips.
#include "wire/row_frames.hpp"

#include <gtest/gtest.h>

#include "wire/elastic_messages.hpp"

namespace coach::wire {
namespace {

TEST(row_frames, parts_round_trip_with_and_without_values) {
  auto ids = std::make_shared<std::vector<std::uint64_t>>(std::vector<std::uint64_t>{3, 9, 70});
  auto vals = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  const row_frames_part parts[] = {{4, std::span(*ids).first(2), std::span(*vals).first(4)},
                                   {1, std::span(*ids).last(1), std::span(*vals).last(2)}};
  for (bool with_values : {false, true}) {
    wire_message m;
    m.hdr.kind = with_values ? msg_kind::rows : msg_kind::rows_pull;
    append_row_parts(m, parts, vals, with_values);
    ASSERT_EQ(m.frames.size(), with_values ? 5u : 3u);
    const auto back = read_row_parts(m, 0, with_values);
    ASSERT_TRUE(back) << back.error().to_string();
    ASSERT_EQ(back->size(), 2u);
    EXPECT_EQ((*back)[0].table, 4u);
    EXPECT_EQ((*back)[1].table, 1u);
    EXPECT_EQ((*back)[1].ids[0], 70u);
    if (with_values) EXPECT_EQ((*back)[1].values[1], 6.0f);
  }
  wire_message none;
  EXPECT_TRUE(read_row_parts(none, 0, true)->empty());
}

TEST(row_frames, malformed_layouts_are_protocol_errors) {
  auto ids = std::make_shared<std::vector<std::uint64_t>>(std::vector<std::uint64_t>{3, 9});
  auto vals = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3});
  const row_frames_part part{0, *ids, *vals};
  wire_message m;
  m.hdr.kind = msg_kind::rows;
  append_row_parts(m, std::span(&part, 1), vals, true);
  EXPECT_EQ(read_row_parts(m, 0, true).error().message,
            "rows message: 3 values for 2 rows of table 0");
  m.frames.pop_back();
  EXPECT_EQ(read_row_parts(m, 0, true).error().message, "rows message: 1 row frames for 1 tables");
  m.frames[1].bytes = 12;
  EXPECT_EQ(read_row_parts(m, 0, false).error().message,
            "rows message: a row ids frame of 12 bytes");
  m.frames[0].bytes = 0;
  EXPECT_EQ(read_row_parts(m, 0, false).error().code, errc::protocol_error);
}

TEST(row_frames, a_transfer_carries_its_rows_frame) {
  auto t = std::make_shared<ps::slice_transfer>();
  t->from = 1;
  t->to = 2;
  t->version = 5;
  t->ranges = {{0, 3}};
  t->values = {1, 2, 3};
  t->rows = {std::byte{1}, std::byte{2}, std::byte{3}};
  auto m = make_transfer({0, 1}, {0, 2}, 7, t);
  auto back = read_transfer(m, 0);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->rows, t->rows);
  EXPECT_EQ(back->values, t->values);
  t->rows.clear();
  auto plain = read_transfer(make_transfer({0, 1}, {0, 2}, 7, t), 0);
  ASSERT_TRUE(plain);
  EXPECT_TRUE(plain->rows.empty());
}

}  // namespace
}  // namespace coach::wire
