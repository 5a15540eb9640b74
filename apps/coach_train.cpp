// apps/coach_train.cpp: `coach train` (apps/coach_train.hpp): the job spec checked with every
// output it will write, the embedded cluster run (actors/embedded_cluster.hpp) with its progress
// line, epoch lines, --events and checkpoints on stderr, then the model and the report saved.
// Split from apps/coach.cpp, which parses the command line.

#include "coach_train.hpp"

#include <unistd.h>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "actors/embedded_cluster.hpp"
#include "coach_model.hpp"
#include "common/writable.hpp"
#include "kernels/backend.hpp"
#include "report/train_events.hpp"
#include "spec/job_spec.hpp"

namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_sigint(int) {
  if (g_stop.exchange(true)) std::_Exit(130);  // a second Ctrl-C: leave at once
}

/// The progress line of an epoch: a bar, samples/s and the running loss.
void draw_progress(const coach::scheduler::progress_event& p, bool tty) {
  if (!tty) return;
  const double frac = p.samples_total ? double(p.samples_done) / double(p.samples_total) : 0.0;
  constexpr int width = 30;
  const int filled = int(frac * width + 0.5);
  std::string bar(std::size_t(filled), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\repoch %u/%u [%s] %3.0f%%  %8.0f samples/s  loss %.4f", p.epoch + 1,
               p.epochs, bar.c_str(), frac * 100.0, p.samples_per_s, p.train_loss);
  std::fflush(stderr);
}

/// Two of a run's outputs on one file (after resolving ".", ".." and links): the flags and the
/// file, or nothing.
std::optional<std::string> shared_output(
    std::span<const std::pair<std::string_view, std::string>> outputs) {
  namespace fs = std::filesystem;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    for (std::size_t j = i + 1; j < outputs.size(); ++j) {
      const auto& [fa, a] = outputs[i];
      const auto& [fb, b] = outputs[j];
      if (a.empty() || b.empty()) continue;
      std::error_code ea, eb;
      const auto ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
      if (ea || eb ? a == b : ca == cb)
        return coach::format("{} and {} both name {}: each output needs a file of its own", fa, fb,
                             a);
    }
  return std::nullopt;
}

}  // namespace

namespace coach::apps {

int run_train(const std::string& spec_path, std::uint32_t workers, std::uint32_t shards,
              const train_flags& flags) {
  const auto& backend = flags.backend;
  const auto& report_path = flags.report_path;
  auto spec = coach::scheduler::load_job_spec(spec_path);
  if (!spec) {
    std::fprintf(stderr, "coach: %s\n", spec.error().message.c_str());
    return 2;
  }
  // --save and --checkpoint win over the spec's output: and checkpoint:.
  const std::string save_path = flags.save_path.empty() ? spec->output : flags.save_path;
  // Every file the run will write can be written, each by one writer: said now, not after
  // hours of training (two outputs on one path left only the last written: issue 37).
  const std::pair<std::string_view, std::string> outputs[] = {
      {"--report", report_path},
      {"--events", flags.events},
      {flags.save_path.empty() ? "output:" : "--save", save_path},
      {flags.checkpoint.empty() ? "checkpoint.path:" : "--checkpoint",
       flags.checkpoint.empty() ? spec->checkpoint.path : flags.checkpoint}};
  for (const auto& [flag, path] : outputs)
    if (!path.empty())
      if (auto why = coach::unwritable(flag, path)) {
        std::fprintf(stderr, "coach: %s\n", why->c_str());
        return 2;
      }
  if (auto why = shared_output(outputs)) {
    std::fprintf(stderr, "coach: %s\n", why->c_str());
    return 2;
  }
  coach::actors::train_options opt;
  opt.workers = workers;
  opt.shards = shards;
  opt.python = flags.python;
  if (flags.every_s && flags.checkpoint.empty() && !spec->checkpoint.enabled()) {
    std::fprintf(stderr, "coach: --checkpoint-every needs --checkpoint FILE\n");
    return 2;
  }
  if (flags.every_s && !(*flags.every_s >= 0)) {
    std::fprintf(stderr, "coach: --checkpoint-every %g: give seconds >= 0\n", *flags.every_s);
    return 2;
  }
  opt.checkpoint = spec->checkpoint;
  if (!flags.checkpoint.empty()) opt.checkpoint.path = flags.checkpoint;
  if (flags.every_s) opt.checkpoint.every_s = *flags.every_s;
  opt.resume = flags.resume;
  opt.on_resume = [&](const coach::scheduler::checkpoint_info& c) {
    std::fprintf(stderr, "coach: resuming from %s after epoch %u of %d (step %lld, %u workers)\n",
                 flags.resume.c_str(), c.epochs_completed, spec->epochs,
                 static_cast<long long>(c.version), workers ? workers : c.workers);
  };
  opt.on_checkpoint = [](const coach::actors::checkpoint_written& w) {
    if (w.failure)
      std::fprintf(stderr, "coach: warning: no checkpoint after epoch %u: %s\n", w.epochs_completed,
                   w.failure->message.c_str());
    else
      std::fprintf(stderr, "coach: checkpoint after epoch %u (step %lld) written to %s\n",
                   w.epochs_completed, static_cast<long long>(w.step), w.path.c_str());
  };
  if (!backend.empty()) {
    auto kind = coach::kernels::parse_backend_kind(backend);
    if (!kind) {
      std::fprintf(stderr, "coach: --backend: %s\n", kind.error().message.c_str());
      return 2;
    }
    opt.backend = *kind;
  }
  if (!flags.precision.empty()) {
    auto p = coach::kernels::parse_math_precision(flags.precision);
    if (!p) {
      std::fprintf(stderr, "coach: --precision: %s\n", p.error().message.c_str());
      return 2;
    }
    opt.precision = *p;
  }
  // --events: one JSON line per epoch and change while it runs (report/train_events.hpp).
  std::optional<coach::scheduler::train_events> events;
  std::mutex events_mu;  // the callbacks come from the job's actors
  if (!flags.events.empty()) {
    auto e = coach::scheduler::train_events::open(flags.events);
    if (!e) {
      std::fprintf(stderr, "coach: %s\n", e.error().message.c_str());
      return 2;
    }
    events.emplace(std::move(*e));
    events->start(spec->name, std::uint32_t(spec->epochs),
                  workers ? workers : std::uint32_t(spec->workers.initial),
                  shards ? shards : std::uint32_t(spec->shards.initial));
  }
  const bool tty = isatty(STDERR_FILENO);
  opt.on_progress = [tty, &events, &events_mu](const auto& p) {
    draw_progress(p, tty);
    if (events) {
      std::lock_guard lock{events_mu};
      events->progress(p);
    }
  };
  opt.on_epoch = [tty, &spec, &events, &events_mu](const coach::scheduler::epoch_report& e) {
    if (events) {
      std::lock_guard lock{events_mu};
      events->epoch(e);
    }
    if (tty) std::fprintf(stderr, "\r\033[K");
    std::string gain = e.lr_gain > 0 ? coach::format("  lr gain {:.3f}", e.lr_gain) : "";
    if (!std::isnan(e.test_auc))
      gain += coach::format("  test AUC {:.4f}  log loss {:.4f}", e.test_auc, e.test_log_loss);
    std::fprintf(stderr,
                 "epoch %u/%d  train loss %.4f  test loss %.4f  test accuracy %.4f  %.2f s  "
                 "%.0f samples/s%s\n",
                 e.epoch + 1, spec->epochs, e.train_loss, e.test_loss, e.test_accuracy, e.seconds,
                 e.samples_per_s, gain.c_str());
  };
  opt.stop = &g_stop;
  std::signal(SIGINT, on_sigint);
  std::signal(SIGTERM, on_sigint);

  std::fprintf(stderr, "coach: training '%s' %s %s\n", spec->name.c_str(),
               spec->model.script ? "with" : "on",
               spec->model.script ? spec->model.script->path.c_str() : spec->dataset.path.c_str());
  auto result = coach::actors::train_embedded(*spec, opt);
  if (tty) std::fprintf(stderr, "\r\033[K");
  if (!result) {
    const auto code = result.error().code;
    if (events) events->end("failed", std::nan(""), 0, 0);
    std::fprintf(stderr, "coach: %s\n", result.error().message.c_str());
    return code == coach::errc::invalid_argument || code == coach::errc::not_found ||
                   code == coach::errc::parse_error
               ? 2
               : 1;
  }
  std::fprintf(stderr,
               "coach: %s after %zu epoch(s): test accuracy %.4f in %.1f s (%u workers, %u "
               "shards, %s, %llu parameters)\n",
               result->cancelled ? "stopped" : "done", result->epochs.size(), result->test_accuracy,
               result->seconds, result->workers, result->shards, result->backend.c_str(),
               static_cast<unsigned long long>(result->num_params));
  if (const auto& i = result->invocations)  // function mode: how its invocations ended
    std::fprintf(
        stderr,
        "coach: invocations: %llu started, %llu completed, %llu timed out, %llu out of "
        "memory, %llu failed; %llu steps; peak %.1f MiB\n",
        static_cast<unsigned long long>(i->started), static_cast<unsigned long long>(i->completed),
        static_cast<unsigned long long>(i->timed_out),
        static_cast<unsigned long long>(i->out_of_memory),
        static_cast<unsigned long long>(i->failed), static_cast<unsigned long long>(i->tasks),
        double(i->peak_memory_bytes) / double(1 << 20));
  if (events)
    events->end(result->cancelled ? "cancelled" : "succeeded", result->test_accuracy,
                result->seconds, result->epochs.size());
  if (!save_path.empty() && !result->params.empty()) {
    if (const int rc = coach::apps::save_model(save_path, *spec, *result); rc != 0) return rc;
  }
  if (!report_path.empty()) {
    std::ofstream out(report_path);
    out << coach::scheduler::to_json(*result);
    if (!out) {
      std::fprintf(stderr, "coach: cannot write the report to '%s'\n", report_path.c_str());
      return 1;
    }
  }
  return result->cancelled ? 130 : 0;
}

}  // namespace coach::apps
