// wire/codec: the header frame of data-path messages between hosts (docs/wire.md).
// Round trips of every field for every kind; and every malformed input (truncated, garbage,
// flipped, foreign, oversized, misaligned) gives protocol_error with a message, never a crash.

#include "wire/codec.hpp"

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "schemas/envelope.capnp.h"

namespace coach::wire {
namespace {

using bytes = std::vector<std::byte>;

constexpr msg_kind all_kinds[] = {
    msg_kind::chunk_request, msg_kind::chunk_grant, msg_kind::pull,
    msg_kind::push,          msg_kind::params,      msg_kind::snapshot_request,
    msg_kind::step_report,   msg_kind::control,     msg_kind::configure,
    msg_kind::migrate,       msg_kind::transfer,    msg_kind::transfer_ack,
    msg_kind::moved};

/// An envelope with every field set to a value unlike its default and unlike the others.
envelope full(msg_kind kind) {
  envelope e;
  e.src = {3, 0x1122334455667788ull};
  e.dst = {0xfffffffeu, 99};
  e.kind = kind;
  e.job = 0xabcdef0123ull;
  e.map_version = 17;
  e.step = -123456789012345ll;
  e.rank = 4000000000u;
  e.epoch = 12;
  e.samples = 1ull << 40;
  e.loss = 2.302585092994046;
  e.chunk_id = 555;
  e.compute_us = 987654;
  e.flags = flag::no_chunk | flag::finished | 0x80;
  e.ranges = {{0, 1024}, {1024, 1024}, {5000, std::numeric_limits<std::uint64_t>::max()}};
  e.grad_stats = {7, 1.5e10, 0.25, 128, 4};
  return e;
}

void expect_same(const envelope& a, const envelope& b) {
  EXPECT_EQ(a.src, b.src);
  EXPECT_EQ(a.dst, b.dst);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.job, b.job);
  EXPECT_EQ(a.map_version, b.map_version);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(std::bit_cast<std::uint64_t>(a.loss), std::bit_cast<std::uint64_t>(b.loss));
  EXPECT_EQ(a.chunk_id, b.chunk_id);
  EXPECT_EQ(a.compute_us, b.compute_us);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.ranges, b.ranges);
  EXPECT_EQ(a.grad_stats, b.grad_stats);
}

bytes encode(const envelope& e, std::vector<std::size_t> frames = {}) {
  bytes out;
  codec::encode_header(e, frames, out);
  return out;
}

/// A header built with the generated types directly, to make what encode_header never makes.
template <class Fill>
bytes raw(Fill fill) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<schemas::Envelope>();
  root.setVersion(codec::wire_version);
  root.setKind(schemas::MsgKind::PUSH);
  fill(root);
  const auto words = capnp::messageToFlatArray(message);
  const auto b = words.asBytes();
  bytes out(b.size());
  std::memcpy(out.data(), b.begin(), b.size());
  return out;
}

std::string decode_error(std::span<const std::byte> b) {
  const auto h = codec::decode_header(b);
  if (h) return "(decoded)";
  EXPECT_EQ(h.error().code, errc::protocol_error);
  EXPECT_FALSE(h.error().message.empty());
  return h.error().message;
}

// --- round trips ---------------------------------------------------------------------------

class codec_kind : public ::testing::TestWithParam<msg_kind> {};

TEST_P(codec_kind, every_field_round_trips) {
  const envelope e = full(GetParam());
  const std::vector<std::size_t> frames = {4096, 0, 1, std::size_t(1) << 30};
  const auto out = encode(e, frames);
  EXPECT_EQ(out.size() % 8, 0u);
  EXPECT_LE(out.size(), 400u) << "a header is small";
  const auto h = codec::decode_header(out);
  ASSERT_TRUE(h) << h.error().message;
  expect_same(h->env, e);
  EXPECT_EQ(h->frame_bytes, frames);
  EXPECT_FALSE(h->remote_error);
  EXPECT_TRUE(codec::check_frames(*h, frames));
}

TEST_P(codec_kind, defaults_and_extremes_round_trip) {
  envelope zero;
  zero.kind = GetParam();
  auto h = codec::decode_header(encode(zero));
  ASSERT_TRUE(h) << h.error().message;
  expect_same(h->env, zero);
  EXPECT_TRUE(h->frame_bytes.empty());

  envelope big = full(GetParam());
  big.src = {std::numeric_limits<std::uint32_t>::max(), std::numeric_limits<std::uint64_t>::max()};
  big.step = std::numeric_limits<std::int64_t>::min();
  big.loss = -std::numeric_limits<double>::infinity();
  big.flags = 0xff;
  h = codec::decode_header(encode(big, {codec::max_payload_bytes}));
  ASSERT_TRUE(h) << h.error().message;
  expect_same(h->env, big);

  big.loss = std::numeric_limits<double>::quiet_NaN();
  h = codec::decode_header(encode(big));
  ASSERT_TRUE(h) << h.error().message;
  EXPECT_TRUE(std::isnan(h->env.loss));
}

INSTANTIATE_TEST_SUITE_P(all, codec_kind, ::testing::ValuesIn(all_kinds),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(codec, many_ranges_and_frames_round_trip_up_to_the_limits) {
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(1000), codec::max_ranges}) {
    envelope e = full(msg_kind::params);
    e.ranges.clear();
    std::vector<std::size_t> frames;
    for (std::size_t i = 0; i < n; ++i) {
      e.ranges.push_back({i * 64, i * 64 + (i % 64)});
      frames.push_back((i % 64) * sizeof(float));
    }
    bytes out;
    const error err{errc::internal, std::string(codec::max_error_bytes, 'x')};
    codec::encode_header(e, frames, err, out);
    EXPECT_LE(out.size(), codec::max_header_bytes);
    const auto h = codec::decode_header(out);
    ASSERT_TRUE(h) << n << ": " << h.error().message;
    expect_same(h->env, e);
    EXPECT_EQ(h->frame_bytes, frames);
    EXPECT_TRUE(codec::check_frames(*h, frames));
  }
}

TEST(codec, an_error_crosses_intact) {
  for (errc code :
       {errc::invalid_argument, errc::not_found, errc::protocol_error, errc::internal}) {
    const error err{code, "shard 3 of job 42 does not exist"};
    bytes out;
    codec::encode_header(full(msg_kind::params), {}, err, out);
    const auto h = codec::decode_header(out);
    ASSERT_TRUE(h) << h.error().message;
    ASSERT_TRUE(h->remote_error);
    EXPECT_EQ(h->remote_error->code, code);
    EXPECT_EQ(h->remote_error->message, err.message);
  }
  // An empty message is still an error; a long one is cut to max_error_bytes.
  bytes out;
  codec::encode_header(full(msg_kind::pull), {}, error{errc::cancelled, ""}, out);
  auto h = codec::decode_header(out);
  ASSERT_TRUE(h && h->remote_error);
  EXPECT_EQ(h->remote_error->code, errc::cancelled);
  EXPECT_EQ(h->remote_error->message, "");
  codec::encode_header(full(msg_kind::pull), {},
                       error{errc::io_error, std::string(codec::max_error_bytes + 100, 'e')}, out);
  h = codec::decode_header(out);
  ASSERT_TRUE(h && h->remote_error);
  EXPECT_EQ(h->remote_error->message, std::string(codec::max_error_bytes, 'e'));
}

TEST(codec, reused_buffer_and_builder_leave_nothing_behind) {
  // A big header then a small one through the same buffer (and the same thread's builder
  // arena): the small one must decode exactly as when encoded alone.
  envelope big = full(msg_kind::push);
  for (std::uint64_t i = 0; i < 3000; ++i) big.ranges.push_back({i, i + 1});
  bytes out;
  codec::encode_header(big, std::vector<std::size_t>(3000, 4),
                       error{errc::internal, std::string(500, 'z')}, out);
  envelope small;
  small.kind = msg_kind::pull;
  codec::encode_header(small, {}, out);
  EXPECT_EQ(out, encode(small));
  const auto h = codec::decode_header(out);
  ASSERT_TRUE(h) << h.error().message;
  expect_same(h->env, small);
  EXPECT_TRUE(h->frame_bytes.empty());
  EXPECT_FALSE(h->remote_error);
}

TEST(codec, threads_encode_and_decode_concurrently) {
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &failures] {
      bytes out;
      for (int i = 0; i < 2000; ++i) {
        envelope e = full(all_kinds[(t + i) % std::size(all_kinds)]);
        e.step = t * 100000 + i;
        e.ranges.resize(std::size_t(i % 50), ps::key_range{1, 2});
        codec::encode_header(e, std::vector<std::size_t>(std::size_t(i % 5), 8), out);
        const auto h = codec::decode_header(out);
        if (!h || h->env.step != e.step || h->env.ranges != e.ranges) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

// --- refusals ------------------------------------------------------------------------------

TEST(codec, refuses_wrong_sizes_before_parsing) {
  EXPECT_EQ(decode_error({}), "header of 0 bytes is too short (at least 8)");
  bytes five(5);
  EXPECT_EQ(decode_error(five), "header of 5 bytes is too short (at least 8)");
  bytes thirteen(13);
  EXPECT_EQ(decode_error(thirteen), "header of 13 bytes is not a whole number of 8-byte words");
  bytes huge(codec::max_header_bytes + 8);
  EXPECT_EQ(decode_error(huge), "header of 1048584 bytes is over the limit of 1048576");
}

TEST(codec, every_truncation_is_refused) {
  for (const msg_kind kind : all_kinds) {
    const auto out = encode(full(kind), {1, 2, 3});
    for (std::size_t n = 0; n < out.size(); ++n) {
      const auto h = codec::decode_header(std::span(out).first(n));
      ASSERT_FALSE(h) << to_string(kind) << " truncated to " << n << " bytes decoded";
      EXPECT_EQ(h.error().code, errc::protocol_error);
      EXPECT_FALSE(h.error().message.empty());
      EXPECT_EQ(h.error().message.find('\n'), std::string::npos) << "one line";
    }
    EXPECT_EQ(decode_error(std::span(out).first(16)),
              "malformed header: Message ends prematurely in first segment.");
  }
}

TEST(codec, trailing_bytes_are_refused) {
  auto out = encode(full(msg_kind::push));
  out.resize(out.size() + 16);
  EXPECT_EQ(decode_error(out), "header has 16 bytes after its Cap'n Proto message");
}

TEST(codec, random_garbage_is_refused_without_crashing) {
  std::mt19937_64 rng(20240601);
  int refused = 0;
  for (int i = 0; i < 20000; ++i) {
    bytes b(8 * (rng() % 64) + (i % 4 == 0 ? rng() % 8 : 0));
    for (auto& x : b) x = std::byte(rng());
    refused += !codec::decode_header(b);
  }
  EXPECT_EQ(refused, 20000) << "random bytes are never a valid header";

  // A valid segment table and root (version 1, a real kind) followed by random fields and
  // random pointers (struct, list, far or raw bits, with small offsets and counts): the
  // decoder answers every one, and what it accepts re-encodes to the same header.
  int decoded = 0;
  auto pointer = [&rng]() -> std::uint64_t {
    const std::uint64_t offset = (rng() % 24) << 2;
    switch (rng() % 5) {
      case 0:
        return 0;
      case 1:  // struct: offset, data words, pointer count
        return offset | (rng() % 4) << 32 | (rng() % 3) << 48;
      case 2:  // list: offset, element size (0..7), count or word count
        return 1 | offset | (rng() % 8) << 32 | (rng() % 40) << 35;
      case 3:  // far pointer into segment 0 or elsewhere
        return 2 | (rng() % 24) << 3 | (rng() % 2) << 32;
      default:
        return rng();
    }
  };
  for (int i = 0; i < 20000; ++i) {
    const std::size_t words = 15 + rng() % 40;
    std::vector<std::uint64_t> w(1 + words);
    w[0] = std::uint64_t(words) << 32;                       // one segment of `words` words
    w[1] = std::uint64_t(9) << 32 | std::uint64_t(5) << 48;  // root: 9 data words, 5 pointers
    w[2] = 1 | (1 + rng() % 7) << 16 | (rng() % 2 ? rng() << 32 : 0);   // version, kind, rank
    for (std::size_t k = 3; k < 11; ++k) w[k] = rng() % 2 ? rng() : 0;  // the other fields
    for (std::size_t k = 11; k < w.size(); ++k) w[k] = pointer();       // pointers and targets
    bytes b(8 * w.size());
    std::memcpy(b.data(), w.data(), b.size());
    const auto h = codec::decode_header(b);
    if (!h) {
      EXPECT_EQ(h.error().code, errc::protocol_error);
      continue;
    }
    ++decoded;
    const auto again = codec::decode_header(encode(h->env, h->frame_bytes));
    ASSERT_TRUE(again);
    expect_same(again->env, h->env);
    EXPECT_EQ(again->frame_bytes, h->frame_bytes);
  }
  EXPECT_GT(decoded, 0);
  EXPECT_LT(decoded, 20000);
  std::printf("random segment contents: %d of 20000 decoded\n", decoded);
}

TEST(codec, flipped_bits_never_crash) {
  const auto out = encode(full(msg_kind::push), {4096, 4096, 8});
  int refused = 0, decoded = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      auto b = out;
      b[i] ^= std::byte(1 << bit);
      const auto h = codec::decode_header(b);
      if (h) {
        ++decoded;  // a flipped data bit is a different, valid header
      } else {
        ++refused;
        EXPECT_EQ(h.error().code, errc::protocol_error);
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(decoded, 0);
}

TEST(codec, foreign_wire_version_is_refused) {
  auto b = raw([](auto root) { root.setVersion(7); });
  EXPECT_EQ(decode_error(b), "foreign wire version 7 (this node speaks 1)");
  b = raw([](auto root) { root.setVersion(0); });
  EXPECT_EQ(decode_error(b), "header has no wire version");
  // A message whose root is empty (any other Cap'n Proto message, say) has no version either.
  capnp::MallocMessageBuilder other;
  other.initRoot<schemas::KeyRange>().setEnd(5);
  const auto words = capnp::messageToFlatArray(other);
  EXPECT_EQ(decode_error({reinterpret_cast<const std::byte*>(words.begin()),
                          words.size() * sizeof(capnp::word)}),
            "header has no wire version");
}

TEST(codec, unknown_kind_is_refused) {
  EXPECT_EQ(decode_error(raw([](auto root) { root.setKind(schemas::MsgKind::UNKNOWN); })),
            "unknown message kind 0");
  EXPECT_EQ(decode_error(raw([](auto root) { root.setKind(static_cast<schemas::MsgKind>(20)); })),
            "unknown message kind 20");
  EXPECT_EQ(decode_error(raw([](auto root) { root.setKind(static_cast<schemas::MsgKind>(300)); })),
            "unknown message kind 300");
}

TEST(codec, too_many_gradient_statistics_are_refused) {
  const auto b = raw([](auto root) { root.initGradStats(codec::max_grad_stats + 1); });
  EXPECT_EQ(decode_error(b), "push header carries 17 gradient statistics (at most 16)");
}

TEST(codec, bad_ranges_are_refused) {
  EXPECT_EQ(decode_error(raw([](auto root) {
              auto r = root.initRanges(2);
              r[0].setBegin(0);
              r[0].setEnd(10);
              r[1].setBegin(10);
              r[1].setEnd(5);
            })),
            "push header: key range 1 is [10, 5), begin after end");
  EXPECT_EQ(decode_error(raw([](auto root) { root.initRanges(codec::max_ranges + 1); })),
            "push header carries 32769 key ranges (at most 32768)");
}

TEST(codec, bad_frame_lists_are_refused) {
  EXPECT_EQ(decode_error(raw([](auto root) { root.initFrameBytes(codec::max_frames + 1); })),
            "push header announces 32769 frames (at most 32768)");
  EXPECT_EQ(decode_error(raw([](auto root) {
              root.initFrameBytes(1).set(0, std::numeric_limits<std::uint64_t>::max());
            })),
            "push header announces more than 68719476736 payload bytes");
  // Each size under the cap, the sum over it (and a sum that would wrap around 2^64).
  EXPECT_EQ(decode_error(raw([](auto root) {
              auto f = root.initFrameBytes(2);
              f.set(0, codec::max_payload_bytes);
              f.set(1, 1);
            })),
            "push header announces more than 68719476736 payload bytes");
}

TEST(codec, unknown_error_codes_are_refused) {
  EXPECT_EQ(decode_error(raw([](auto root) { root.initError().setCode(0); })),
            "push header carries unknown error code 0");
  EXPECT_EQ(decode_error(raw([](auto root) { root.initError().setCode(11); })),
            "push header carries unknown error code 11");
}

TEST(codec, amplification_by_empty_struct_lists_is_refused) {
  // A ranges pointer to a list of 2^28 zero-sized structs: a few bytes that claim a huge list.
  // The traversal limit (or the range count) stops it without walking the elements.
  const auto b = raw([](auto root) {
    root.initRanges(1);
    capnp::AnyStruct::Builder any = kj::mv(root);
    auto ranges = any.getPointerSection()[2];
    ASSERT_FALSE(ranges.isNull()) << "ranges is the third pointer of Envelope";
    ranges.initAsListOfAnyStruct(0, 0, 1u << 28);
  });
  EXPECT_LT(b.size(), 300u);
  const std::string why = decode_error(b);
  EXPECT_TRUE(why.find("traversal limit") != std::string::npos ||
              why.find("key ranges") != std::string::npos)
      << why;
}

TEST(codec, unaligned_input_decodes) {
  const envelope e = full(msg_kind::step_report);
  const auto out = encode(e, {12, 34});
  std::vector<std::byte> storage(out.size() + 8);
  for (std::size_t shift = 0; shift < 8; ++shift) {
    std::memcpy(storage.data() + shift, out.data(), out.size());
    const auto h = codec::decode_header(std::span(storage).subspan(shift, out.size()));
    ASSERT_TRUE(h) << "shift " << shift << ": " << h.error().message;
    expect_same(h->env, e);
    EXPECT_EQ(h->frame_bytes, (std::vector<std::size_t>{12, 34}));
  }
}

// --- frames --------------------------------------------------------------------------------

TEST(codec, check_frames_names_the_mismatch) {
  envelope e = full(msg_kind::push);
  const auto h = codec::decode_header(encode(e, {4096, 4096, 4096}));
  ASSERT_TRUE(h);
  const std::vector<std::size_t> good = {4096, 4096, 4096};
  EXPECT_TRUE(codec::check_frames(*h, good));

  const std::vector<std::size_t> short_last = {4096, 4096, 100};
  auto r = codec::check_frames(*h, short_last);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::protocol_error);
  EXPECT_EQ(r.error().message, "frame 2 has 100 bytes, header says 4096");

  const std::vector<std::size_t> missing = {4096, 4096};
  r = codec::check_frames(*h, missing);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "push message has 2 payload frames, header says 3");

  const std::vector<std::size_t> extra = {4096, 4096, 4096, 1};
  r = codec::check_frames(*h, extra);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "push message has 4 payload frames, header says 3");

  const auto none = codec::decode_header(encode(e));
  ASSERT_TRUE(none);
  EXPECT_TRUE(codec::check_frames(*none, {}));
}

}  // namespace
}  // namespace coach::wire
