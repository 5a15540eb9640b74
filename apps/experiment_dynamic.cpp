// coach experiment dynamic: a static and an elastic job while a program that is not Coach's holds
// the CPUs (apps/experiment_studies.hpp).

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/experiment_studies.hpp"
#include "common/format.hpp"
#include "report/experiment.hpp"

namespace coach::apps::experiment {
namespace {

namespace ex = scheduler::experiment;
using namespace std::chrono_literals;

/// A program that is not Coach's keeping CPUs busy: `n` spinning processes. Not this
/// process's descendants, nor named coach...: a node counts those as Coach's own
/// (host/own_cpu.hpp). Each is a grandchild whose parent exits at once (init adopts it),
/// named "cpu-hog".
class cpu_hog {
 public:
  explicit cpu_hog(unsigned n) {
    const pid_t owner = ::getpid();
    int fds[2];
    if (::pipe(fds) != 0) return;
    for (unsigned i = 0; i < n; ++i) {
      const pid_t child = ::fork();
      if (child == 0) {
        if (::fork() == 0) {
          ::prctl(PR_SET_NAME, "cpu-hog");
          const pid_t me = ::getpid();
          (void)!::write(fds[1], &me, sizeof me);
          // Not this process's child: it checks now and then that the study is still there.
          [[maybe_unused]] volatile std::uint64_t sink = 0;
          for (;;) {
            for (std::uint64_t x = 0; x < 200000000; ++x) sink = x;
            if (::kill(owner, 0) != 0) ::_exit(0);
          }
        }
        ::_exit(0);
      }
      if (child > 0) {
        ::waitpid(child, nullptr, 0);
        pid_t spinner = 0;
        if (::read(fds[0], &spinner, sizeof spinner) == sizeof spinner) pids_.push_back(spinner);
      }
    }
    ::close(fds[0]);
    ::close(fds[1]);
  }
  ~cpu_hog() { stop(); }
  void stop() {
    for (pid_t p : pids_) ::kill(p, SIGKILL);
    pids_.clear();
  }
  bool running() const { return !pids_.empty(); }

 private:
  std::vector<pid_t> pids_;
};

/// One run of the dynamic study: the job, and what it held over time.
struct dynamic_run {
  std::string name;
  actors::job_status end;
  double total_s = 0;
  double worker_seconds = 0;                    ///< workers held, integrated over the run
  std::vector<std::pair<double, int>> workers;  ///< (seconds since submit, workers) on change
};

/// Submits `yaml` with a program holding `hog` CPUs for `hog_s` seconds from the submit.
result<dynamic_run> run_with_hog(session& s, const std::string& yaml, const std::string& name,
                                 unsigned hog, double hog_s) {
  cpu_hog program(hog);
  // Submitted once the node sees the program (two heartbeats), as a job arriving on a busy
  // cluster would be.
  const double want = 0.5 * std::max(1u, std::thread::hardware_concurrency());
  for (int i = 0; i < 100; ++i) {
    auto ext = s.cpus_external();
    if (ext && *ext >= want) break;
    std::this_thread::sleep_for(100ms);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto since = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto id = s.submit(yaml, name);
  if (!id) return std::unexpected(id.error());
  dynamic_run run;
  run.name = name;
  double last = 0;
  int held = 0;
  for (;;) {
    std::this_thread::sleep_for(200ms);
    const double now = since();
    if (program.running() && now >= hog_s) {
      program.stop();
      say(coach::format("{}: the program ended at {:.1f} s", name, now));
    }
    auto st = s.status(*id);
    if (!st) return std::unexpected(st.error());
    const int workers = st->state == scheduler::job_state::running ? int(st->workers) : 0;
    run.worker_seconds += held * (now - last);
    last = now;
    if (workers != held || run.workers.empty()) run.workers.push_back({now, workers});
    held = workers;
    auto over = ended(*st);
    if (!over) return std::unexpected(over.error());
    if (!*over) continue;
    run.end = std::move(*st);
    run.total_s = now;
    return run;
  }
}

}  // namespace

int dynamic(session& s, const YAML::Node& base, const experiment_options& o) {
  // The program takes the host's CPUs for a while (three spinners a core); the static job is
  // sized for what is left then (1 worker), the elastic one may grow to a worker a core once it
  // ends.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const double hog_s = o.hog_s;
  if (auto r = s.set_policy("elastic-fifo"); !r) return say(r.error().message), 1;
  std::vector<dynamic_run> runs;
  for (const bool elastic : {false, true}) {
    YAML::Node n = YAML::Clone(base);
    const std::string name = elastic ? "elastic" : "static";
    n["name"] = name;
    n["epochs"] = o.epochs;
    n["backend"] = "cpu";
    n["shards"] = 1;
    if (o.train_limit > 0) n["dataset"]["train_limit"] = o.train_limit;
    if (elastic) {
      YAML::Node w;
      w["min"] = 1;
      w["max"] = o.max_workers > 0 ? o.max_workers : int(cores);  // a worker a core by default
      w["initial"] = 1;
      n["workers"] = w;
    } else {
      n["workers"] = 1;
    }
    YAML::Emitter e;
    e << n;
    auto run = run_with_hog(s, e.c_str(), name, 3 * cores, hog_s);
    if (!run) return say(run.error().message), 1;
    say(coach::format("{}: {:.1f} s, accuracy {:.4f}, {:.1f} worker-seconds", name, run->total_s,
                      run->end.test_accuracy, run->worker_seconds));
    runs.push_back(std::move(*run));
  }
  // The last epoch's accuracy swings by a point from one epoch to the next late in training
  // (docs/experiments.md): the mean of the last five is shown beside it.
  const auto last5 = [](const actors::job_status& st) {
    const auto& a = st.epoch_accuracy;
    const std::size_t n = std::min<std::size_t>(5, a.size());
    double sum = 0;
    for (std::size_t i = a.size() - n; i < a.size(); ++i) sum += a[i];
    return n ? sum / double(n) : st.test_accuracy;
  };
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : runs) {
    std::string held;
    for (const auto& [t, w] : r.workers)
      held += coach::format("{}{} at {:.0f} s", held.empty() ? "" : ", ", w, t);
    rows.push_back(
        {r.name, coach::format("{:.1f}", r.total_s), coach::format("{:.4f}", r.end.test_accuracy),
         coach::format("{:.4f}", last5(r.end)), coach::format("{:.1f}", r.worker_seconds), held});
  }
  auto table = ex::markdown_table({"job", "total s", "test accuracy", "mean of the last 5",
                                   "worker-seconds", "workers held (from submit)"},
                                  rows);
  const double gain = runs[0].total_s > 0 ? 1 - runs[1].total_s / runs[0].total_s : 0;
  table += coach::format(
      "\nA program held the host's CPUs ({} spinning processes) for the first {:.0f} s of each "
      "run. The elastic job finished {:.1f}% {}; accuracy {} points (mean of the last "
      "five epochs: {} points).\n",
      3 * cores, hog_s, 100 * std::abs(gain), gain >= 0 ? "sooner" : "later",
      coach::format("{}{:.2f}", runs[1].end.test_accuracy >= runs[0].end.test_accuracy ? "+" : "-",
                    100 * std::abs(runs[1].end.test_accuracy - runs[0].end.test_accuracy)),
      coach::format("{}{:.2f}", last5(runs[1].end) >= last5(runs[0].end) ? "+" : "-",
                    100 * std::abs(last5(runs[1].end) - last5(runs[0].end))));
  std::printf("%s", table.c_str());
  write(fs::path(o.out) / "dynamic.md", table);
  // Epoch times of both, epoch by epoch.
  std::size_t epochs = 0;
  for (const auto& r : runs) epochs = std::max(epochs, r.end.epoch_seconds.size());
  std::vector<std::string> labels;
  for (std::size_t e = 0; e < epochs; ++e) labels.push_back(std::to_string(e + 1));
  std::vector<ex::chart_series> cs;
  for (const auto& r : runs) {
    cs.push_back({r.name, {}});
    for (std::size_t e = 0; e < epochs; ++e)
      cs.back().y.push_back(e < r.end.epoch_seconds.size()
                                ? std::optional<double>(r.end.epoch_seconds[e])
                                : std::nullopt);
  }
  write(
      fs::path(o.out) / "dynamic.svg",
      ex::line_chart_svg(coach::format("Epoch times; a program holds the CPUs for {:.0f} s", hog_s),
                         "epoch", "epoch (s)", labels, cs));
  return 0;
}

}  // namespace coach::apps::experiment
