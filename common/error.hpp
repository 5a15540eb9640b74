#pragma once
// coach::error: the one error type returned across boundaries (files, network, user input).
// Every code is documented in docs/errors.md; the wire schemas (issue 3) carry the same numbers.

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <utility>

#include "common/format.hpp"

namespace coach {

/// Error codes. Numbers are stable: they will cross the network. Never renumber.
enum class errc : std::uint16_t {
  invalid_argument = 1,    ///< a value is out of range or inconsistent (names the field)
  parse_error = 2,         ///< malformed input text or bytes (YAML, CSV, IDX header)
  io_error = 3,            ///< a file cannot be opened, read or written
  not_found = 4,           ///< a named thing (file, job, shard, node) does not exist
  unsupported = 5,         ///< a valid request this build cannot serve (e.g. CUDA not compiled)
  resource_exhausted = 6,  ///< the cluster cannot provide what the job asks for
  cancelled = 7,           ///< the user or the scheduler stopped the work
  protocol_error = 8,      ///< a peer sent a message that breaks the protocol
  internal = 9,            ///< a bug: an invariant failed where recovery is possible
  not_authorized = 10,     ///< a peer refused this process's key (or its lack of one)
};

/// Short stable name of a code ("invalid_argument"), as printed in messages and JSON.
std::string_view to_string(errc code) noexcept;

/// An error: a code plus a one-line message that names the field, file or peer at fault.
struct error {
  errc code = errc::internal;
  std::string message;

  /// "invalid_argument: field 'batch_size' must be > 0"
  std::string to_string() const;
};

/// The result of an operation that can fail on input it does not control.
template <class T>
using result = std::expected<T, error>;

/// Builds an unexpected error from a code and a message with "{}" placeholders
/// (coach::format; g++ 12 has no std::format).
template <class... Args>
std::unexpected<error> fail(errc code, std::string_view fmt, const Args&... args) {
  return std::unexpected<error>(error{code, coach::format(fmt, args...)});
}

}  // namespace coach
