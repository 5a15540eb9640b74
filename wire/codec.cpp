// wire/codec.cpp: envelope <-> schemas/envelope.capnp. The only file that touches the
// generated Cap'n Proto types of the data path.
//
// Encoding builds the header in a thread-local, zeroed first segment sized to hold the whole
// message (so the message is always one segment and the builder never mallocs after warm-up),
// then writes the standard unpacked framing (capnp::writeMessage, the bytes messageToFlatArray
// gives) straight into the caller's buffer.
//
// Decoding treats its input as hostile: sizes are checked before parsing, the input is copied
// when it is not word-aligned, the reader runs under a traversal limit proportional to the input
// and a small nesting limit, and every kj::Exception Cap'n Proto throws on malformed input
// becomes errc::protocol_error.

#include "wire/codec.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>
#include <kj/io.h>

#include <algorithm>
#include <cstring>

#include "common/enforce.hpp"
#include "schemas/envelope.capnp.h"
#include "wire/capnp_words.hpp"

namespace coach::wire::codec {
namespace {

namespace wire = coach::schemas;

static_assert(std::uint16_t(msg_kind::chunk_request) ==
              std::uint16_t(wire::MsgKind::CHUNK_REQUEST));
static_assert(std::uint16_t(msg_kind::chunk_grant) == std::uint16_t(wire::MsgKind::CHUNK_GRANT));
static_assert(std::uint16_t(msg_kind::pull) == std::uint16_t(wire::MsgKind::PULL));
static_assert(std::uint16_t(msg_kind::push) == std::uint16_t(wire::MsgKind::PUSH));
static_assert(std::uint16_t(msg_kind::params) == std::uint16_t(wire::MsgKind::PARAMS));
static_assert(std::uint16_t(msg_kind::snapshot_request) ==
              std::uint16_t(wire::MsgKind::SNAPSHOT_REQUEST));
static_assert(std::uint16_t(msg_kind::step_report) == std::uint16_t(wire::MsgKind::STEP_REPORT));
static_assert(std::uint16_t(msg_kind::control) == std::uint16_t(wire::MsgKind::CONTROL));
static_assert(std::uint16_t(msg_kind::configure) == std::uint16_t(wire::MsgKind::CONFIGURE));
static_assert(std::uint16_t(msg_kind::migrate) == std::uint16_t(wire::MsgKind::MIGRATE));
static_assert(std::uint16_t(msg_kind::transfer) == std::uint16_t(wire::MsgKind::TRANSFER));
static_assert(std::uint16_t(msg_kind::transfer_ack) == std::uint16_t(wire::MsgKind::TRANSFER_ACK));
static_assert(std::uint16_t(msg_kind::moved) == std::uint16_t(wire::MsgKind::MOVED));
static_assert(std::uint16_t(msg_kind::state) == std::uint16_t(wire::MsgKind::STATE));
static_assert(std::uint16_t(msg_kind::replica_ack) == std::uint16_t(wire::MsgKind::REPLICA_ACK));
static_assert(std::uint16_t(msg_kind::take_over) == std::uint16_t(wire::MsgKind::TAKE_OVER));
static_assert(std::uint16_t(msg_kind::replica_lost) == std::uint16_t(wire::MsgKind::REPLICA_LOST));
static_assert(std::uint16_t(msg_kind::rows_pull) == std::uint16_t(wire::MsgKind::ROWS_PULL));
static_assert(std::uint16_t(msg_kind::rows) == std::uint16_t(wire::MsgKind::ROWS));
static_assert(msg_kind_count == 20, "a new msg_kind needs its MsgKind in envelope.capnp");

constexpr std::uint16_t max_errc =
    std::uint16_t(errc::not_authorized);  // highest code in error.hpp
constexpr std::size_t word_bytes = sizeof(capnp::word);

// The largest header the encoder may produce (both maxima, an error) must decode: 16 bytes a
// range, 8 a frame, the error, and under 1 KiB of fixed fields and framing.
static_assert(16 * max_ranges + 8 * max_frames + max_error_bytes + 1024 <= max_header_bytes);

bool is_kind(std::uint16_t k) {
  return k >= std::uint16_t(msg_kind::chunk_request) && k < msg_kind_count;
}

std::string_view kind_name(std::uint16_t k) {
  return is_kind(k) ? to_string(msg_kind(k)) : "?";
}

/// Words of builder space that surely hold the header: the root struct (9 data words, 5
/// pointers), two endpoints, list tags, the lists, the error and its text, with margin.
std::size_t words_needed(const envelope& e, std::size_t frames, const error* err) {
  std::size_t words = 32 + 2 * e.ranges.size() + frames + 1 + e.grad_stats.size();
  if (err) words += 8 + std::min(err->message.size(), max_error_bytes) / word_bytes;
  return words;
}

void build(wire::Envelope::Builder root, const envelope& e,
           std::span<const std::size_t> frame_bytes, const error* err) {
  root.setVersion(wire_version);
  auto src = root.initSrc();
  src.setHost(e.src.host);
  src.setId(e.src.id);
  auto dst = root.initDst();
  dst.setHost(e.dst.host);
  dst.setId(e.dst.id);
  root.setKind(static_cast<wire::MsgKind>(e.kind));
  root.setJob(e.job);
  root.setMapVersion(e.map_version);
  root.setStep(e.step);
  root.setRank(e.rank);
  root.setEpoch(e.epoch);
  root.setSamples(e.samples);
  root.setLoss(e.loss);
  root.setChunkId(e.chunk_id);
  root.setComputeUs(e.compute_us);
  root.setFlags(e.flags);
  if (!e.ranges.empty()) {
    auto ranges = root.initRanges(static_cast<unsigned>(e.ranges.size()));
    for (unsigned i = 0; i < e.ranges.size(); ++i) {
      ranges[i].setBegin(e.ranges[i].begin);
      ranges[i].setEnd(e.ranges[i].end);
    }
  }
  if (!e.grad_stats.empty()) {
    auto stats = root.initGradStats(static_cast<unsigned>(e.grad_stats.size()));
    for (unsigned i = 0; i < e.grad_stats.size(); ++i) stats.set(i, e.grad_stats[i]);
  }
  if (!frame_bytes.empty()) {
    auto sizes = root.initFrameBytes(static_cast<unsigned>(frame_bytes.size()));
    for (unsigned i = 0; i < frame_bytes.size(); ++i) sizes.set(i, frame_bytes[i]);
  }
  if (err) {
    auto we = root.initError();
    we.setCode(static_cast<std::uint16_t>(err->code));
    const std::size_t n = std::min(err->message.size(), max_error_bytes);
    auto text = we.initMessage(static_cast<unsigned>(n));
    if (n > 0) std::memcpy(text.begin(), err->message.data(), n);
  }
}

void encode(const envelope& e, std::span<const std::size_t> frame_bytes, const error* err,
            std::vector<std::byte>& out) {
  COACH_ENFORCE(e.ranges.size() <= max_ranges, "envelope has more key ranges than the wire allows");
  COACH_ENFORCE(frame_bytes.size() <= max_frames, "message has more frames than the wire allows");
  COACH_ENFORCE(is_kind(std::uint16_t(e.kind)), "envelope kind is not a msg_kind");

  // The builder's first segment: zeroed, word-aligned, reused by every encode on this thread.
  // MallocMessageBuilder zeroes what it used when destroyed, so it is zero again for the next.
  thread_local kj::Array<capnp::word> arena;
  const std::size_t need = words_needed(e, frame_bytes.size(), err);
  if (arena.size() < need) {
    arena = kj::heapArray<capnp::word>(std::max(need, std::size_t(256)));
    std::memset(arena.begin(), 0, arena.size() * word_bytes);
  }

  out.clear();
  {
    capnp::MallocMessageBuilder message(arena.asPtr());
    build(message.initRoot<wire::Envelope>(), e, frame_bytes, err);
    const std::size_t words = capnp::computeSerializedSizeInWords(message);
    out.resize(words * word_bytes);
    kj::ArrayOutputStream stream(kj::arrayPtr(reinterpret_cast<kj::byte*>(out.data()), out.size()));
    capnp::writeMessage(stream, message);
    COACH_ENFORCE(stream.getArray().size() == out.size(), "capnp framing size mismatch");
    COACH_ENFORCE(out.size() <= max_header_bytes, "encoded header over max_header_bytes");
  }
}

result<decoded_header> read(kj::ArrayPtr<const capnp::word> words) {
  capnp::ReaderOptions options;
  // Enough to read every word a few times over, never the 64 MiB default: a message whose
  // pointers alias (or that lists empty structs) cannot make the reader walk more than this.
  options.traversalLimitInWords = 4 * words.size() + 256;
  options.nestingLimit = 8;  // the envelope nests two deep (root -> ranges -> range)

  capnp::FlatArrayMessageReader message(words, options);
  if (message.getEnd() != words.end()) {
    return fail(errc::protocol_error, "header has {} bytes after its Cap'n Proto message",
                (words.end() - message.getEnd()) * word_bytes);
  }
  const auto root = message.getRoot<wire::Envelope>();

  if (root.getVersion() != wire_version) {
    if (root.getVersion() == 0) return fail(errc::protocol_error, "header has no wire version");
    return fail(errc::protocol_error, "foreign wire version {} (this node speaks {})",
                root.getVersion(), wire_version);
  }
  const auto kind = static_cast<std::uint16_t>(root.getKind());
  if (!is_kind(kind)) return fail(errc::protocol_error, "unknown message kind {}", kind);

  decoded_header h;
  envelope& e = h.env;
  const auto src = root.getSrc();
  e.src = {src.getHost(), src.getId()};
  const auto dst = root.getDst();
  e.dst = {dst.getHost(), dst.getId()};
  e.kind = static_cast<msg_kind>(kind);
  e.job = root.getJob();
  e.map_version = root.getMapVersion();
  e.step = root.getStep();
  e.rank = root.getRank();
  e.epoch = root.getEpoch();
  e.samples = root.getSamples();
  e.loss = root.getLoss();
  e.chunk_id = root.getChunkId();
  e.compute_us = root.getComputeUs();
  e.flags = root.getFlags();

  if (root.hasRanges()) {
    const auto ranges = root.getRanges();
    if (ranges.size() > max_ranges)
      return fail(errc::protocol_error, "{} header carries {} key ranges (at most {})",
                  kind_name(kind), ranges.size(), max_ranges);
    e.ranges.reserve(ranges.size());
    for (unsigned i = 0; i < ranges.size(); ++i) {
      const auto r = ranges[i];
      const ps::key_range k{r.getBegin(), r.getEnd()};
      if (k.begin > k.end)
        return fail(errc::protocol_error, "{} header: key range {} is [{}, {}), begin after end",
                    kind_name(kind), i, k.begin, k.end);
      e.ranges.push_back(k);
    }
  }

  if (root.hasGradStats()) {
    const auto stats = root.getGradStats();
    if (stats.size() > max_grad_stats)
      return fail(errc::protocol_error, "{} header carries {} gradient statistics (at most {})",
                  kind_name(kind), stats.size(), max_grad_stats);
    e.grad_stats.resize(stats.size());
    for (unsigned i = 0; i < stats.size(); ++i) e.grad_stats[i] = stats[i];
  }

  if (root.hasFrameBytes()) {
    const auto sizes = root.getFrameBytes();
    if (sizes.size() > max_frames)
      return fail(errc::protocol_error, "{} header announces {} frames (at most {})",
                  kind_name(kind), sizes.size(), max_frames);
    h.frame_bytes.reserve(sizes.size());
    std::uint64_t total = 0;
    for (unsigned i = 0; i < sizes.size(); ++i) {
      const std::uint64_t n = sizes[i];
      // Checked one by one, so the sum cannot overflow.
      if (n > max_payload_bytes || (total += n) > max_payload_bytes)
        return fail(errc::protocol_error, "{} header announces more than {} payload bytes",
                    kind_name(kind), max_payload_bytes);
      h.frame_bytes.push_back(static_cast<std::size_t>(n));
    }
  }

  if (root.hasError()) {
    const auto we = root.getError();
    const std::uint16_t code = we.getCode();
    if (code == 0 || code > max_errc)
      return fail(errc::protocol_error, "{} header carries unknown error code {}", kind_name(kind),
                  code);
    const auto text = we.getMessage();  // NUL termination checked by Cap'n Proto
    h.remote_error = error{static_cast<errc>(code), std::string(text.cStr(), text.size())};
  }
  return h;
}

}  // namespace

void encode_header(const envelope& e, std::span<const std::size_t> frame_bytes,
                   std::vector<std::byte>& out) {
  encode(e, frame_bytes, nullptr, out);
}

void encode_header(const envelope& e, std::span<const std::size_t> frame_bytes, const error& err,
                   std::vector<std::byte>& out) {
  encode(e, frame_bytes, &err, out);
}

result<decoded_header> decode_header(std::span<const std::byte> bytes) {
  auto w = read_words(bytes, max_header_bytes, "header");
  if (!w) return std::unexpected(w.error());
  try {
    return read(w->words);
  } catch (const kj::Exception& ex) {
    return fail(errc::protocol_error, "malformed header: {}", describe(ex));
  }
}

result<void> check_frames(const decoded_header& h, std::span<const std::size_t> received_bytes) {
  const std::string_view kind = kind_name(std::uint16_t(h.env.kind));
  if (received_bytes.size() != h.frame_bytes.size())
    return fail(errc::protocol_error, "{} message has {} payload frames, header says {}", kind,
                received_bytes.size(), h.frame_bytes.size());
  for (std::size_t i = 0; i < received_bytes.size(); ++i) {
    if (received_bytes[i] != h.frame_bytes[i])
      return fail(errc::protocol_error, "frame {} has {} bytes, header says {}", i,
                  received_bytes[i], h.frame_bytes[i]);
  }
  return {};
}

}  // namespace coach::wire::codec
