#pragma once
// ps::replica_chain: where one replica of a shard stands in its chain (docs/design.md "Shard
// replicas"), without actors or sockets.
//
// A shard with backups runs as a chain: the primary (the head) takes every message that changes
// the shard (pushes, configurations, migrations, transfers) and sends a copy of each on to its
// successor before it handles it; each backup does the same to its own successor. Every replica
// applies the same messages in the same order to the same ps::shard, so each holds bitwise the
// values and optimizer state of the head, some messages behind. A replica acknowledges a version
// to its predecessor once it holds every push of the steps before it and its successor
// acknowledged it too: an acknowledgement from the head's successor means the whole chain holds
// the version. "Holds" is not "applied": a backup acknowledges a step as soon as its last push
// is in, before the step's update (ps::shard::on_step_held), and applies the update while the
// acknowledgement travels, so the backup's update is not on the step's critical path; nothing
// comes between the two (one message handler), so a backup that acknowledged a version reaches
// it bitwise. The head answers a version (the pushers' parameters, pulls) only once it applied
// it and the chain holds it: a worker that has version v can count on every replica reaching
// it, and the steps it pushed and was not answered are all it has to send again to a backup
// that takes over. A worker on the head's node, lost with it, takes no push of a step answered
// to the others with it: the backup acknowledged holding that push before the answer.
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
      : holds_(version), acked_(version), told_(version), head_(head), has_next_(has_next) {}

  bool head() const noexcept { return head_; }
  bool has_next() const noexcept { return has_next_; }

  /// The version held here and at every replica after this one.
  std::int64_t held() const noexcept { return has_next_ && acked_ < holds_ ? acked_ : holds_; }
  /// Whether the head may answer version `v`: the whole chain holds it.
  bool may_answer(std::int64_t v) const noexcept { return v <= held(); }

  /// This replica's shard holds every push of the steps before `v`: applied them, or is about
  /// to apply the last one in the same call (a backup, told by ps::shard::on_step_held; the head
  /// tells once it applied, as it answers from the values). Returns the version a backup now
  /// acknowledges to its predecessor, when it holds a newer one than it last told.
  std::optional<std::int64_t> holds(std::int64_t v) noexcept {
    if (v > holds_) holds_ = v;
    return to_tell();
  }
  /// The successor acknowledged `v` (older acknowledgements, repeated or reordered, count
  /// nothing). Returns what holds() returns.
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

  std::int64_t holds_;  ///< every push of the steps before it is here
  std::int64_t acked_;  ///< the successor's newest acknowledgement
  std::int64_t told_;   ///< the newest version acknowledged to the predecessor
  bool head_;
  bool has_next_;
};

}  // namespace coach::ps
