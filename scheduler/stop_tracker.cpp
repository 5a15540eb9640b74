// scheduler/stop_tracker.cpp: the unanswered stops of one job's earlier runs (stop_tracker.hpp).
#include "scheduler/stop_tracker.hpp"

namespace coach::scheduler {

void stop_tracker::ask(std::set<std::uint32_t> hosts, double now) {
  stopping_ = std::move(hosts);
  asked_at_ = now;
}

void stop_tracker::ask_unsent(std::set<std::uint32_t> hosts, double now) {
  unsent_ = hosts;
  stopping_ = std::move(hosts);
  asked_at_ = now;
}

bool stop_tracker::forget_unseen(const alive_fn& alive) {
  const bool had = !unsent_.empty();
  std::erase_if(unsent_, [&](std::uint32_t h) {
    if (alive(h)) return false;
    stopping_.erase(h);
    return true;
  });
  return had;
}

std::vector<std::uint32_t> stop_tracker::overdue(double now, double after_s,
                                                 const alive_fn& alive) {
  if (stopping_.empty() || now - asked_at_ <= after_s) return {};
  std::vector<std::uint32_t> hosts;
  for (const auto h : stopping_)
    if (alive(h) && !unsent_.contains(h)) hosts.push_back(h);
  asked_at_ = now;
  return hosts;
}

}  // namespace coach::scheduler
