#pragma once
// ps::replica_chain: where one replica of a shard stands in its chain (docs/design.md "Shard
// replicas"), without actors or sockets.
//
// A shard with backups runs as a chain: the primary (the head) takes every message that changes
// the shard (pushes, configurations, migrations, transfers) and sends a copy of each on to its
// successor before it handles it; each backup does the same to its own successor. Every replica
// applies the same messages in the same order to the same ps::shard, so each holds bitwise the
// values and optimizer state of the head, some messages behind. A replica acknowledges a version
// to its predecessor once it has applied every step before it and its successor acknowledged it
// too: an acknowledgement from the head's successor means the whole chain holds the version.
// The head answers a version (the pushers' parameters, pulls) only once it is held so: a worker
// that has version v can count on every replica reaching it, and the steps it pushed and was not
// answered are all it has to send again to a backup that takes over.
//
// Not thread-safe: its actor calls it from one message handler at a time.

#include <cstdint>
#include <optional>

namespace coach::ps {

class replica_chain {
 public:
  /// A replica at version `version` (the shard it follows starts there: a new job's 0, or a
  /// checkpoint's version); `head`: the primary; `has_next`: a successor follows it.
  replica_chain(std::int64_t version, bool head, bool has_next) noexcept
      : applied_(version), acked_(version), told_(version), head_(head), has_next_(has_next) {}

  bool head() const noexcept { return head_; }
  bool has_next() const noexcept { return has_next_; }

  /// The version held here and at every replica after this one.
  std::int64_t held() const noexcept { return has_next_ && acked_ < applied_ ? acked_ : applied_; }
  /// Whether the head may answer version `v`: the whole chain holds it.
  bool may_answer(std::int64_t v) const noexcept { return v <= held(); }

  /// This replica's shard applied every step before `v`. Returns the version a backup now
  /// acknowledges to its predecessor, when it holds a newer one than it last told.
  std::optional<std::int64_t> applied(std::int64_t v) noexcept {
    if (v > applied_) applied_ = v;
    return to_tell();
  }
  /// The successor acknowledged `v` (older acknowledgements, repeated or reordered, count
  /// nothing). Returns what applied() returns.
  std::optional<std::int64_t> successor_acked(std::int64_t v) noexcept {
    if (v > acked_) acked_ = v;
    return to_tell();
  }
  /// The replicas after this one are gone: it holds its versions alone from now on.
  std::optional<std::int64_t> successor_lost() noexcept {
    has_next_ = false;
    return to_tell();
  }
  /// The head was lost and this replica (its successor) takes over: it answers from now on.
  void take_over() noexcept { head_ = true; }

 private:
  std::optional<std::int64_t> to_tell() noexcept {
    if (head_ || held() <= told_) return std::nullopt;
    told_ = held();
    return told_;
  }

  std::int64_t applied_;
  std::int64_t acked_;  ///< the successor's newest acknowledgement
  std::int64_t told_;   ///< the newest version acknowledged to the predecessor
  bool head_;
  bool has_next_;
};

}  // namespace coach::ps
