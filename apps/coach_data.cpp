#include "coach_data.hpp"

#include <CLI/CLI.hpp>

#include <unistd.h>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace coach::apps {

data_command::data_command(CLI::App& app) {
  data_ = app.add_subcommand("data", "Make a data set (coach data ctr: click-through-rate data)");
  data_->require_subcommand(1);
  auto& o = ctr_options_;
  ctr_ = data_->add_subcommand(
      "ctr",
      "Write click-through-rate data in the Criteo layout (label, integer and categorical "
      "columns, tab-separated) drawn from a planted model, and PATH.json with the model's "
      "held-out AUC and log loss: the best any model can reach (docs/sparse.md)");
  ctr_->add_option("--rows", o.rows, "Rows to write (>= 2; the last --test-fraction are held out)")
      ->required();
  ctr_->add_option("--out", ctr_out_, "The file to write (gzipped when it ends in .gz)")
      ->required();
  ctr_->add_option("--seed", o.seed, "Seed of the planted model and of the rows")
      ->capture_default_str();
  ctr_->add_option("--fields", o.n_fields, "Categorical columns (Criteo: 26)")
      ->capture_default_str();
  ctr_->add_option("--dense", o.n_dense, "Integer columns (Criteo: 13)")->capture_default_str();
  ctr_->add_option("--max-vocab", o.max_vocab,
                   "Ids of the last field; the fields' vocabularies grow geometrically from 10 "
                   "to it")
      ->capture_default_str();
  ctr_->add_option("--zipf", o.zipf, "Zipf exponent of the ids' frequencies (> 0)")
      ->capture_default_str();
  ctr_->add_option("--signal-ids", o.signal_ids,
                   "Most frequent ids of each field that carry planted weights (the rest is "
                   "noise)")
      ->capture_default_str();
  ctr_->add_option("--test-fraction", o.test_fraction,
                   "Fraction of the rows, at the end, held out (in (0, 1))")
      ->capture_default_str();
}

bool data_command::chosen() const {
  return data_->parsed();
}

int data_command::run() const {
  if (ctr_->parsed()) return run_ctr();
  std::fprintf(stderr, "coach: data: give a subcommand (ctr)\n");
  return 2;
}

int data_command::run_ctr() const {
  if (auto ok = worker::check_ctr_options(ctr_options_); !ok) {
    std::fprintf(stderr, "coach: data ctr: %s\n", ok.error().message.c_str());
    return 2;
  }
  const bool tty = isatty(STDERR_FILENO) != 0;
  int last_tenth = 0;
  // A bar on a terminal; otherwise a line each tenth of a long run (logs stay short).
  const auto progress = [tty, &last_tenth](std::uint64_t done, std::uint64_t total) {
    if (tty) {
      std::fprintf(stderr, "\rwriting rows: %llu / %llu (%.0f%%)", (unsigned long long)done,
                   (unsigned long long)total, 100.0 * double(done) / double(total));
      if (done == total) std::fprintf(stderr, "\n");
    } else if (total >= 1'000'000) {
      const int tenth = int(10 * done / total);
      if (tenth > last_tenth) {
        last_tenth = tenth;
        std::fprintf(stderr, "writing rows: %llu / %llu\n", (unsigned long long)done,
                     (unsigned long long)total);
      }
    }
  };
  const auto start = std::chrono::steady_clock::now();
  auto s = worker::write_ctr(ctr_options_, ctr_out_, progress);
  if (!s) {
    std::fprintf(stderr, "coach: data ctr: %s\n", s.error().message.c_str());
    return s.error().code == errc::invalid_argument ? 2 : 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %llu rows to %s in %.1f s (%llu training, then %llu held out)\n",
              (unsigned long long)s->rows, ctr_out_.c_str(), seconds,
              (unsigned long long)s->train_rows, (unsigned long long)s->test_rows);
  std::printf("summary: %s.json\n", ctr_out_.c_str());
  std::printf(
      "base rate %.4f; the planted model (the best reachable): held-out AUC %.4f, log "
      "loss %.4f; training AUC %.4f, log loss %.4f\n",
      s->base_rate, s->test_auc, s->test_log_loss, s->train_auc, s->train_log_loss);
  return 0;
}

}  // namespace coach::apps
