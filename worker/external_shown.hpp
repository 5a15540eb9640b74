#pragma once
// worker::detail::shown: a line a script process sent, or a line of its stderr, made fit for an
// error message. Shared by external_process.cpp (the channel: how a process ended) and
// external_messages.cpp (the exchanges on it: what was sent where something else was due).

#include <cstddef>
#include <string>
#include <string_view>

#include "common/format.hpp"

namespace coach::worker::detail {

/// At most `n` bytes of `text` for a message, with what cannot be printed escaped.
inline std::string shown(std::string_view text, std::size_t n = 80) {
  std::string out;
  for (char c : text.substr(0, n)) {
    if (c >= 0x20 && c < 0x7f)
      out += c;
    else
      out += coach::format("\\x{:02x}", static_cast<unsigned char>(c));
  }
  if (text.size() > n) out += "...";
  return out;
}

}  // namespace coach::worker::detail
