#pragma once
// master::change_sequencer: the life of a running job's changes (docs/design.md, "Elastic
// jobs"), as plain logic. It holds the configuration of the open step, the changes queued for
// step boundaries (the spec's schedule, `coach rescale`, `coach migrate`, a policy's resize),
// the migrations whose new shard is starting ahead, and the change under way: its next
// configuration, the parts it waits for, its migrate orders and the acknowledgements of its
// transfers. The job master (master/job_master.hpp) asks it before each step opens whether a
// change begins or the step must wait, plans the change with master::plan_change, and does the
// sending; tests/unit/master/change_sequencer_test.cpp drives it alone.
//
// The rules: one change at a time; a change begins at the first step boundary at or after its
// step once the transfers of the one before are acknowledged (until then the steps go on
// without it); a change with parts starting elsewhere holds its step until they are up (a
// transfer to a shard that does not exist yet would be lost); a worker that cannot start is
// left out, a shard that cannot start drops the whole change; once its parts are up its orders
// go out and its configuration becomes current, and the shards it empties hold their slices
// until every transfer is acknowledged.
//
// Threads: one owner (the master).

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "master/change_planner.hpp"
#include "ps/job_config.hpp"
#include "spec/job_spec.hpp"

namespace coach::master {

using scheduler::schedule_action;
using scheduler::time_point;

/// A change of the running job's workers or shards: from the spec's schedule, or asked for
/// while it runs, with the node a new shard goes to.
struct change_request {
  schedule_action action;
  std::string node;                     ///< empty: where the hooks decide
  std::optional<time_point> requested;  ///< empty: when its step comes (schedule)
  /// A migration asked for while the job runs: its new shard, started (and its node's memory
  /// warmed) before the change is queued for a step boundary, and when it was ready.
  std::optional<std::uint32_t> shard;
  std::optional<time_point> prepared;
};

/// The master::job_change a request asks for.
master::job_change to_job_change(const change_request& r);
/// What a request is, for reports: "workers 3", "shards 2", "migrate 0 to node-b".
std::string describe(const change_request& r);

class change_sequencer {
 public:
  explicit change_sequencer(ps::job_config initial) : cfg_(std::move(initial)) {}

  /// The configuration of the open step.
  const ps::job_config& current() const noexcept { return cfg_; }
  /// The configuration of the change under way, waiting for its parts; null when none.
  const ps::job_config* next() const noexcept { return next_ ? &*next_ : nullptr; }
  /// Shards owning slices now, and once the change under way is done.
  std::vector<std::uint32_t> live_shards() const;
  std::vector<std::uint32_t> planned_live_shards() const;
  /// Members and shard map once the change under way is done.
  const std::vector<std::uint32_t>& planned_members() const noexcept {
    return next_ ? next_->members : cfg_.members;
  }
  const ps::shard_map& planned_map() const noexcept { return next_ ? next_->map : cfg_.map; }

  /// Queues `c` for step `at_step`, after the changes queued for that step or before.
  void queue(change_request c, std::int64_t at_step);
  /// A migration whose new shard `shard` is starting elsewhere: queued once it is ready.
  void preparing(std::uint32_t shard, change_request c);
  /// Its shard is up (or could not start): the migration, no longer preparing; nullopt when
  /// `shard` is no such shard.
  std::optional<change_request> prepared(std::uint32_t shard);
  bool is_preparing(std::uint32_t shard) const { return preparing_.contains(shard); }

  /// What step `step` is to do before it opens.
  struct due {
    enum class kind_type { open, wait, begin } kind = kind_type::open;
    std::optional<change_request> change;  ///< begin: the change that begins at this step
  };
  /// `stopping`: the job is ending; no change begins.
  due at(std::int64_t step, bool stopping);

  /// The change that began has its plan, with `parts_elsewhere` of its parts starting on other
  /// nodes. True when its orders can go now (publish()).
  bool begun(master::change_plan plan, std::size_t parts_elsewhere);
  /// News of a part of the change under way started elsewhere.
  enum class part_news {
    unexpected,  ///< no change waits for such a part
    waiting,     ///< more parts to come
    ready,       ///< all are up: publish()
    dropped,     ///< all answered, but a shard could not start: the change is dropped
  };
  part_news part_ready(bool worker, std::uint32_t id, bool ok);

  /// The change's parts are up: its configuration becomes current; returns its migrate orders
  /// to send (before the configuration). The shards it empties are releasing until every
  /// transfer is acknowledged.
  std::vector<master::release_order> publish();
  /// A transfer is acknowledged.
  enum class ack_news {
    unexpected,  ///< none was awaited
    waiting,     ///< more to come
    done,        ///< the last: the next change may begin
    freed,       ///< the last, and the shards that were releasing are free now
  };
  ack_news acknowledged();
  std::size_t acks_awaited() const noexcept { return acks_awaited_; }
  const std::vector<std::uint32_t>& releasing() const noexcept { return releasing_; }

  /// Workers died: from step `from` on the configurations expect them no more. Returns the
  /// configurations to re-issue, oldest first (each one version newer), given the history
  /// `published` of every configuration by first step; the last becomes current, and a change
  /// waiting for its parts leaves them out too.
  std::vector<ps::job_config> without(const std::vector<std::uint32_t>& ranks, std::int64_t from,
                                      const std::map<std::int64_t, ps::job_config>& published);

  /// For the layout the hooks report: the members and the shards holding a part of the job
  /// now (current, the change under way, releasing, migrations prepared or queued).
  void layout(std::vector<std::uint32_t>& members, std::vector<std::uint32_t>& shards) const;

 private:
  ps::job_config cfg_;
  std::deque<change_request> queued_;  ///< by step
  std::map<std::uint32_t, change_request> preparing_;
  std::optional<ps::job_config> next_;
  std::vector<master::release_order> orders_;
  std::size_t parts_awaited_ = 0;
  bool failed_ = false;
  std::size_t acks_awaited_ = 0;
  std::vector<std::uint32_t> releasing_;
};

}  // namespace coach::master
