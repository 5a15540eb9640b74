#pragma once
// ps::change_kind: what an elastic change of a running job does. The one enum that the job
// spec's `schedule:` (scheduler::schedule_action), the scheduler's change requests and the job
// master's planner (master::job_change) share.

#include <string_view>

namespace coach::ps {

enum class change_kind {
  workers,  ///< the job's worker count becomes the change's value
  shards,   ///< the job's shard count becomes the change's value
  migrate,  ///< the shard named by the change's value moves whole to another
};

/// "workers", "shards", "migrate": the spec's keys.
constexpr std::string_view to_string(change_kind k) noexcept {
  switch (k) {
    case change_kind::workers:
      return "workers";
    case change_kind::shards:
      return "shards";
    case change_kind::migrate:
      return "migrate";
  }
  return "?";
}

}  // namespace coach::ps
