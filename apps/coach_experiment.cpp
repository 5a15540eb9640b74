// `coach experiment STUDY` (apps/coach_experiment.hpp): runs real training jobs on a cluster and
// writes what they measured.
//
//   scaling     a grid of (workers, shards), each with 1, 2 and 3 copies of the job at once,
//               spread over the nodes, and each alone on one node: epoch time and speed-up.
//   prediction  the grid alone (one job at a time); the performance model fitted on its first
//               half predicts the rest: error and regret (scheduler/experiment.hpp).
//   dynamic     a static and an elastic job, each while a program that is not Coach's holds
//               the host's CPUs for a while: time, accuracy, workers held.
//   policies    five elastic jobs 1 s apart under fifo, elastic-fifo, round-robin and coach,
//               set live between the runs: makespan, mean turnaround and wait.

#include "coach_experiment.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "actors/api_client.hpp"
#include "actors/curve_keys.hpp"
#include "common/format.hpp"
#include "common/json.hpp"
#include "scheduler/experiment.hpp"

extern char** environ;

namespace coach::apps {
namespace {

namespace fs = std::filesystem;
namespace ex = scheduler::experiment;
using namespace std::chrono_literals;

void say(const std::string& line) {
  std::fprintf(stderr, "coach: experiment: %s\n", line.c_str());
}

/// A free TCP port on 127.0.0.1 (bound once by the kernel's choice, then released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

/// coach-nodes started for the study on this machine, stopped when it ends.
class local_cluster {
 public:
  ~local_cluster() {
    for (pid_t p : pids_) ::kill(p, SIGTERM);
    for (pid_t p : pids_) ::waitpid(p, nullptr, 0);
  }

  /// Starts `n` nodes of `cpus` CPU slots each, the first the scheduler; logs in `dir`. With
  /// `key_file`, the nodes use it (else they read $COACH_KEY as any coach-node does).
  result<std::string> start(int n, int cpus, const fs::path& dir, const std::string& key_file,
                            const std::vector<std::string>& scheduler_args = {}) {
    std::error_code ec;
    const auto self = fs::read_symlink("/proc/self/exe", ec);
    const auto node = self.parent_path() / "coach-node";
    if (ec || !fs::exists(node))
      return fail(errc::not_found, "cannot find coach-node beside this program ({})",
                  node.string());
    const std::string at = coach::format("127.0.0.1:{}", free_port());
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> args{
          node.string(), "--exit-with-parent",
          "--listen",    i == 0 ? "tcp://" + at : coach::format("tcp://127.0.0.1:{}", free_port()),
          "--name",      coach::format("exp-{}", i + 1),
          "--cpus",      std::to_string(cpus),
          "--heartbeat", "0.25",
          "--log-file",  (dir / coach::format("node-{}.log", i + 1)).string()};
      if (!key_file.empty()) {
        args.push_back("--key");
        args.push_back(key_file);
      }
      if (i == 0) {
        for (const char* a : {"--scheduler", "--store", "", "--policy", "fifo"}) args.push_back(a);
        args.insert(args.end(), scheduler_args.begin(), scheduler_args.end());
      } else {
        args.push_back("--join");
        args.push_back(at);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      pid_t pid = -1;
      if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0)
        return fail(errc::io_error, "cannot start {}", node.string());
      pids_.push_back(pid);
    }
    return at;
  }

 private:
  std::vector<pid_t> pids_;
};

/// Whether job `st` has ended: false while it is queued, running or suspended, true once it
/// succeeded, an error naming it when it ended otherwise (a study needs every job).
result<bool> ended(const actors::job_status& st) {
  using scheduler::job_state;
  if (st.state == job_state::running || st.state == job_state::queued ||
      st.state == job_state::suspended)
    return false;
  if (st.state != job_state::succeeded)
    return fail(errc::io_error, "job {} '{}' {}: {}", st.job, st.name, to_string(st.state),
                st.error);
  return true;
}

/// The study's connection to the scheduler.
class session {
 public:
  static result<session> open(const std::string& at, actors::transport_security security) {
    auto c = actors::api_client::open(at, std::move(security));
    if (!c) return std::unexpected(c.error());
    session s;
    s.client_ = std::move(*c);
    s.at_ = at;
    return s;
  }

  /// Waits (up to 60 s) until `n` nodes are alive.
  result<void> await_nodes(std::size_t n) {
    for (int i = 0; i < 240; ++i) {
      auto r = client_->call(actors::nodes_request{}, 2s);
      if (r && !r->failure)
        if (const auto* nodes = std::get_if<actors::nodes_reply>(&r->body)) {
          std::size_t alive = 0;
          for (const auto& node : nodes->nodes) alive += node.alive;
          if (alive >= n) return {};
        }
      std::this_thread::sleep_for(250ms);
    }
    return fail(errc::io_error, "{} node(s) did not come up at {} within 60 s", n, at_);
  }

  result<std::uint64_t> submit(const std::string& yaml, const std::string& name) {
    actors::submit_request req;
    req.spec_yaml = yaml;
    req.source_name = name + ".yaml";
    std::error_code ec;
    req.base_dir = fs::current_path(ec).string();
    req.token = std::random_device{}() * 0x100000000ull + std::random_device{}() + 1;
    auto r = client_->call(req, 120s, 2s);
    if (!r) return std::unexpected(r.error());
    if (r->failure) return std::unexpected(*r->failure);
    const auto* sub = std::get_if<actors::submit_reply>(&r->body);
    if (!sub) return fail(errc::protocol_error, "the scheduler's reply has no job id");
    return sub->job;
  }

  result<actors::job_status> status(std::uint64_t job) {
    auto r = client_->call(actors::status_request{job}, 10s, 2s);
    if (!r) return std::unexpected(r.error());
    if (r->failure) return std::unexpected(*r->failure);
    const auto* st = std::get_if<actors::status_reply>(&r->body);
    if (!st || st->jobs.size() != 1) return fail(errc::protocol_error, "no status of job {}", job);
    return st->jobs.front();
  }

  /// The CPUs programs that are not Coach's keep busy on the first node listed.
  result<double> cpus_external() {
    auto r = client_->call(actors::nodes_request{}, 5s);
    if (!r) return std::unexpected(r.error());
    if (r->failure) return std::unexpected(*r->failure);
    const auto* nodes = std::get_if<actors::nodes_reply>(&r->body);
    if (!nodes || nodes->nodes.empty()) return fail(errc::protocol_error, "no node listed");
    return nodes->nodes.front().last.resources.cpus_external;
  }

  result<void> set_policy(const std::string& name) {
    actors::policy_request req;
    req.set = name;
    auto r = client_->call(req, 10s);
    if (!r) return std::unexpected(r.error());
    if (r->failure) return std::unexpected(*r->failure);
    return {};
  }

  /// Waits for every job of `jobs` to end; errors when one does not succeed.
  result<std::vector<actors::job_status>> wait_all(const std::vector<std::uint64_t>& jobs) {
    std::vector<actors::job_status> out(jobs.size());
    std::vector<bool> done(jobs.size(), false);
    for (std::size_t left = jobs.size(); left > 0;) {
      std::this_thread::sleep_for(250ms);
      for (std::size_t i = 0; i < jobs.size(); ++i) {
        if (done[i]) continue;
        auto st = status(jobs[i]);
        if (!st) return std::unexpected(st.error());
        auto over = ended(*st);
        if (!over) return std::unexpected(over.error());
        if (!*over) continue;
        out[i] = std::move(*st);
        done[i] = true;
        --left;
      }
    }
    return out;
  }

 private:
  std::unique_ptr<actors::api_client> client_;
  std::string at_;
};

/// The study's job: the base spec with its name, epochs, allocation (fixed: no policy resizes
/// it) and placement set.
struct job_shape {
  int workers = 1;
  int shards = 1;
  std::string placement = "spread";
};

result<std::string> job_yaml(const YAML::Node& base, const experiment_options& o,
                             const std::string& name, const job_shape& s) {
  YAML::Node n = YAML::Clone(base);
  n["name"] = name;
  n["epochs"] = o.epochs;
  n["workers"] = s.workers;
  n["shards"] = s.shards;
  n["placement"] = s.placement;
  n["backend"] = "cpu";
  if (o.train_limit > 0) n["dataset"]["train_limit"] = o.train_limit;
  YAML::Emitter e;
  e << n;
  if (!e.good())
    return fail(errc::invalid_argument, "cannot write the job spec: {}", e.GetLastError());
  return std::string(e.c_str());
}

/// Runs `copies` copies of one shape at once; their typical epoch times (ex::typical_epoch).
result<std::vector<double>> run_shape(session& s, const YAML::Node& base,
                                      const experiment_options& o, const job_shape& shape,
                                      int copies) {
  std::vector<std::uint64_t> jobs;
  for (int c = 0; c < copies; ++c) {
    const auto name = coach::format("{}-w{}-p{}-x{}-{}", shape.placement, shape.workers,
                                    shape.shards, copies, c + 1);
    auto yaml = job_yaml(base, o, name, shape);
    if (!yaml) return std::unexpected(yaml.error());
    auto id = s.submit(*yaml, name);
    if (!id) return std::unexpected(id.error());
    jobs.push_back(*id);
  }
  auto done = s.wait_all(jobs);
  if (!done) return std::unexpected(done.error());
  std::vector<double> out;
  for (const auto& st : *done)
    if (auto t = ex::typical_epoch(st.epoch_seconds)) out.push_back(*t);
  return out;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

std::string fixed(double v) {
  return coach::format("{:.3f}", v);
}

/// 1-4 workers with 1 and 2 shards, in an order that covers the range first (its corners, then
/// between them), so that the prediction study's first half spans what the rest asks about.
const std::vector<job_shape> grid = {{1, 1}, {4, 2}, {1, 2}, {4, 1},
                                     {2, 1}, {3, 2}, {3, 1}, {2, 2}};

std::string shape_label(const job_shape& s) {
  return coach::format("{}w/{}p", s.workers, s.shards);
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
  say("wrote " + p.string());
}

/// The grid with `copies` jobs at once (and, for `single`, each shape on one node as well).
/// Named series of epoch times, one value per grid point, in the order measured.
using grid_series = std::vector<std::pair<std::string, std::vector<std::optional<double>>>>;

result<grid_series> measure_grid(session& s, const YAML::Node& base, const experiment_options& o,
                                 const std::vector<int>& concurrency, bool single) {
  grid_series series;
  for (int copies : concurrency) {
    series.emplace_back(coach::format("{} job(s) at once", copies),
                        std::vector<std::optional<double>>{});
    auto& row = series.back().second;
    for (const auto& shape : grid) {
      // --repeat runs of the shape, one after the other: the median of their means (this
      // machine's noise is tens of percent from one run to the next).
      std::vector<double> runs;
      for (int k = 0; k < std::max(1, o.repeat); ++k) {
        auto t = run_shape(s, base, o, shape, copies);
        if (!t) return std::unexpected(t.error());
        runs.push_back(mean(*t));
      }
      std::sort(runs.begin(), runs.end());
      const double m = runs.size() % 2 ? runs[runs.size() / 2]
                                       : (runs[runs.size() / 2 - 1] + runs[runs.size() / 2]) / 2;
      row.push_back(m);
      say(coach::format("{} x{}: epoch {:.3f} s", shape_label(shape), copies, m));
    }
  }
  if (single) {
    series.emplace_back("1 job on one node", std::vector<std::optional<double>>{});
    auto& row = series.back().second;
    for (auto shape : grid) {
      shape.placement = "best-fit";  // every part on the first node with room: one node
      auto t = run_shape(s, base, o, shape, 1);
      if (!t) return std::unexpected(t.error());
      row.push_back(mean(*t));
      say(coach::format("{} on one node: epoch {:.3f} s", shape_label(shape), mean(*t)));
    }
  }
  return series;
}

int scaling(session& s, const YAML::Node& base, const experiment_options& o) {
  auto series = measure_grid(s, base, o, {1, 2, 3}, true);
  if (!series) return say(series.error().message), 1;
  std::vector<std::string> header{"allocation"};
  for (const auto& [name, _] : *series) header.push_back(name + ": epoch s (speed-up)");
  // Rows and chart by workers, then shards (the grid is measured in another order).
  std::vector<std::size_t> order(grid.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [](std::size_t a, std::size_t b) {
    return std::pair(grid[a].workers, grid[a].shards) < std::pair(grid[b].workers, grid[b].shards);
  });
  const std::size_t base_point = order.front();  // 1 worker, 1 shard: the speed-ups' base
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i : order) {
    std::vector<std::string> row{shape_label(grid[i])};
    for (const auto& [name, ys] : *series) {
      const auto& y = ys[i];
      const auto& first = ys[base_point];
      row.push_back(y && first && *y > 0 ? coach::format("{} ({:.2f}x)", fixed(*y), *first / *y)
                                         : std::string("-"));
    }
    rows.push_back(row);
  }
  const auto table = ex::markdown_table(header, rows);
  std::printf("%s", table.c_str());
  write(fs::path(o.out) / "scaling.md", table);
  std::vector<ex::chart_series> cs;
  for (const auto& [name, ys] : *series) {
    cs.push_back({name, {}});
    for (std::size_t i : order) cs.back().y.push_back(ys[i]);
  }
  std::vector<std::string> labels;
  for (std::size_t i : order) labels.push_back(shape_label(grid[i]));
  write(
      fs::path(o.out) / "scaling.svg",
      ex::line_chart_svg("Epoch time by allocation", "workers / shards", "epoch (s)", labels, cs));
  return 0;
}

int prediction(session& s, const YAML::Node& base, const experiment_options& o) {
  auto series = measure_grid(s, base, o, {1}, false);
  if (!series) return say(series.error().message), 1;
  const auto& ys = series->front().second;
  std::vector<ex::measured_point> points;
  for (std::size_t i = 0; i < grid.size(); ++i)
    points.push_back({grid[i].workers, grid[i].shards, ys[i].value_or(0)});
  const std::size_t k = (points.size() + 1) / 2;
  const auto r = ex::predict_from_first(points, k);
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : r.points)
    rows.push_back(
        {coach::format("{}w/{}p", p.measured.workers, p.measured.shards), fixed(p.measured.epoch_s),
         fixed(p.predicted_s),
         p.fitted ? "fitted"
                  : coach::format("{:.1f}%", 100 * std::abs(p.predicted_s - p.measured.epoch_s) /
                                                 p.measured.epoch_s)});
  auto table = ex::markdown_table({"allocation", "measured epoch s", "predicted s", "error"}, rows);
  table += coach::format(
      "\nFitted on the first {} of {} points. Mean error on the others: **{:.1f}%**. Fastest "
      "measured: {}w/{}p ({:.3f} s); predicted fastest: {}w/{}p ({:.3f} s measured): regret "
      "**{:.1f}%**.\n",
      k, points.size(), 100 * r.mean_abs_rel_error, r.best.workers, r.best.shards, r.best.epoch_s,
      r.predicted_best.workers, r.predicted_best.shards, r.predicted_best.epoch_s, 100 * r.regret);
  std::printf("%s", table.c_str());
  write(fs::path(o.out) / "prediction.md", table);
  std::vector<std::optional<double>> measured, predicted;
  std::vector<std::string> labels;
  for (const auto& p : r.points) {
    measured.push_back(p.measured.epoch_s);
    predicted.push_back(p.predicted_s);
    labels.push_back(coach::format("{}w/{}p", p.measured.workers, p.measured.shards));
  }
  write(fs::path(o.out) / "prediction.svg",
        ex::line_chart_svg(coach::format("Measured and predicted (fitted on the first {})", k),
                           "workers / shards", "epoch (s)", labels,
                           {{"measured", measured}, {"predicted", predicted}}));
  return 0;
}

/// A program that is not Coach's keeping CPUs busy: `n` spinning processes. Not this
/// process's descendants, nor named coach...: a node counts those as Coach's own
/// (scheduler/own_cpu.hpp). Each is a grandchild whose parent exits at once (init adopts it),
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
      "run. The elastic job finished {:.1f}% sooner; accuracy {} points (mean of the last "
      "five epochs: {} points).\n",
      3 * cores, hog_s, 100 * gain,
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

/// CPU slots of each local node: --cpus, else the study's. dynamic: near the host's cores, so
/// that what the program takes is what the jobs lack; policies: 2, so that the five jobs
/// (12 workers asked) contend for the 6 slots of three nodes; else 8.
int study_cpus(const experiment_options& o) {
  if (o.cpus > 0) return o.cpus;
  if (o.study == "dynamic") return int(std::max(1u, std::thread::hardware_concurrency())) + 2;
  return o.study == "policies" ? 2 : 8;
}

/// The policies study's jobs: (name, epochs, min, max, initial workers), submitted 1 s apart.
struct policy_job {
  std::string name;
  int epochs;
  int min, max, initial;
};

/// Runs the sequence under `policy`; each job's times from the first submit.
result<std::vector<ex::job_times>> run_sequence(session& s, const YAML::Node& base,
                                                const experiment_options& o,
                                                const std::string& policy,
                                                const std::vector<policy_job>& seq) {
  if (auto r = s.set_policy(policy); !r) return std::unexpected(r.error());
  const auto t0 = std::chrono::steady_clock::now();
  const auto since = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<ex::job_times> times(seq.size());
  std::vector<std::uint64_t> ids(seq.size(), 0);
  std::vector<bool> started(seq.size(), false), over(seq.size(), false);
  std::size_t next = 0, left = seq.size();
  while (left > 0) {
    if (next < seq.size() && since() >= double(next)) {
      const auto& j = seq[next];
      YAML::Node n = YAML::Clone(base);
      n["name"] = coach::format("{}-{}", policy, j.name);
      n["epochs"] = j.epochs;
      n["backend"] = "cpu";
      n["shards"] = 1;
      YAML::Node w;
      w["min"] = j.min;
      w["max"] = j.max;
      w["initial"] = j.initial;
      n["workers"] = w;
      if (o.train_limit > 0) n["dataset"]["train_limit"] = o.train_limit;
      YAML::Emitter e;
      e << n;
      times[next].name = j.name;
      times[next].submitted = since();
      auto id = s.submit(e.c_str(), j.name);
      if (!id) return std::unexpected(id.error());
      ids[next++] = *id;
    }
    std::this_thread::sleep_for(100ms);
    for (std::size_t i = 0; i < next; ++i) {
      if (over[i]) continue;
      auto st = s.status(ids[i]);
      if (!st) return std::unexpected(st.error());
      const double now = since();
      if (!started[i] && (st->state == scheduler::job_state::running || st->epochs_done > 0)) {
        started[i] = true;
        times[i].started = now;
      }
      auto end = ended(*st);
      if (!end) return std::unexpected(end.error());
      if (!*end) continue;
      if (!started[i]) times[i].started = now;
      times[i].finished = now;
      over[i] = true;
      --left;
    }
  }
  return times;
}

int policies(session& s, const YAML::Node& base, const experiment_options& o) {
  const int e = o.epochs;
  const std::vector<policy_job> seq{{"a", 2 * e, 1, 4, 3},
                                    {"b", e, 1, 2, 2},
                                    {"c", 2 * e, 1, 4, 2},
                                    {"d", e, 1, 3, 2},
                                    {"e", 2 * e, 1, 4, 3}};
  std::vector<std::vector<std::string>> rows;
  std::vector<ex::chart_series> cs;
  for (const char* policy : {"fifo", "elastic-fifo", "round-robin", "coach"}) {
    auto times = run_sequence(s, base, o, policy, seq);
    if (!times) return say(times.error().message), 1;
    const auto f = ex::policy_metrics(*times);
    say(coach::format("{}: makespan {:.1f} s, mean turnaround {:.1f} s, mean wait {:.1f} s", policy,
                      f.makespan_s, f.mean_turnaround_s, f.mean_wait_s));
    rows.push_back({policy, coach::format("{:.1f}", f.makespan_s),
                    coach::format("{:.1f}", f.mean_turnaround_s),
                    coach::format("{:.1f}", f.mean_wait_s)});
    cs.push_back({policy, {}});
    for (const auto& t : *times) cs.back().y.push_back(t.finished - t.submitted);
  }
  auto table =
      ex::markdown_table({"policy", "makespan s", "mean turnaround s", "mean wait s"}, rows);
  table += coach::format(
      "\nFive jobs submitted 1 s apart (epochs {}, {}, {}, {}, {}; workers min 1, max "
      "4/2/4/3/4, asked 3/2/2/2/3; 1 shard each; {}), the same sequence under each policy, "
      "swapped between runs.\n",
      2 * e, e, 2 * e, e, 2 * e,
      o.at.empty() ? coach::format("{} local nodes of {} CPU slots", o.local, study_cpus(o))
                   : "the cluster at " + o.at);
  std::printf("%s", table.c_str());
  write(fs::path(o.out) / "policies.md", table);
  std::vector<std::string> labels;
  for (const auto& j : seq) labels.push_back("job " + j.name);
  write(fs::path(o.out) / "policies.svg",
        ex::line_chart_svg("Turnaround of each job by policy", "job (in submission order)",
                           "turnaround (s)", labels, cs));
  return 0;
}

}  // namespace

int run_experiment(const experiment_options& o) {
  if (o.study != "scaling" && o.study != "prediction" && o.study != "dynamic" &&
      o.study != "policies") {
    std::fprintf(stderr,
                 "coach: experiment: unknown study '%s' (known: scaling, prediction, dynamic, "
                 "policies)\n",
                 o.study.c_str());
    return 2;
  }
  const int cpus = study_cpus(o);
  YAML::Node base;
  try {
    base = YAML::LoadFile(o.spec);
  } catch (const YAML::Exception& e) {
    std::fprintf(stderr, "coach: experiment: %s: %s\n", o.spec.c_str(), e.what());
    return 2;
  }
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) {
    std::fprintf(stderr, "coach: experiment: cannot create %s: %s\n", o.out.c_str(),
                 ec.message().c_str());
    return 2;
  }
  auto security = actors::load_security(o.key_file, "", o.server_key_file);
  if (!security) return say(security.error().message), 2;
  local_cluster cluster;
  std::string at = o.at;
  if (at.empty()) {
    const auto logs = fs::path(o.out) / "logs";
    fs::create_directories(logs, ec);
    // round-robin's turns: a few seconds, as the study's jobs last seconds.
    const std::vector<std::string> sched_args{"--rr-slice", "5"};
    auto started =
        cluster.start(o.study == "dynamic" ? 1 : o.local, cpus, logs, o.key_file, sched_args);
    if (!started) return say(started.error().message), 1;
    at = *started;
    say(coach::format("{} coach-node(s) of {} CPU slots on this machine, scheduler at {}",
                      o.study == "dynamic" ? 1 : o.local, cpus, at));
  }
  auto s = session::open(at, std::move(*security));
  if (!s) return say(s.error().message), 2;
  if (auto up = s->await_nodes(!o.at.empty() || o.study == "dynamic" ? 1 : std::size_t(o.local));
      !up)
    return say(up.error().message), 1;
  if (o.study == "dynamic") return dynamic(*s, base, o);
  if (o.study == "policies") return policies(*s, base, o);
  return o.study == "scaling" ? scaling(*s, base, o) : prediction(*s, base, o);
}

}  // namespace coach::apps
