#include "common/log.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

namespace coach::log {
namespace {

constexpr std::array<std::string_view, 6> names = {"trace", "debug", "info",
                                                   "warn",  "error", "off"};

spdlog::level::level_enum to_spdlog(level l) {
  switch (l) {
    case level::trace:
      return spdlog::level::trace;
    case level::debug:
      return spdlog::level::debug;
    case level::info:
      return spdlog::level::info;
    case level::warn:
      return spdlog::level::warn;
    case level::error:
      return spdlog::level::err;
    case level::off:
      break;
  }
  return spdlog::level::off;
}

/// The process's logger and how its lines look. Replaced only by init(), before other threads
/// log; read without a lock afterwards.
struct state {
  std::shared_ptr<spdlog::logger> logger;
  std::string prefix = "coach: ";  ///< a command's lines; empty for a daemon
  std::atomic<level> min{level::info};
};

std::shared_ptr<spdlog::logger> command_logger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto l = std::make_shared<spdlog::logger>("coach", std::move(sink));
  l->set_pattern("%v");
  l->set_level(spdlog::level::trace);  // the level is ours (state::min)
  return l;
}

state& the() {
  static state s{command_logger()};
  return s;
}

}  // namespace

result<level> parse_level(std::string_view name) {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return level(i);
  return fail(errc::invalid_argument,
              "unknown log level '{}' (known: trace, debug, info, warn, error, off)", name);
}

std::string_view to_string(level l) noexcept {
  return names[std::size_t(l) < names.size() ? std::size_t(l) : names.size() - 1];
}

result<void> init(const options& o) {
  auto& s = the();
  std::shared_ptr<spdlog::logger> l;
  if (o.file.empty()) {
    l = std::make_shared<spdlog::logger>("coach",
                                         std::make_shared<spdlog::sinks::stderr_sink_mt>());
  } else {
    // spdlog would make missing directories: a typo in the path is an error here instead.
    const auto dir = std::filesystem::path(o.file).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec))
      return fail(errc::io_error, "--log-file {}: no directory {}", o.file, dir.string());
    if (std::FILE* f = std::fopen(o.file.c_str(), "a"); !f)
      return fail(errc::io_error, "--log-file {}: cannot open it for appending ({})", o.file,
                  std::strerror(errno));
    else
      std::fclose(f);
    try {
      l = std::make_shared<spdlog::logger>(
          "coach", std::make_shared<spdlog::sinks::basic_file_sink_mt>(o.file, false));
    } catch (const spdlog::spdlog_ex& e) {
      return fail(errc::io_error, "--log-file {}: cannot open it for appending ({})", o.file,
                  e.what());
    }
    // Every line reaches the file at once: a node killed a moment later keeps its last words.
    l->flush_on(spdlog::level::trace);
  }
  l->set_level(spdlog::level::trace);
  if (o.daemon) {
    l->set_pattern(o.node.empty() ? "%Y-%m-%d %H:%M:%S.%e [%l] %v"
                                  : "%Y-%m-%d %H:%M:%S.%e [%l] " + o.node + ": %v");
    s.prefix.clear();
  } else {
    l->set_pattern("%v");
    s.prefix = o.program + ": ";
  }
  s.logger = std::move(l);
  s.min = o.min;
  return {};
}

bool enabled(level l) noexcept {
  return l != level::off && l >= the().min.load(std::memory_order_relaxed);
}

void write(level l, std::string_view message) {
  if (!enabled(l)) return;
  auto& s = the();
  if (s.prefix.empty()) {
    s.logger->log(to_spdlog(l), spdlog::string_view_t(message.data(), message.size()));
    return;
  }
  std::string line = s.prefix;
  if (l == level::warn) line += "warning: ";
  if (l == level::error) line += "error: ";
  line += message;
  s.logger->log(to_spdlog(l), spdlog::string_view_t(line));
}

void flush() {
  the().logger->flush();
}

}  // namespace coach::log
