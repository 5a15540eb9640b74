#pragma once
// coach::fuzz::hostile_frames: hostile ZeroMQ messages for a live coach-node, made from a seed
// (docs/hostile-input.md). bench/fuzz_bench floods a node with a million of them;
// tests/integration/fuzz_test sends a few thousand. Each message is the parts a DEALER sends (the
// node's ROUTER puts the sender's routing id in front): pure random bytes, valid headers (encoded
// with wire/codec.hpp from random envelopes) cut short, with bits flipped or bytes mutated, of
// another wire version, with frames that disagree with them, addressed to an endpoint nobody
// binds, announcing huge payloads; empty messages, messages of thousands of frames, headers over
// the size limit, and control messages to the node agent and the scheduler whose payload (a
// ControlMessage, actors/control.hpp) is mutated.
//
// Every message comes with the way the node's transport will count it (receive_stats), predicted
// with the functions the transport itself calls (codec::decode_header, codec::check_frames) and
// its routing rule (a header to host 0 or the node's host and endpoint node_agent_id or
// scheduler_id is delivered; any other endpoint is unknown). So a reader of the node's counts
// knows what each should be, exactly.
//
// Not sent, by construction (a message that would be one is replaced by another): a message that
// reaches a job's actors (endpoint ids `job << 32 | n`), and a control message whose payload
// decodes to anything but a read-only request (status, nodes, policy get) or a reply. Those are
// well-formed commands (a made-up node's heartbeat, a cancel, a startJob), which the job API
// obeys from anyone allowed to connect (docs/security.md); the flood measures malformed input.
//
// Deterministic: the same seed and node host give the same messages, in the same order, with the
// same toolchain (std::mt19937_64; no distribution objects).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/control.hpp"
#include "actors/zmq_transport.hpp"
#include "wire/codec.hpp"

namespace coach::fuzz {

/// What a message is made of (the mix of the flood).
enum class hostile_kind : std::uint8_t {
  random_bytes,      ///< 1-4 frames of random bytes, now and then behind a plausible segment table
  truncated,         ///< a valid header cut short (possibly to nothing), its frames after it
  bit_flips,         ///< a valid message with 1-8 bits of its header flipped
  byte_mutations,    ///< boundary bytes and words, bytes inserted, erased, duplicated, appended
  wrong_version,     ///< a valid header of wire version 0 or another than codec::wire_version
  wrong_frames,      ///< a valid header with a frame missing, one too many, or one resized
  unknown_dst,       ///< a valid message to an endpoint nobody binds
  huge_sizes,        ///< a valid header announcing 4 GiB to 2^64 - 1 bytes of frames
  empty,             ///< 1-8 frames of zero bytes
  many_frames,       ///< 64-1024 frames after a header, or up to 5000 empty frames
  control_payload,   ///< a control message to the node agent or the scheduler, payload mutated
  oversized_header,  ///< a first frame over codec::max_header_bytes
  valid,             ///< a well-formed message to the node agent or the scheduler
};
inline constexpr std::size_t hostile_kind_count = 13;

inline std::string_view to_string(hostile_kind k) {
  constexpr std::array<std::string_view, hostile_kind_count> names{
      "random_bytes",    "truncated",        "bit_flips",  "byte_mutations", "wrong_version",
      "wrong_frames",    "unknown_dst",      "huge_sizes", "empty",          "many_frames",
      "control_payload", "oversized_header", "valid"};
  return names[std::size_t(k)];
}

/// How the node's transport counts a message (actors::receive_stats).
enum class outcome : std::uint8_t {
  delivered,         ///< `messages`
  malformed,         ///< `malformed` (undecodable header), not `malformed_frames`
  malformed_frames,  ///< `malformed` and `malformed_frames` (frames disagree with the header)
  foreign,           ///< `foreign`
  unknown_dst,       ///< `unknown_dst`
};
inline constexpr std::size_t outcome_count = 5;

inline std::string_view to_string(outcome o) {
  constexpr std::array<std::string_view, outcome_count> names{
      "delivered", "malformed", "malformed_frames", "foreign", "unknown_dst"};
  return names[std::size_t(o)];
}

/// One message: its parts (frames) as a DEALER sends them, what it is, and how it will be counted.
struct hostile_message {
  hostile_kind kind = hostile_kind::random_bytes;
  outcome expected = outcome::malformed;
  std::vector<std::vector<std::byte>> parts;
  std::size_t bytes() const {
    std::size_t n = 0;
    for (const auto& p : parts) n += p.size();
    return n;
  }
};

/// The read-only control messages the flood may deliver: status, nodes, policy get, and replies.
inline bool harmless(const actors::control_message& m) {
  if (std::holds_alternative<actors::api_reply>(m)) return true;
  const auto* req = std::get_if<actors::api_request>(&m);
  if (!req) return false;
  if (const auto* p = std::get_if<actors::policy_request>(req)) return !p->set;
  return std::holds_alternative<actors::status_request>(*req) ||
         std::holds_alternative<actors::nodes_request>(*req);
}

/// How a node whose host id is `node_host` counts `parts` (its transport's rule, docs/wire.md),
/// and for a delivered message, whether it may be sent at all (the class comment): nullopt when
/// not.
inline std::optional<outcome> predict(const std::vector<std::vector<std::byte>>& parts,
                                      std::uint32_t node_host) {
  if (parts.empty()) return std::nullopt;  // a DEALER sends at least one frame
  auto h = actors::codec::decode_header(parts[0]);
  if (!h)
    return h.error().message.find("foreign wire version") != std::string::npos ? outcome::foreign
                                                                               : outcome::malformed;
  std::vector<std::size_t> sizes;
  for (std::size_t i = 1; i < parts.size(); ++i) sizes.push_back(parts[i].size());
  if (!actors::codec::check_frames(*h, sizes)) return outcome::malformed_frames;
  const auto& dst = h->env.dst;
  if (dst.host != 0 && dst.host != node_host) return outcome::unknown_dst;
  const std::uint64_t job = dst.id >> 32;
  if (job != 0 && job < (std::uint64_t(1) << 20)) return std::nullopt;  // maybe a job's actor
  if (dst.id != actors::node_agent_id && dst.id != actors::scheduler_id)
    return outcome::unknown_dst;
  if (h->env.kind == actors::msg_kind::control && parts.size() > 1) {
    auto c = actors::control_codec::decode(parts[1]);
    if (c && !harmless(*c)) return std::nullopt;
  }
  return outcome::delivered;
}

class hostile_frames {
 public:
  /// Messages for the node whose host id is `node_host` (actors::node_host_id of its address).
  hostile_frames(std::uint64_t seed, std::uint32_t node_host) : rng_(seed), host_(node_host) {
    using namespace actors;
    // Control payloads to mutate: one of every kind, the harmful ones included (a mutation
    // that still decodes to one of them is not sent).
    node_heartbeat hb;
    hb.name = "node-z";
    hb.address = "tcp://127.0.0.1:1";
    hb.host = 77;
    hb.sequence = 9;
    hb.resources.cpus_total = 4;
    start_job sj;
    sj.job = 99;
    sj.spec_yaml = "name: x\nmodel: {type: mlp, hidden: [8]}\n";
    sj.source_name = "x.yaml";
    sj.shard_hosts = {77, 78};
    sj.worker_hosts = {77};
    sj.peers = {{77, "tcp://127.0.0.1:1", ""}};
    api_reply status;
    status.body = status_reply{{scheduler::job_status{}}};
    const std::vector<control_message> seeds{
        hb,
        sj,
        stop_job{99},
        command_reply{99, coach::error{errc::internal, "boom"}},
        api_request{submit_request{"name: x\n", "x.yaml", "/tmp", 1, 1}},
        api_request{status_request{0}},
        api_request{status_request{99}},
        api_request{nodes_request{}},
        api_request{cancel_request{99}},
        api_request{rescale_request{99, 2, 1}},
        api_request{policy_request{std::nullopt}},
        api_request{policy_request{std::string("fifo")}},
        status,
        api_reply{coach::error{errc::not_found, "no job 99"}, ack_reply{}},
    };
    for (const auto& s : seeds) {
      control_seeds_.push_back(control_codec::encode(s));
      if (harmless(s)) harmless_seeds_.push_back(control_seeds_.back());
    }
    // Where the version lies in an encoded header: the byte whose change makes it foreign.
    envelope e;
    e.kind = msg_kind::pull;
    codec::encode_header(e, {}, header_);
    for (std::size_t i = 0; i + 1 < header_.size(); ++i) {
      auto copy = header_;
      copy[i] = std::byte(7);
      auto d = codec::decode_header(copy);
      if (!d && d.error().message.find("foreign wire version 7") != std::string::npos) {
        version_at_ = i;
        break;
      }
    }
  }

  /// The next message, into `m` (its buffers are reused).
  void next(hostile_message& m) {
    for (int attempt = 0; attempt < 64; ++attempt) {
      make(m);
      if (auto o = predict(m.parts, host_)) {
        m.expected = *o;
        return;
      }
    }
    // Not reached in practice; random bytes are never delivered.
    m.kind = hostile_kind::random_bytes;
    resize_parts(m, 1);
    fill_random(m.parts[0], 24);
    m.parts[0][0] = std::byte(0xff);
    m.expected = *predict(m.parts, host_);
  }

 private:
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool chance(unsigned per_mille) { return below(1000) < per_mille; }

  static void resize_parts(hostile_message& m, std::size_t n) {
    m.parts.resize(n);
    for (auto& p : m.parts) p.clear();
  }

  void fill_random(std::vector<std::byte>& out, std::size_t n) {
    out.resize(n);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const std::uint64_t v = rng_();
      std::memcpy(out.data() + i, &v, 8);
    }
    for (; i < n; ++i) out[i] = std::byte(rng_());
  }

  /// A random length: mostly short, sometimes up to 64 KiB.
  std::size_t random_length() {
    const auto r = below(100);
    if (r < 70) return below(65);
    if (r < 95) return 64 + below(961);
    return 1024 + below(63 * 1024 + 1);
  }

  actors::endpoint control_actor() {
    return {chance(500) ? 0u : host_, chance(500) ? actors::node_agent_id : actors::scheduler_id};
  }

  actors::endpoint unknown_endpoint() {
    const std::uint32_t host = below(3) == 0 ? std::uint32_t(rng_()) : (chance(500) ? 0u : host_);
    // No job's actor (ids job << 32 | n, small jobs): the top bit set, or below 2^32.
    std::uint64_t id = chance(500) ? (rng_() | (std::uint64_t(1) << 63)) : (3 + below(1u << 30));
    return {host, id};
  }

  /// An envelope to `dst` with random fields (kind push; the caller sets its own).
  actors::envelope random_envelope(actors::endpoint dst) {
    actors::envelope e;
    e.src = {std::uint32_t(rng_()), rng_()};
    e.dst = dst;
    e.job = below(4) == 0 ? rng_() : below(100);
    e.map_version = below(10);
    e.step = std::int64_t(below(1000)) - 10;
    e.rank = std::uint32_t(below(8));
    e.epoch = std::uint32_t(below(8));
    e.samples = below(1 << 20);
    e.loss = double(below(1000)) / 7;
    e.chunk_id = below(64);
    e.compute_us = below(100000);
    e.flags = std::uint8_t(rng_());
    e.kind = actors::msg_kind::push;
    return e;
  }

  /// A random, valid envelope and payload frames: a data-path kind, or a read-only control
  /// message when `dst` is the agent or the scheduler (unless `frames_wanted` frames are).
  void valid_message(hostile_message& m, actors::endpoint dst, std::size_t frames_wanted = 0) {
    using namespace actors;
    envelope e = random_envelope(dst);
    std::vector<std::size_t> sizes;
    const bool to_actor = dst.id == node_agent_id || dst.id == scheduler_id;
    if (to_actor && frames_wanted == 0 && chance(600)) {
      e.kind = msg_kind::control;
      const auto& payload = harmless_seeds_[below(harmless_seeds_.size())];
      resize_parts(m, 2);
      m.parts[1] = payload;
      sizes.push_back(payload.size());
    } else {
      e.kind = msg_kind(1 + below(msg_kind_count - 1));
      if (e.kind == msg_kind::control) e.kind = msg_kind::push;
      const std::size_t ranges = below(5);
      std::uint64_t at = below(1000);
      for (std::size_t i = 0; i < ranges; ++i) {
        const std::uint64_t len = below(64);
        e.ranges.push_back({at, at + len});
        at += len + below(100);
      }
      const std::size_t frames = frames_wanted ? frames_wanted : below(4);
      resize_parts(m, 1 + frames);
      for (std::size_t i = 0; i < frames; ++i) {
        fill_random(m.parts[1 + i], frames_wanted ? below(17) : below(257));
        sizes.push_back(m.parts[1 + i].size());
      }
    }
    if (chance(100))
      codec::encode_header(e, sizes, coach::error{errc(1 + below(10)), "remote failure"}, header_);
    else
      codec::encode_header(e, sizes, header_);
    m.parts[0] = header_;
  }

  /// A valid message to the agent, the scheduler, or nobody.
  void any_valid(hostile_message& m) {
    valid_message(m, chance(500) ? control_actor() : unknown_endpoint());
  }

  void flip_bits(std::vector<std::byte>& b, std::size_t n) {
    if (b.empty()) return;
    for (std::size_t i = 0; i < n; ++i) {
      const auto bit = below(b.size() * 8);
      b[bit / 8] ^= std::byte(1u << (bit % 8));
    }
  }

  void mutate_bytes(std::vector<std::byte>& b) {
    static constexpr std::array<std::uint64_t, 8> words{
        0, ~std::uint64_t(0), 0x7fffffffu, 0x80000000u, 0xffffffffu, std::uint64_t(1) << 63, 1, 8};
    static constexpr std::array<std::uint8_t, 5> bytes{0, 1, 0x7f, 0x80, 0xff};
    const std::size_t ops = 1 + below(4);
    for (std::size_t i = 0; i < ops; ++i) {
      switch (below(6)) {
        case 0:  // a boundary byte
          if (!b.empty()) b[below(b.size())] = std::byte(bytes[below(bytes.size())]);
          break;
        case 1:  // an extreme 32- or 64-bit word at a word boundary
          if (b.size() >= 8) {
            const std::uint64_t v = words[below(words.size())];
            std::memcpy(b.data() + 8 * below(b.size() / 8), &v, chance(500) ? 4 : 8);
          }
          break;
        case 2: {  // random bytes inserted (a whole word, or a few: unaligned)
          const std::size_t n = chance(500) ? 8 : 1 + below(7);
          const std::size_t at = below(b.size() + 1);
          std::vector<std::byte> add;
          fill_random(add, n);
          b.insert(b.begin() + std::ptrdiff_t(at), add.begin(), add.end());
          break;
        }
        case 3:  // bytes erased
          if (!b.empty()) {
            const std::size_t at = below(b.size());
            const std::size_t n = std::min<std::size_t>(1 + below(16), b.size() - at);
            b.erase(b.begin() + std::ptrdiff_t(at), b.begin() + std::ptrdiff_t(at + n));
          }
          break;
        case 4:  // a word copied over another
          if (b.size() >= 16) {
            const std::size_t words_in = b.size() / 8;
            std::memcpy(b.data() + 8 * below(words_in), b.data() + 8 * below(words_in), 8);
          }
          break;
        default: {  // random words appended: bytes after the message
          std::vector<std::byte> add;
          fill_random(add, 8 * (1 + below(4)));
          b.insert(b.end(), add.begin(), add.end());
          break;
        }
      }
    }
  }

  hostile_kind pick_kind() {
    // Per mille; oversized_header is rare (1 MiB each).
    static constexpr std::array<unsigned, hostile_kind_count> weights{
        150, 100, 170, 100, 70, 90, 90, 50, 50, 10, 100, 1, 19};
    auto r = below(1000);
    for (std::size_t k = 0; k < hostile_kind_count; ++k) {
      if (r < weights[k]) return hostile_kind(k);
      r -= weights[k];
    }
    return hostile_kind::valid;
  }

  void make(hostile_message& m) {
    m.kind = pick_kind();
    switch (m.kind) {
      case hostile_kind::random_bytes: {
        resize_parts(m, 1 + below(4));
        for (auto& p : m.parts) fill_random(p, random_length());
        // A segment table that Cap'n Proto believes in: one segment of the right size.
        if (m.parts[0].size() >= 16 && m.parts[0].size() % 8 == 0 && chance(300)) {
          const std::uint32_t segments = 0, words = std::uint32_t(m.parts[0].size() / 8 - 1);
          std::memcpy(m.parts[0].data(), &segments, 4);
          std::memcpy(m.parts[0].data() + 4, &words, 4);
        }
        break;
      }
      case hostile_kind::truncated:
        any_valid(m);
        m.parts[0].resize(below(m.parts[0].size()));
        break;
      case hostile_kind::bit_flips:
        any_valid(m);
        flip_bits(m.parts[0], 1 + below(8));
        break;
      case hostile_kind::byte_mutations:
        any_valid(m);
        mutate_bytes(m.parts[0]);
        break;
      case hostile_kind::wrong_version: {
        any_valid(m);
        std::uint16_t v = 0;
        switch (below(4)) {
          case 0:
            v = 0;
            break;
          case 1:
            v = std::uint16_t(actors::codec::wire_version + 1 + below(8));
            break;
          case 2:
            v = 0xffff;
            break;
          default:
            v = std::uint16_t(rng_());
            if (v == actors::codec::wire_version) v = 2;
        }
        std::memcpy(m.parts[0].data() + version_at_, &v, 2);
        break;
      }
      case hostile_kind::wrong_frames: {
        any_valid(m);
        const std::size_t frames = m.parts.size() - 1;
        switch (frames == 0 ? 1 : below(3)) {
          case 0:
            m.parts.pop_back();
            break;
          case 1:
            m.parts.emplace_back();
            fill_random(m.parts.back(), below(129));
            break;
          default: {  // longer or shorter (predict() says whether it still agrees)
            auto& f = m.parts[1 + below(frames)];
            fill_random(f, chance(500) ? f.size() + 1 + below(64) : below(f.size() + 1));
          }
        }
        break;
      }
      case hostile_kind::unknown_dst:
        valid_message(m, unknown_endpoint());
        break;
      case hostile_kind::huge_sizes: {
        using namespace actors;
        static constexpr std::array<std::uint64_t, 6> huge{
            std::uint64_t(1) << 32,       std::uint64_t(1) << 40, codec::max_payload_bytes,
            codec::max_payload_bytes + 1, std::uint64_t(1) << 63, ~std::uint64_t(0)};
        envelope e = random_envelope(chance(500) ? control_actor() : unknown_endpoint());
        e.kind = chance(500) ? msg_kind::params : msg_kind::push;
        e.ranges = {{0, 1u << 30}};
        std::vector<std::size_t> sizes(1 + below(3));
        for (auto& s : sizes) s = chance(500) ? huge[below(huge.size())] : below(64);
        sizes[below(sizes.size())] = huge[below(huge.size())];
        codec::encode_header(e, sizes, header_);
        resize_parts(m, 1 + below(sizes.size() + 1));
        m.parts[0] = header_;
        for (std::size_t i = 1; i < m.parts.size(); ++i) fill_random(m.parts[i], below(64));
        break;
      }
      case hostile_kind::empty:
        resize_parts(m, 1 + below(8));
        break;
      case hostile_kind::many_frames:
        switch (below(3)) {
          case 0:  // all announced frames sent
            valid_message(m, chance(500) ? control_actor() : unknown_endpoint(), 64 + below(961));
            break;
          case 1:  // one frame missing
            valid_message(m, unknown_endpoint(), 64 + below(961));
            m.parts.pop_back();
            break;
          default:  // empty frames and no header
            resize_parts(m, 1000 + below(4001));
        }
        break;
      case hostile_kind::control_payload: {
        auto e = random_envelope(control_actor());
        e.kind = actors::msg_kind::control;
        resize_parts(m, chance(900) ? 2 : 2 + below(4));
        auto& payload = m.parts[1];
        payload = control_seeds_[below(control_seeds_.size())];
        switch (below(5)) {
          case 0:
            flip_bits(payload, 1 + below(16));
            break;
          case 1:
            payload.resize(below(payload.size()));
            break;
          case 2:
            mutate_bytes(payload);
            break;
          case 3:
            fill_random(payload, random_length());
            break;
          default:
            flip_bits(payload, 1 + below(4));
            mutate_bytes(payload);
        }
        std::vector<std::size_t> sizes;
        for (std::size_t i = 2; i < m.parts.size(); ++i) fill_random(m.parts[i], 4 * below(64));
        for (std::size_t i = 1; i < m.parts.size(); ++i) sizes.push_back(m.parts[i].size());
        actors::codec::encode_header(e, sizes, header_);
        m.parts[0] = header_;
        break;
      }
      case hostile_kind::oversized_header:
        resize_parts(m, 1);
        fill_random(m.parts[0], actors::codec::max_header_bytes + 8 * (1 + below(4)));
        break;
      case hostile_kind::valid:
        valid_message(m, control_actor());
        break;
    }
  }

  std::mt19937_64 rng_;
  std::uint32_t host_;
  std::vector<std::vector<std::byte>> control_seeds_;   ///< every kind of ControlMessage
  std::vector<std::vector<std::byte>> harmless_seeds_;  ///< the read-only ones
  std::vector<std::byte> header_;                       ///< encoding scratch space
  std::size_t version_at_ = 16;  ///< byte offset of Envelope.version in an encoded header
};

/// The counts of a log line "... received: messages 12, bytes 3456, ..." (coach-node,
/// actors::to_string(receive_stats)); nullopt when `line` holds none.
inline std::optional<actors::receive_stats> parse_receive_stats(std::string_view line) {
  const auto at = line.find("received: messages ");
  if (at == std::string_view::npos) return std::nullopt;
  line.remove_prefix(at + 10);
  actors::receive_stats s;
  const std::array<std::pair<std::string_view, std::uint64_t*>, 10> fields{{
      {"messages", &s.messages},
      {"bytes", &s.bytes},
      {"malformed", &s.malformed},
      {"malformed_frames", &s.malformed_frames},
      {"foreign", &s.foreign},
      {"unknown_dst", &s.unknown_dst},
      {"refused_key", &s.refused_key},
      {"refused_address", &s.refused_address},
      {"refused_mechanism", &s.refused_mechanism},
      {"failed_handshakes", &s.failed_handshakes},
  }};
  const std::string text = ", " + std::string(line);
  for (const auto& [name, value] : fields) {
    const std::string key = ", " + std::string(name) + " ";
    const auto pos = text.find(key);
    if (pos == std::string::npos) return std::nullopt;
    *value = std::strtoull(text.c_str() + pos + key.size(), nullptr, 10);
  }
  return s;
}

/// The latest counts in a node's log text (its last "received:" line).
inline std::optional<actors::receive_stats> last_receive_stats(std::string_view log) {
  const auto at = log.rfind("received: messages ");
  if (at == std::string_view::npos) return std::nullopt;
  const auto end = log.find('\n', at);
  return parse_receive_stats(log.substr(at, end == std::string_view::npos ? log.npos : end - at));
}

}  // namespace coach::fuzz
