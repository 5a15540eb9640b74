#include "master/epoch_ledger.hpp"

#include <algorithm>

namespace coach::master {

void epoch_ledger::begin(std::uint32_t epoch) {
  epochs_[epoch].start = clock_.now();
}

void epoch_ledger::step_opened(std::uint32_t epoch, std::int64_t step, std::uint32_t workers,
                               std::uint32_t shards) {
  auto& e = epochs_[epoch];
  ++e.steps;
  auto& segs = e.segments;
  if (segs.empty() || segs.back().figures.workers != workers ||
      segs.back().figures.shards != shards) {
    segment s;
    s.figures.workers = workers;
    s.figures.shards = shards;
    s.figures.first_step = step;
    s.start = clock_.now();
    segs.push_back(s);
  }
  ++segs.back().figures.steps;
}

void epoch_ledger::ends_with(std::uint32_t epoch, std::uint32_t workers, std::uint32_t shards) {
  auto& e = epochs_[epoch];
  e.workers = workers;
  e.shards = shards;
}

void epoch_ledger::reported(std::uint32_t epoch, std::int64_t step, std::uint64_t samples,
                            double loss_sum, std::uint64_t compute_us) {
  auto& e = epochs_[epoch];
  // The segment of the step: the last that began at or before it.
  for (auto it = e.segments.rbegin(); it != e.segments.rend(); ++it)
    if (it->figures.first_step <= step) {
      it->figures.samples += samples;
      break;
    }
  e.samples += samples;
  e.loss_sum += loss_sum;
  e.compute_us += compute_us;
}

void epoch_ledger::completed(std::uint32_t epoch) {
  auto& e = epochs_[epoch];
  e.seconds = since_start(e);
  e.end = clock_.now();
}

void epoch_ledger::evaluated(std::uint32_t epoch, std::int64_t correct, std::int64_t total,
                             double loss_sum, double auc, double log_loss) {
  epochs_[epoch].eval = evaluation{correct, total, loss_sum, auc, log_loss};
}

std::optional<epoch_report> epoch_ledger::take_report(std::uint32_t epoch) {
  auto it = epochs_.find(epoch);
  if (it == epochs_.end()) return std::nullopt;
  auto& e = it->second;
  if (e.reported || !e.eval || !e.seconds) return std::nullopt;
  e.reported = true;
  epoch_report rep;
  rep.epoch = epoch;
  rep.samples = e.samples;
  rep.steps = e.steps;
  rep.train_loss = e.samples ? e.loss_sum / double(e.samples) : 0.0;
  rep.test_accuracy = e.eval->total ? double(e.eval->correct) / double(e.eval->total) : 0.0;
  rep.test_loss = e.eval->total ? e.eval->loss_sum / double(e.eval->total) : 0.0;
  rep.test_auc = e.eval->auc;
  rep.test_log_loss = e.eval->log_loss;
  rep.seconds = *e.seconds;
  rep.samples_per_s = *e.seconds > 0 ? double(e.samples) / *e.seconds : 0.0;
  rep.compute_seconds = double(e.compute_us) / 1e6;
  rep.workers = e.workers;
  rep.shards = e.shards;
  for (std::size_t i = 0; i < e.segments.size(); ++i) {
    auto seg = e.segments[i].figures;
    const auto until = i + 1 < e.segments.size() ? e.segments[i + 1].start : *e.end;
    seg.seconds = std::max(0.0, to_seconds(until) - to_seconds(e.segments[i].start));
    rep.segments.push_back(seg);
  }
  return rep;
}

progress_event epoch_ledger::progress(std::uint32_t epoch) const {
  progress_event p;
  p.epoch = epoch;
  auto it = epochs_.find(epoch);
  if (it == epochs_.end()) return p;
  const auto& e = it->second;
  p.samples_done = e.samples;
  p.train_loss = e.samples ? e.loss_sum / double(e.samples) : 0.0;
  p.seconds = since_start(e);
  p.samples_per_s = p.seconds > 0 ? double(e.samples) / p.seconds : 0.0;
  return p;
}

double epoch_ledger::since_start(const stats& e) const {
  if (!e.start) return 0.0;
  return to_seconds(clock_.now()) - to_seconds(*e.start);
}

}  // namespace coach::master
