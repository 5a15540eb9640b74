#pragma once
// wire::capnp_words: the reading preamble the wire codecs share (wire/codec.cpp for the
// envelope, actors/control.cpp for control messages): a received frame checked to be whole
// Cap'n Proto words within a limit, and made aligned (copied only when it is not: ZeroMQ gives
// no alignment promise, a small message lives inside zmq_msg_t); and Cap'n Proto's description
// of a malformed message as one line.

#include <capnp/common.h>
#include <kj/array.h>
#include <kj/exception.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace coach::wire {

/// A frame's words, aligned: `words` points into the frame itself or into `copy`.
struct capnp_words {
  kj::Array<capnp::word> copy;
  kj::ArrayPtr<const capnp::word> words;
};

/// `bytes` as Cap'n Proto words. Errors (protocol_error, naming `what`, e.g. "header"): fewer
/// than 8 bytes, not a whole number of 8-byte words, more than `limit` bytes.
result<capnp_words> read_words(std::span<const std::byte> bytes, std::size_t limit,
                               std::string_view what);

/// Cap'n Proto's description of a malformed message, as one line: "expected <condition>
/// [<values>]; Message ends prematurely in first segment." gives the part after "; ".
std::string describe(const kj::Exception& ex);

}  // namespace coach::wire
