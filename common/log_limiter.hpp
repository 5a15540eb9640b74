#pragma once
// coach::log_limiter: at most N log lines per second of one kind, so that a flood of bad input
// does not flood the log too. What it holds back is counted and said with the next line it lets
// through ("(1234 more like it not logged)"). Thread-safe; the caller passes the time, so tests
// drive it without waiting.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace coach {

class log_limiter {
 public:
  using clock = std::chrono::steady_clock;

  /// REQUIRES: per_second > 0.
  explicit log_limiter(int per_second = 5) : per_second_(per_second) {}

  /// Whether a line may be logged at `now`; when it may, `suffix` is what to append to it: empty,
  /// or " (N more like it not logged)" for those held back since the last line let through.
  std::optional<std::string> allow(clock::time_point now = clock::now()) {
    std::lock_guard lock{mu_};
    if (now - window_ > std::chrono::seconds(1)) {
      window_ = now;
      lines_ = 0;
    }
    if (++lines_ > per_second_) {
      ++held_;
      ++held_total_;
      return std::nullopt;
    }
    std::string suffix;
    if (held_ > 0) suffix = " (" + std::to_string(held_) + " more like it not logged)";
    held_ = 0;
    return suffix;
  }

  /// Lines held back so far, in all.
  std::uint64_t held_total() const {
    std::lock_guard lock{mu_};
    return held_total_;
  }

 private:
  const int per_second_;
  mutable std::mutex mu_;
  clock::time_point window_{};
  int lines_ = 0;
  std::uint64_t held_ = 0;
  std::uint64_t held_total_ = 0;
};

}  // namespace coach
