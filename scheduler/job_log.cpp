#include "scheduler/job_log.hpp"

#include <algorithm>
#include <iterator>

namespace coach::scheduler {

void job_log::add(double time, std::string line) {
  lines_.push_back({++made_, time, std::move(line)});
  while (lines_.size() > max_events) lines_.pop_front();
}

void job_log::add_epoch(double time, std::string line) {
  epochs_.push_back({++made_, time, std::move(line)});
  while (epochs_.size() > max_epoch_events) epochs_.pop_front();
}

std::vector<job_event> job_log::since(std::uint64_t after) const {
  const auto later = [after](const std::deque<job_event>& d) {
    return std::upper_bound(d.begin(), d.end(), after,
                            [](std::uint64_t a, const job_event& e) { return a < e.seq; });
  };
  std::vector<job_event> out;
  std::merge(later(lines_), lines_.end(), later(epochs_), epochs_.end(), std::back_inserter(out),
             [](const job_event& x, const job_event& y) { return x.seq < y.seq; });
  return out;
}

}  // namespace coach::scheduler
