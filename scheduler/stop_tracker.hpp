#pragma once
// scheduler::stop_tracker: the stops of one job's earlier runs that nodes have not answered.
// A job may start again only once every node that ran a part of an earlier run stopped it:
// the hosts told to stop and not answered yet (`stopping`), among them the hosts of a run of
// an earlier scheduler process that have not heartbeated since (`unsent`: told when they do).
// A lost node answers nothing: it is taken out. Plain data and rules; job_registry keeps one
// per job.
//
// Threads: one owner (the registry's).

#include <cstdint>
#include <functional>
#include <set>
#include <vector>

namespace coach::scheduler {

class stop_tracker {
 public:
  using alive_fn = std::function<bool(std::uint32_t)>;

  /// The run stopped at `now`: its parts on `hosts` are told to stop.
  void ask(std::set<std::uint32_t> hosts, double now);
  /// The runs of an earlier process ran on `hosts`: each is told to stop when it heartbeats.
  void ask_unsent(std::set<std::uint32_t> hosts, double now);
  /// `host` heartbeated: true when it must be told now of a stop it was not sent.
  bool seen(std::uint32_t host) { return unsent_.erase(host) > 0; }
  /// `host` answered a stop: true when it was the last one unanswered.
  bool answered(std::uint32_t host) { return stopping_.erase(host) && stopping_.empty(); }
  /// `host` was lost: its answer will not come.
  void lost(std::uint32_t host) { stopping_.erase(host); }
  /// The hosts not sent their stop that are not `alive` are taken for dead. True when any
  /// was unsent before.
  bool forget_unseen(const alive_fn& alive);
  /// The hosts to ask again at `now`: those `alive` whose stop was sent and has been
  /// unanswered for more than `after_s` seconds (counted as asked now). Empty when none is
  /// overdue.
  std::vector<std::uint32_t> overdue(double now, double after_s, const alive_fn& alive);

  /// Nothing of an earlier run is left anywhere.
  bool empty() const noexcept { return stopping_.empty() && unsent_.empty(); }
  /// Nodes still stopping, for `coach status`.
  std::size_t count() const noexcept { return stopping_.size() + unsent_.size(); }
  bool stopping(std::uint32_t host) const { return stopping_.contains(host); }
  const std::set<std::uint32_t>& unanswered() const noexcept { return stopping_; }
  const std::set<std::uint32_t>& unsent() const noexcept { return unsent_; }
  double asked_at() const noexcept { return asked_at_; }

 private:
  std::set<std::uint32_t> stopping_;  ///< hosts whose stop of an earlier run is unanswered
  std::set<std::uint32_t> unsent_;    ///< hosts of an earlier process's run not seen yet
  double asked_at_ = 0;               ///< when the stops of `stopping_` were last sent
};

}  // namespace coach::scheduler
