#include "actors/join_watch.hpp"

namespace coach::actors {

std::optional<join_watch::line> join_watch::look(bool connected, bool failed,
                                                 const std::string& refusal, clock::time_point now,
                                                 bool unanswered) {
  if (!refusal.empty()) {
    reached_ = false;
    if (refusal == said_refusal_) return std::nullopt;
    said_refusal_ = refusal;
    trouble_since_ = now;
    last_said_ = now;
    return line{log::level::error, refusal + "; retrying"};
  }
  said_refusal_.clear();
  if (connected) {
    if (reached_) return std::nullopt;
    reached_ = true;
    const bool late = trouble_since_.has_value();
    const double waited = late ? std::chrono::duration<double>(now - *trouble_since_).count() : 0;
    trouble_since_.reset();
    return line{log::level::info, late ? coach::format("reached the scheduler at {} after {:.1f} s",
                                                       scheduler_, waited)
                                       : coach::format("reached the scheduler at {}", scheduler_)};
  }
  if (!failed && !unanswered) return std::nullopt;
  reached_ = false;
  if (!trouble_since_) {
    trouble_since_ = now;
    last_said_ = now;
    return line{log::level::warn,
                failed ? coach::format("cannot reach the scheduler at {}: connection refused "
                                       "(nothing listens there yet?); retrying every 100 ms",
                                       scheduler_)
                       : coach::format("cannot reach the scheduler at {}: it accepts connections "
                                       "but never answers the handshake (a frozen or overloaded "
                                       "host, or not a coach-node there?); retrying",
                                       scheduler_)};
  }
  if (now - last_said_ < every_) return std::nullopt;
  last_said_ = now;
  return line{
      log::level::warn,
      coach::format("still cannot reach the scheduler at {} after {:.0f} s; retrying", scheduler_,
                    std::chrono::duration<double>(now - *trouble_since_).count())};
}

}  // namespace coach::actors
