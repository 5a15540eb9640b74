#include "scheduler/cluster_view.hpp"

namespace coach::scheduler {

int cluster_view::total_gpus() const noexcept {
  int n = 0;
  for (const auto& node : nodes) n += node.total.gpus;
  return n;
}

int cluster_view::free_gpus() const noexcept {
  int n = 0;
  for (const auto& node : nodes) n += node.free.gpus;
  return n;
}

std::string_view to_string(job_state s) noexcept {
  switch (s) {
    case job_state::queued:
      return "queued";
    case job_state::running:
      return "running";
    case job_state::suspended:
      return "suspended";
    case job_state::succeeded:
      return "succeeded";
    case job_state::failed:
      return "failed";
    case job_state::cancelled:
      return "cancelled";
  }
  return "unknown";
}

std::optional<job_state> parse_job_state(std::string_view text) noexcept {
  for (auto s : {job_state::queued, job_state::running, job_state::suspended, job_state::succeeded,
                 job_state::failed, job_state::cancelled}) {
    if (to_string(s) == text) return s;
  }
  return std::nullopt;
}

}  // namespace coach::scheduler
