#include "report/perf_tracker.hpp"

#include <cmath>

namespace coach::scheduler {

std::vector<perf_observation> observations_of(const epoch_report& e) {
  std::vector<perf_observation> out;
  if (e.segments.size() <= 1) {
    if (e.workers >= 1 && e.shards >= 1 && e.seconds > 0)
      out.push_back({int(e.workers), int(e.shards), e.seconds});
    return out;
  }
  for (const auto& s : e.segments) {
    if (s.workers < 1 || s.shards < 1 || s.steps < min_segment_steps || s.seconds <= 0 ||
        s.samples == 0 || double(s.samples) * 10 < double(e.samples))
      continue;
    out.push_back(
        {int(s.workers), int(s.shards), s.seconds * double(e.samples) / double(s.samples)});
  }
  return out;
}

std::optional<double> change_prediction::error() const {
  if (!predicted_s || !(observed_s > 0)) return std::nullopt;
  return std::abs(*predicted_s - observed_s) / observed_s;
}

std::optional<double> perf_tracker::epoch(const epoch_report& e, perf_model& m) {
  std::optional<double> last;
  for (const auto& o : observations_of(e)) {
    const auto predicted = m.predict(job_, model_, o.workers, o.shards);
    m.observe(job_, model_, o.workers, o.shards, o.epoch_seconds);
    last = last_predicted_ = predicted;
    last_observed_ = o.epoch_seconds;
    if (predicted) {
      ++predictions_;
      abs_rel_error_ += std::abs(*predicted - o.epoch_seconds) / o.epoch_seconds;
    }
    const std::pair<int, int> alloc{o.workers, o.shards};
    if (last_alloc_ && *last_alloc_ != alloc) {
      change_prediction c{e.epoch,  last_alloc_->first, last_alloc_->second, o.workers,
                          o.shards, predicted,          o.epoch_seconds};
      if (auto err = c.error()) {
        change_error_sum_ += *err;
        ++change_predictions_;
      }
      if (changes_.size() == max_changes) changes_.erase(changes_.begin());
      changes_.push_back(c);
    }
    last_alloc_ = alloc;
  }
  return last;
}

std::optional<double> perf_tracker::mean_abs_rel_error() const {
  if (!predictions_) return std::nullopt;
  return abs_rel_error_ / double(predictions_);
}

std::optional<double> perf_tracker::mean_change_error() const {
  if (!change_predictions_) return std::nullopt;
  return change_error_sum_ / double(change_predictions_);
}

json perf_tracker::to_json() const {
  const auto figure = [](const std::optional<double>& v) {
    return v ? json_figure(*v) : json(nullptr);
  };
  json changes = json::array();
  for (const auto& c : changes_)
    changes.push_back(json{{"epoch", c.epoch + 1},
                           {"from", {c.from_workers, c.from_shards}},
                           {"to", {c.workers, c.shards}},
                           {"predicted_epoch_s", figure(c.predicted_s)},
                           {"observed_epoch_s", json_figure(c.observed_s)},
                           {"error", figure(c.error())}});
  return json{{"predictions", predictions_},
              {"mean_abs_rel_error", figure(mean_abs_rel_error())},
              {"last_predicted_s", figure(last_predicted_)},
              {"last_observed_s", json_figure(last_observed_)},
              {"changes", std::move(changes)},
              {"mean_change_error", figure(mean_change_error())}};
}

}  // namespace coach::scheduler
