#include "wire/capnp_words.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/format.hpp"

namespace coach::wire {

result<capnp_words> read_words(std::span<const std::byte> bytes, std::size_t limit,
                               std::string_view what) {
  constexpr std::size_t word_bytes = sizeof(capnp::word);
  if (bytes.size() < word_bytes)
    return fail(errc::protocol_error, "{} of {} bytes is too short (at least {})", what,
                bytes.size(), word_bytes);
  if (bytes.size() % word_bytes != 0)
    return fail(errc::protocol_error, "{} of {} bytes is not a whole number of 8-byte words", what,
                bytes.size());
  if (bytes.size() > limit)
    return fail(errc::protocol_error, "{} of {} bytes is over the limit of {}", what, bytes.size(),
                limit);
  capnp_words out;
  if (reinterpret_cast<std::uintptr_t>(bytes.data()) % alignof(capnp::word) == 0) {
    out.words =
        kj::arrayPtr(reinterpret_cast<const capnp::word*>(bytes.data()), bytes.size() / word_bytes);
  } else {
    out.copy = kj::heapArray<capnp::word>(bytes.size() / word_bytes);
    std::memcpy(out.copy.begin(), bytes.data(), bytes.size());
    out.words = out.copy.asPtr();
  }
  return out;
}

std::string describe(const kj::Exception& ex) {
  std::string text(ex.getDescription().cStr());
  if (text.starts_with("expected ")) {
    if (const auto cut = text.find("; "); cut != std::string::npos) text.erase(0, cut + 2);
  }
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

}  // namespace coach::wire
