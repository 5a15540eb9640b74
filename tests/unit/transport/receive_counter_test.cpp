// transport::receive_counter: each drop and refusal lands in its own field (frames count as
// malformed too), refused() returns the running total, and to_string is the exact line
// coach-node prints and the fuzz tests parse.
#include "transport/receive_counter.hpp"

#include <gtest/gtest.h>

namespace coach::transport_logic {
namespace {

TEST(receive_counter, each_outcome_lands_in_its_field) {
  receive_counter c;
  c.delivered(100);
  c.delivered(28);
  c.unknown_destination();
  c.dropped(receive_counter::drop::malformed);
  c.dropped(receive_counter::drop::frames);
  c.dropped(receive_counter::drop::foreign);
  c.dropped(receive_counter::drop::stale);
  c.dropped(receive_counter::drop::forged);
  c.dropped(receive_counter::drop::forged);
  const auto s = c.snapshot();
  EXPECT_EQ(s.messages, 2u);
  EXPECT_EQ(s.bytes, 128u);
  EXPECT_EQ(s.unknown_dst, 1u);
  EXPECT_EQ(s.malformed, 2u);  // frames that disagree with the header are malformed too
  EXPECT_EQ(s.malformed_frames, 1u);
  EXPECT_EQ(s.foreign, 1u);
  EXPECT_EQ(s.stale, 1u);  // sealed messages refused: neither malformed nor foreign
  EXPECT_EQ(s.forged, 2u);
  EXPECT_EQ(s.refused(), 0u);
}

TEST(receive_counter, refusals_count_by_reason_and_return_the_total) {
  receive_counter c;
  using r = receive_counter::refusal;
  EXPECT_EQ(c.refused(r::key), 1u);
  EXPECT_EQ(c.refused(r::address), 2u);
  EXPECT_EQ(c.refused(r::mechanism), 3u);
  EXPECT_EQ(c.refused(r::handshake), 4u);
  EXPECT_EQ(c.refused(r::handshake), 5u);
  const auto s = c.snapshot();
  EXPECT_EQ(s.refused_key, 1u);
  EXPECT_EQ(s.refused_address, 1u);
  EXPECT_EQ(s.refused_mechanism, 1u);
  EXPECT_EQ(s.failed_handshakes, 2u);
  EXPECT_EQ(s.refused(), 5u);
}

TEST(receive_counter, to_string_names_every_field_in_order) {
  receive_stats s{12, 3456, 3, 1, 0, 2, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(to_string(s),
            "messages 12, bytes 3456, malformed 3, malformed_frames 1, foreign 0, unknown_dst 2, "
            "refused_key 4, refused_address 5, refused_mechanism 6, failed_handshakes 7, stale 8, "
            "forged 9");
}

}  // namespace
}  // namespace coach::transport_logic
