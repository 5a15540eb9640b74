// The data-path messages of elastic jobs: configure, migrate, transfer and transfer_ack round-trip
// field by field (also through the wire codec), and every malformed one is refused with a reason.
#include <gtest/gtest.h>

#include "ps/shard.hpp"
#include "wire/codec.hpp"
#include "wire/elastic_messages.hpp"

namespace coach::wire {
namespace {

const endpoint from{7, 11}, to{9, 13};

/// The message as a receiver on another host sees it: header through the codec, frames copied.
wire_message over_the_wire(const wire_message& m) {
  std::vector<std::size_t> sizes;
  for (const auto& f : m.frames) sizes.push_back(f.bytes);
  std::vector<std::byte> bytes;
  codec::encode_header(m.hdr, sizes, bytes);
  auto h = codec::decode_header(bytes);
  EXPECT_TRUE(h) << h.error().message;
  wire_message out;
  out.hdr = h->env;
  for (const auto& f : m.frames) {
    auto copy = std::make_shared<std::vector<std::byte>>(f.data, f.data + f.bytes);
    out.frames.push_back(frame::of(copy, copy->data(), copy->size()));
    out.frames.back().exclusive = true;  // as the ZeroMQ transport delivers it
  }
  return out;
}

ps::job_config sample_config() {
  ps::job_config c;
  c.version = 5;
  c.from_step = 1234;
  c.members = {0, 2, 3, 9};
  c.map = ps::shard_map::even(1000, 64, 3);
  c.map.apply(c.map.plan_add(3));
  return c;
}

TEST(elastic_messages, configure_round_trips) {
  const auto c = sample_config();
  auto m = over_the_wire(make_configure(from, to, 42, c));
  EXPECT_EQ(m.hdr.kind, msg_kind::configure);
  EXPECT_EQ(m.hdr.job, 42u);
  auto back = read_configure(m, 1000, 64);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->version, c.version);
  EXPECT_EQ(back->from_step, c.from_step);
  EXPECT_EQ(back->members, c.members);
  EXPECT_EQ(back->map.owners(), c.map.owners());
  EXPECT_EQ(back->map.version(), c.version);
  for (std::uint32_t k = 0; k < 4; ++k) EXPECT_EQ(back->map.ranges_of(k), c.map.ranges_of(k));
}

TEST(elastic_messages, bad_configures_name_the_problem) {
  const auto c = sample_config();
  auto wrong_size = read_configure(make_configure(from, to, 1, c), 2000, 64);
  ASSERT_FALSE(wrong_size);
  EXPECT_NE(wrong_size.error().message.find("has 32 slices, got owners for 16"), std::string::npos)
      << wrong_size.error().message;

  auto unsorted = c;
  unsorted.members = {3, 1};
  auto u = read_configure(make_configure(from, to, 1, unsorted), 1000, 64);
  ASSERT_FALSE(u);
  EXPECT_NE(u.error().message.find("not ascending"), std::string::npos);

  auto m = make_configure(from, to, 1, c);
  auto odd = std::make_shared<std::vector<std::byte>>(7);
  m.frames[0] = frame::of(odd, odd->data(), odd->size());
  auto o = read_configure(m, 1000, 64);
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message.find("members frame of 7 bytes"), std::string::npos);

  auto big_owner = make_configure(from, to, 1, c);
  auto owners = std::make_shared<std::vector<std::uint32_t>>(16, 70000u);
  big_owner.frames[1] = frame::of(owners, owners->data(), owners->size());
  auto b = read_configure(big_owner, 1000, 64);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("shard id 70000 is out of range"), std::string::npos);

  auto one_frame = make_configure(from, to, 1, c);
  one_frame.frames.pop_back();
  EXPECT_FALSE(read_configure(one_frame, 1000, 64));
  auto other_kind = make_configure(from, to, 1, c);
  other_kind.hdr.kind = msg_kind::push;
  auto k = read_configure(other_kind, 1000, 64);
  ASSERT_FALSE(k);
  EXPECT_EQ(k.error().message, "expected a configure message, got push");
}

TEST(elastic_messages, migrate_and_ack_round_trip) {
  migrate_order o{17, 4, 6, {{0, 64}, {128, 192}}};
  auto back = read_migrate(over_the_wire(make_migrate(from, to, 3, o)));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->at_version, 17);
  EXPECT_EQ(back->to, 4u);
  EXPECT_EQ(back->config_version, 6u);
  EXPECT_EQ(back->ranges, o.ranges);

  o.ranges = {{128, 192}, {0, 64}};
  auto unordered = read_migrate(make_migrate(from, to, 3, o));
  ASSERT_FALSE(unordered);
  EXPECT_NE(unordered.error().message.find("ascending and disjoint"), std::string::npos);
  o.ranges.clear();
  EXPECT_FALSE(read_migrate(make_migrate(from, to, 3, o)));

  auto ack = read_transfer_ack(over_the_wire(make_transfer_ack(from, to, 3, {17, 1, 4})));
  ASSERT_TRUE(ack);
  EXPECT_EQ(ack->version, 17);
  EXPECT_EQ(ack->from, 1u);
  EXPECT_EQ(ack->to, 4u);
}

TEST(elastic_messages, transfer_round_trips_values_and_state_without_copying_on_send) {
  auto t = std::make_shared<ps::slice_transfer>();
  t->from = 1;
  t->to = 2;
  t->version = 40;
  t->updates = 39;
  t->ranges = {{10, 13}, {20, 22}};
  t->values = {1, 2, 3, 4, 5};
  t->state_a = {6, 7, 8, 9, 10};
  t->state_b = {11, 12, 13, 14, 15};
  auto m = make_transfer(from, to, 8, t);
  EXPECT_EQ(m.frames[0].data, reinterpret_cast<const std::byte*>(t->values.data()));
  auto back = read_transfer(over_the_wire(m), 2);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->from, 1u);
  EXPECT_EQ(back->to, 2u);
  EXPECT_EQ(back->version, 40);
  EXPECT_EQ(back->updates, 39);
  EXPECT_EQ(back->ranges, t->ranges);
  EXPECT_EQ(std::vector<float>(back->values_span().begin(), back->values_span().end()), t->values);
  EXPECT_EQ(back->state_a, t->state_a);
  EXPECT_EQ(back->state_b, t->state_b);

  // A reader whose optimizer keeps other state refuses it, as it does frames of the wrong size.
  auto sgd = read_transfer(m, 0);
  ASSERT_FALSE(sgd);
  EXPECT_NE(sgd.error().message.find("has 3 frames, expected 1"), std::string::npos);
  t->state_b.pop_back();
  auto short_state = read_transfer(make_transfer(from, to, 8, t), 2);
  ASSERT_FALSE(short_state);
  EXPECT_NE(short_state.error().message.find("a frame of 16 bytes for 5 keys"), std::string::npos);
}

TEST(elastic_messages, a_received_transfer_keeps_its_values_where_they_arrived) {
  // A 256 MiB shard copied once more on arrival paid a copy into fresh memory on top of the
  // transfer (docs/performance.md "rescale_bench"): a transfer received from another process is
  // read without copying its values, and an empty shard adopts that memory as its storage.
  auto t = std::make_shared<ps::slice_transfer>();
  t->from = 1;
  t->to = 2;
  t->version = 6;
  t->updates = 6;
  t->ranges = {{0, 3}, {8, 10}};
  t->values = {1, 2, 3, 4, 5};
  auto arrived = over_the_wire(make_transfer(from, to, 8, t));
  const auto* where = reinterpret_cast<const float*>(arrived.frames[0].data);
  auto back = read_transfer(std::move(arrived), 0);
  ASSERT_TRUE(back) << back.error().message;
  ASSERT_TRUE(back->buffer);
  EXPECT_FALSE(back->buffer_shared);
  EXPECT_TRUE(back->values.empty());
  EXPECT_EQ(back->values_span().data(), where) << "read in place, not copied";
  EXPECT_EQ(std::vector<float>(back->values_span().begin(), back->values_span().end()), t->values);

  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  ps::optimizer_config sgd;
  sgd.sgd.learning_rate = 1.0f;
  ps::shard s(2, sgd, *be, {}, {});
  ASSERT_TRUE(s.adopt(std::move(*back)));
  EXPECT_EQ(s.values().data(), where) << "adopted as the shard's storage";
  EXPECT_EQ(s.applied_steps(), 6);
  s.set_members({0});
  auto g = std::make_shared<std::vector<float>>(5, 1.0f);
  ps::contribution c;
  c.rank = 0;
  c.samples = 1;
  c.parts = {{g->data(), 3}, {g->data() + 3, 2}};
  c.keep_alive = g;
  ASSERT_TRUE(s.push(6, std::move(c)));
  EXPECT_EQ(s.values().data(), where) << "updated in place";
  EXPECT_EQ(std::vector<float>(s.values().begin(), s.values().end()),
            (std::vector<float>{0, 1, 2, 3, 4}));

  // Memory someone else still holds, or a message read through a const reference, is copied.
  auto held = over_the_wire(make_transfer(from, to, 8, t));
  auto other = held.frames[0].owner;
  auto copied = read_transfer(std::move(held), 0);
  ASSERT_TRUE(copied);
  EXPECT_FALSE(copied->buffer);
  EXPECT_EQ(copied->values, t->values);
  const auto kept = over_the_wire(make_transfer(from, to, 8, t));
  auto read_only = read_transfer(kept, 0);
  ASSERT_TRUE(read_only);
  EXPECT_FALSE(read_only->buffer);
  EXPECT_EQ(read_only->values, t->values);
  EXPECT_EQ(kept.frames[0].owner.use_count(), 1);
}

}  // namespace
}  // namespace coach::wire
