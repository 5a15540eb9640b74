#pragma once
// shard::answers_token: carried by a step's answers (wire_message::sent) so that a transfer
// queued behind them goes only once they have left this process. The last copy ends on
// whichever thread lets go of it (ZeroMQ's I/O thread, once the last frame is written out); it
// tells the owner (`on_left`) only when the server waits for that (await()): most steps queue
// no transfer, and their answers' leaving then wakes no thread. Telling the owner on every step
// cost a scheduler wake-up in the shard's process per round (ps_bench, docs/performance.md
// "The small-message path").
//
// Threads: await() on the owner's thread while it holds a copy; the destructor on any thread.

#include <atomic>
#include <functional>
#include <memory>

namespace coach::shard {

class answers_token {
 public:
  /// `on_left` (may be empty) runs in the destructor when await() was called.
  explicit answers_token(std::shared_ptr<const std::function<void()>> on_left)
      : on_left_(std::move(on_left)) {}
  answers_token(const answers_token&) = delete;
  answers_token& operator=(const answers_token&) = delete;
  ~answers_token() {
    if (awaited_.load(std::memory_order_acquire) && on_left_ && *on_left_) (*on_left_)();
  }

  /// The owner waits for the answers to leave: the last copy's end calls `on_left`.
  /// REQUIRES: the caller holds a copy (so the end comes after this).
  void await() noexcept { awaited_.store(true, std::memory_order_release); }

 private:
  std::shared_ptr<const std::function<void()>> on_left_;
  std::atomic<bool> awaited_{false};
};

}  // namespace coach::shard
