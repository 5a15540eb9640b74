#pragma once
// actors::join_watch: what a joining coach-node says of its way to the scheduler, from its
// transport's view of the connection (zmq_transport::contact_of, refusal_of), looked at
// periodically: at once when the scheduler refuses the connection or this node's key, then
// every `every` while it still cannot reach it ("still retrying after 12 s"), and once when
// it gets through ("reached the scheduler"), again after it was lost and came back.
// ZeroMQ itself retries the connection every 100 ms; this only tells the operator.
//
// Plain logic with the time passed in: no threads, no sockets.

#include <chrono>
#include <optional>
#include <string>

#include "common/log.hpp"

namespace coach::actors {

class join_watch {
 public:
  using clock = std::chrono::steady_clock;

  /// `scheduler`: the address joined, named in every line.
  explicit join_watch(std::string scheduler,
                      std::chrono::milliseconds every = std::chrono::seconds(5))
      : scheduler_(std::move(scheduler)), every_(every) {}

  struct line {
    log::level level;
    std::string text;
  };

  /// The line to log now, if any. `connected`: a handshake with the scheduler's node succeeded
  /// since the last call that saw it fail; `failed`: an attempt to connect failed and ZeroMQ
  /// retries; `refusal`: why the handshake was refused (empty: it was not); `unanswered`: a
  /// connection was accepted but its handshake never answered (a frozen host) and ZeroMQ
  /// retries.
  std::optional<line> look(bool connected, bool failed, const std::string& refusal,
                           clock::time_point now, bool unanswered = false);

 private:
  std::string scheduler_;
  std::chrono::milliseconds every_;
  bool reached_ = false;
  std::optional<clock::time_point> trouble_since_;  ///< first failure not yet overcome
  clock::time_point last_said_{};
  std::string said_refusal_;
};

}  // namespace coach::actors
