// scheduler/change_timer.cpp: timing of a running job's changes (change_timer.hpp).
#include "master/change_timer.hpp"

#include <algorithm>

namespace coach::master {
namespace {

double ms_between(time_point a, time_point b) {
  return (b - a).count() * 1000.0;
}

}  // namespace

void change_timer::begin(std::string what, std::int64_t step, std::optional<time_point> requested,
                         std::optional<time_point> prepared) {
  timing t;
  t.requested = requested.value_or(now());
  t.rep.what = std::move(what);
  t.rep.step = step;
  if (prepared) t.rep.prepare_ms = ms_between(t.requested, *prepared);
  // Before: the steps completed before the request (not those waiting at its boundary).
  std::vector<double> gaps;
  std::uint64_t samples = 0;
  std::optional<time_point> first, last;
  for (const auto& d : recent_) {
    if (d.at > t.requested) break;
    if (!first) {
      first = d.at;
    } else {
      gaps.push_back(d.gap_ms);
      samples += d.samples;
    }
    last = d.at;
  }
  if (!gaps.empty()) {
    const double longest = *std::max_element(gaps.begin(), gaps.end());
    std::nth_element(gaps.begin(), gaps.begin() + std::ptrdiff_t(gaps.size() / 2), gaps.end());
    t.rep.step_ms = gaps[gaps.size() / 2];
    t.rep.step_spread_ms = longest - t.rep.step_ms;
    const double ms = ms_between(*first, *last);
    if (ms > 0) t.rep.samples_per_s_before = double(samples) * 1000.0 / ms;
  }
  timings_.push_back(std::move(t));
}

void change_timer::adds_workers() {
  if (!timings_.empty()) timings_.back().adds_workers = true;
}

void change_timer::add_moved_bytes(std::uint64_t bytes) {
  if (!timings_.empty()) timings_.back().rep.moved_bytes += bytes;
}

void change_timer::orders_sent() {
  if (!timings_.empty()) timings_.back().orders_sent = now();
}

void change_timer::transfers_done() {
  if (!timings_.empty() && timings_.back().orders_sent)
    timings_.back().rep.transfer_ms = ms_between(*timings_.back().orders_sent, now());
}

void change_timer::step_completed(std::int64_t step, std::uint64_t samples) {
  const auto at = now();
  step_done d{step, at, samples, 0};
  for (auto it = recent_.rbegin(); it != recent_.rend(); ++it)
    if (it->step < step) {
      d.gap_ms = ms_between(it->at, at);
      break;
    }
  recent_.push_back(d);
  while (recent_.size() > 21) recent_.pop_front();
  for (auto& t : timings_) {
    if (t.boundary_done) {
      if (t.steps_after >= 20 || step <= t.rep.step) continue;
      ++t.steps_after;
      t.samples_after += samples;
      const double ms = ms_between(t.after_start, at);
      if (ms > 0) t.rep.samples_per_s_after = double(t.samples_after) * 1000.0 / ms;
      continue;
    }
    if (step != t.rep.step) continue;
    t.boundary_done = true;
    t.after_start = at;
    t.rep.gap_ms = d.gap_ms;
    if (t.rep.step_ms >= 0) t.rep.pause_ms = std::max(0.0, d.gap_ms - t.rep.step_ms);
    if (t.adds_workers) t.rep.join_ms = ms_between(t.requested, at);
  }
}

std::uint32_t change_timer::changes_done() const {
  return std::uint32_t(
      std::ranges::count_if(timings_, [](const timing& t) { return t.boundary_done; }));
}

std::vector<change_report> change_timer::reports() const {
  std::vector<change_report> out;
  for (const auto& t : timings_) out.push_back(t.rep);
  return out;
}

}  // namespace coach::master
