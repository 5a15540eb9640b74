#pragma once
// coach::log: the process's log, over spdlog (Debian libspdlog-dev).
//
// Two shapes, chosen once at start by init():
// - a command (`coach train`, the default before init): "coach: message", with "warning: " or
//   "error: " before the message at those levels, on stderr, as a user reads it;
// - a daemon (`coach-node`): "2026-11-25 20:30:01.123 [info] node-a: message", a timestamp,
//   the level and the node's name on every line, on stderr or appended to a file.
// Lines below the chosen level are not formatted at all (enabled() is checked first). Debug
// lines are for what happens in volume (a message to an actor that has gone, for one): they
// are counted where they happen (the transport's receive_stats), not only logged.
//
// Thread-safe: every function may be called from any thread once init() returned; init() is
// called once, before the threads that log start.

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace coach::log {

enum class level : std::uint8_t { trace, debug, info, warn, error, off };

/// "trace", "debug", "info", "warn", "error" or "off"; invalid_argument naming them otherwise.
result<level> parse_level(std::string_view name);
std::string_view to_string(level l) noexcept;

/// How the process logs. Defaults: a command's lines, at info, on stderr.
struct options {
  std::string program = "coach";  ///< a command's prefix ("coach-node: ...")
  std::string node;               ///< a daemon's name on each line (empty: none)
  level min = level::info;        ///< lines below it are not written
  std::string file;               ///< append to this file instead of stderr (empty: stderr)
  bool daemon = false;            ///< timestamped lines with level and node name
};

/// Sets the process's log. io_error naming the file when it cannot be opened for appending.
result<void> init(const options& o);

/// Whether a line at `l` would be written.
bool enabled(level l) noexcept;
/// Writes one line (no trailing newline in `message`).
void write(level l, std::string_view message);
/// Writes what is buffered (a file log is flushed at every line anyway).
void flush();

/// A line with "{}" placeholders (coach::format), formatted only when its level is enabled.
template <class... Args>
void at(level l, std::string_view fmt, const Args&... args) {
  if (!enabled(l)) return;
  if constexpr (sizeof...(Args) == 0)
    write(l, fmt);
  else
    write(l, coach::format(fmt, args...));
}
template <class... Args>
void trace(std::string_view fmt, const Args&... args) {
  at(level::trace, fmt, args...);
}
template <class... Args>
void debug(std::string_view fmt, const Args&... args) {
  at(level::debug, fmt, args...);
}
template <class... Args>
void info(std::string_view fmt, const Args&... args) {
  at(level::info, fmt, args...);
}
template <class... Args>
void warn(std::string_view fmt, const Args&... args) {
  at(level::warn, fmt, args...);
}
template <class... Args>
void error(std::string_view fmt, const Args&... args) {
  at(level::error, fmt, args...);
}

}  // namespace coach::log
