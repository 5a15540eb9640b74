#pragma once
// wire::codec: the edge between the core's message structs and the wire. A data-path message
// travels as one ZeroMQ multipart message: a header frame (the envelope, a Cap'n Proto message
// from schemas/envelope.capnp in its standard unpacked framing) followed by the payload frames,
// raw bytes, never copied into a Cap'n Proto builder. Generated Cap'n Proto types never leave
// wire/codec.cpp. docs/wire.md describes the format.
//
// Decoding never trusts its input: a short or malformed header, an unknown kind, a foreign wire
// version, frame counts or sizes that disagree with the header all give errc::protocol_error
// with a message naming what is wrong, and never crash (a libFuzzer target feeds decode_header).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/error.hpp"
#include "wire/message.hpp"

namespace coach::wire::codec {

/// Version of the wire format. A header with another version is refused (protocol_error).
/// Bump it only for changes old peers cannot read; adding fields never needs a bump.
inline constexpr std::uint16_t wire_version = 1;

/// Largest header frame accepted (bytes); a longer one is refused before parsing.
inline constexpr std::size_t max_header_bytes = 1 << 20;

/// Most key ranges and most payload frames one header may carry; a header announcing more is
/// refused. A header with both maxima and an error still fits in max_header_bytes.
/// REQUIRES (encode_header): an envelope and frame list within these limits.
inline constexpr std::size_t max_ranges = 1 << 15;
inline constexpr std::size_t max_frames = 1 << 15;
/// Most numbers in a header's gradStats (lr_scaling adascale: 5 at most are sent).
inline constexpr std::size_t max_grad_stats = 16;

/// An error message longer than this is cut to this many bytes when encoded.
inline constexpr std::size_t max_error_bytes = 4096;

/// Largest total payload (sum of the frame sizes) a header may announce: 64 GiB.
inline constexpr std::uint64_t max_payload_bytes = std::uint64_t(1) << 36;

/// Encodes `e` as the header frame of a message whose payload frames have the given sizes in
/// bytes (the header records them, so the receiver can check what arrived). Appends to `out`
/// after clearing it, so a caller can reuse one buffer.
void encode_header(const envelope& e, std::span<const std::size_t> frame_bytes,
                   std::vector<std::byte>& out);

/// As above, and carries `err` (its code and message) to the receiver, which finds it in
/// decoded_header::remote_error: a failure crosses the network intact (its message cut to
/// max_error_bytes).
void encode_header(const envelope& e, std::span<const std::size_t> frame_bytes, const error& err,
                   std::vector<std::byte>& out);

/// A decoded header: the envelope and the payload sizes it announces.
struct decoded_header {
  envelope env;
  std::vector<std::size_t> frame_bytes;
  std::optional<error> remote_error;  ///< the error the sender reported, if any
};

/// Decodes a header frame. REQUIRES nothing of `bytes`: any input gives a value or an error.
result<decoded_header> decode_header(std::span<const std::byte> bytes);

/// Checks that the payload frames that followed a header are the ones it announced.
result<void> check_frames(const decoded_header& h, std::span<const std::size_t> received_bytes);

}  // namespace coach::wire::codec
