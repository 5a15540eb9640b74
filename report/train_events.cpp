#include "report/train_events.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

namespace coach::scheduler {
namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// A number, or null for NaN and infinities (JSON has neither).
nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

result<train_events> train_events::open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f)
    return fail(errc::io_error, "--events {}: cannot write it ({})", path, std::strerror(errno));
  return train_events(f);
}

train_events::~train_events() {
  if (file_) std::fclose(file_);
}

void train_events::line(const std::string& json) {
  if (!file_) return;
  std::fputs(json.c_str(), file_);
  std::fputc('\n', file_);
  std::fflush(file_);
}

void train_events::start(const std::string& job, std::uint32_t epochs, std::uint32_t workers,
                         std::uint32_t shards) {
  workers_ = workers;
  shards_ = shards;
  line(nlohmann::json{{"event", "start"},
                      {"time", unix_now()},
                      {"job", job},
                      {"epochs", epochs},
                      {"workers", workers},
                      {"shards", shards}}
           .dump());
}

void train_events::progress(const progress_event& p) {
  if (p.changes_done <= changes_seen_) return;
  changes_seen_ = p.changes_done;
  workers_ = p.workers;
  shards_ = p.shards;
  line(nlohmann::json{{"event", "change"},
                      {"time", unix_now()},
                      {"epoch", p.epoch + 1},
                      {"samples_done", p.samples_done},
                      {"workers", p.workers},
                      {"shards", p.shards},
                      {"changes_done", p.changes_done}}
           .dump());
}

void train_events::epoch(const epoch_report& e) {
  // Changes no progress report showed (a fast epoch has few): seen in the epoch's allocation.
  if (e.workers != workers_ || e.shards != shards_) {
    workers_ = e.workers;
    shards_ = e.shards;
    line(nlohmann::json{{"event", "change"},
                        {"time", unix_now()},
                        {"epoch", e.epoch + 1},
                        {"workers", e.workers},
                        {"shards", e.shards}}
             .dump());
  }
  line(nlohmann::json{{"event", "epoch"},
                      {"time", unix_now()},
                      {"epoch", e.epoch + 1},
                      {"train_loss", num(e.train_loss)},
                      {"test_loss", num(e.test_loss)},
                      {"test_accuracy", num(e.test_accuracy)},
                      {"seconds", num(e.seconds)},
                      {"samples_per_s", num(e.samples_per_s)},
                      {"workers", e.workers},
                      {"shards", e.shards}}
           .dump());
}

void train_events::end(const std::string& state, double test_accuracy, double seconds,
                       std::size_t epochs_done) {
  line(nlohmann::json{{"event", "end"},
                      {"time", unix_now()},
                      {"state", state},
                      {"test_accuracy", num(test_accuracy)},
                      {"seconds", num(seconds)},
                      {"epochs_done", epochs_done}}
           .dump());
}

}  // namespace coach::scheduler
