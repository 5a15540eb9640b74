#pragma once
// scheduler::clock: the time scheduling policies reason in, and the seam that supplies it.
//
// Policies never read a clock: the caller passes `now` to policy::decide, taking it from a
// clock_source. The cluster scheduler uses wall_clock (Unix seconds, so times stored in the job
// store stay meaningful after a restart); tests use manual_clock, and the simulator passes its
// event time. That keeps every schedule a pure function of its inputs, hence testable.

#include <chrono>

namespace coach::scheduler {

/// The clock type of policy time: seconds (double) since an origin the caller picks. It has no
/// now(): time comes from a clock_source or from the simulator's event loop.
struct policy_clock {
  using rep = double;
  using period = std::ratio<1>;
  using duration = std::chrono::duration<double>;
  using time_point = std::chrono::time_point<policy_clock>;
  static constexpr bool is_steady = true;
};

/// A moment in policy time.
using time_point = policy_clock::time_point;
/// A span of policy time, in seconds.
using seconds = policy_clock::duration;

/// The moment `s` seconds after the origin.
constexpr time_point at_seconds(double s) noexcept {
  return time_point(seconds(s));
}
/// Seconds since the origin.
constexpr double to_seconds(time_point t) noexcept {
  return t.time_since_epoch().count();
}

/// Where the caller of a policy gets `now`.
class clock_source {
 public:
  virtual ~clock_source() = default;
  /// The current time. Never goes backwards.
  virtual time_point now() const = 0;
};

/// Unix time (std::chrono::system_clock) in seconds, for the cluster scheduler.
class wall_clock final : public clock_source {
 public:
  time_point now() const override {
    const auto since = std::chrono::system_clock::now().time_since_epoch();
    return time_point(std::chrono::duration_cast<seconds>(since));
  }
};

/// Seconds of std::chrono::steady_clock (its own origin), for what must not jump with the
/// wall clock: node liveness.
class steady_clock_source final : public clock_source {
 public:
  time_point now() const override {
    const auto since = std::chrono::steady_clock::now().time_since_epoch();
    return time_point(std::chrono::duration_cast<seconds>(since));
  }
};

/// A clock that moves only when told to: tests drive policies with it.
class manual_clock final : public clock_source {
 public:
  explicit manual_clock(time_point start = {}) : now_(start) {}
  time_point now() const override { return now_; }
  /// REQUIRES: `t` is not before now().
  void set(time_point t) { now_ = t; }
  /// REQUIRES: `d` >= 0.
  void advance(seconds d) { now_ += d; }

 private:
  time_point now_;
};

}  // namespace coach::scheduler
