// libFuzzer target for the decoders that face the network: the wire header (wire/codec) and
// the control plane's payload (actors/control). Each input goes to both. Any input must give a
// value or an error, never a crash; a header that decodes must survive a round trip (encode what
// was decoded, decode it again: the same header), and check_frames must accept exactly the sizes
// it announces; a control message that decodes must re-encode to one that decodes and encodes to
// the same bytes again (encoding is deterministic, so equal bytes mean equal messages, NaNs
// included). A violated property aborts, so the fuzzer reports it.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "actors/control.hpp"
#include "wire/codec.hpp"

namespace {

using namespace coach::actors;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "codec_fuzz: property violated: %s\n", what);
  std::abort();
}

bool same(const envelope& a, const envelope& b) {
  return a.src == b.src && a.dst == b.dst && a.kind == b.kind && a.job == b.job &&
         a.map_version == b.map_version && a.step == b.step && a.rank == b.rank &&
         a.epoch == b.epoch && a.samples == b.samples &&
         std::bit_cast<std::uint64_t>(a.loss) == std::bit_cast<std::uint64_t>(b.loss) &&
         a.chunk_id == b.chunk_id && a.compute_us == b.compute_us && a.flags == b.flags &&
         a.ranges == b.ranges;
}

void check_refusal(const coach::error& e) {
  if (e.code != coach::errc::protocol_error) broken("error code is not protocol_error");
  if (e.message.empty()) broken("error without a message");
  if (e.message.find('\n') != std::string::npos) broken("error of several lines");
}

void control_one_input(std::span<const std::byte> input) {
  const auto m = control_codec::decode(input);
  if (!m) return check_refusal(m.error());
  const auto once = control_codec::encode(*m);
  const auto back = control_codec::decode(once);
  if (!back) broken("a decoded control message does not re-encode to a decodable one");
  if (control_codec::encode(*back) != once) broken("control round trip changed the message");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
  control_one_input(input);
  const auto h = codec::decode_header(input);
  if (!h) {
    check_refusal(h.error());
    return 0;
  }
  if (!codec::check_frames(*h, h->frame_bytes)) broken("check_frames refuses announced sizes");
  if (!h->frame_bytes.empty()) {
    auto fewer = std::span(h->frame_bytes).first(h->frame_bytes.size() - 1);
    if (codec::check_frames(*h, fewer)) broken("check_frames accepts a missing frame");
  }

  std::vector<std::byte> again;
  if (h->remote_error)
    codec::encode_header(h->env, h->frame_bytes, *h->remote_error, again);
  else
    codec::encode_header(h->env, h->frame_bytes, again);
  const auto back = codec::decode_header(again);
  if (!back) broken("a decoded header does not re-encode to a decodable one");
  if (!same(back->env, h->env)) broken("round trip changed the envelope");
  if (back->frame_bytes != h->frame_bytes) broken("round trip changed the frame sizes");
  if (back->remote_error.has_value() != h->remote_error.has_value() ||
      (h->remote_error &&
       (back->remote_error->code != h->remote_error->code ||
        back->remote_error->message != h->remote_error->message.substr(0, codec::max_error_bytes))))
    broken("round trip changed the error");
  return 0;
}
