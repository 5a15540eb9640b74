// rescale_bench: what changing a running job costs, measured between processes on loopback
// (docs/performance.md, "Rescale"). Three coach-node processes (node-a runs the scheduler and
// the job masters) run digits jobs; the bench asks for changes through the job API as `coach
// rescale` and `coach migrate` do, and reads the job master's timing of each change
// (scheduler::change_report, in `coach status`) once the job has ended:
//
//   join:     a job of 1 worker grows to 2, 3, 4 workers; the time from each request to the
//             first step with the new worker applied (join_ms).
//   migrate:  a job of 1 worker (node-a) and 1 shard (node-b) whose model has 4, 64, 256 MiB of
//             parameters (plain SGD: the shard's state is its values) moves the shard whole to
//             node-c, back to node-b, and so on (so the steps before and after a move are alike:
//             the shard is never beside the worker); each move is asked for once the one before
//             took effect and the job trained 6 more steps. The pause is the gap between the steps
//             around the move less the median step before it, next to the transfer time of the
//             shard's bytes at the throughput of raw ZeroMQ between two processes measured in the
//             same run (an echo of the same size, sent without a copy: one way takes half a round
//             trip). The goal, for EVERY move: pause <= transfer + 20 ms ("ok" per move).
//             spread_ms: the longest of the steps before the request less their median, how
//             much steps varied with no change at all (the noise a pause is read against).
//   throughput: samples/s over up to 20 steps before each change and after it.
//
// This program, its echo and the nodes run with the nodes' memory policy (common/huge_pages.hpp:
// huge pages unless --no-huge-pages, freed memory kept), so the raw echo meets the memory the
// nodes do. The scheduler gives a node 30 s without heartbeats (the default is 5 s): on the VMs
// measured, a node starting the 256 MiB job on memory the host has dropped spends ~10 s building
// the initial parameters on its agent's thread (not what is measured here; docs/performance.md).
//
// With --json, one JSON object on the last line:
//   {"join_ms", "joins_ms": [...], "migrations": [{"size_bytes", "pause_ms", "transfer_ms",
//    "handover_ms", "gap_ms", "step_ms", "link_gbps", "pauses_ms": [...]}] (the median move of
//    each size), "moves": [{"size_bytes", "move", "pause_ms", "transfer_ms", "bound_ms", "ok",
//    "gap_ms", "step_ms", "step_spread_ms", "handover_ms", "prepare_ms"}] (every move),
//    "every_move_ok", "throughput": {...}}
#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/api_client.hpp"
#include "bench/bench_api.hpp"
#include "bench/bench_processes.hpp"
#include "common/format.hpp"
#include "common/huge_pages.hpp"
#include "common/json.hpp"
#include "report/job_report.hpp"

namespace {

using namespace coach;
using namespace coach::bench;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
namespace fs = std::filesystem;

/// One-way throughput (GB/s) of raw ZeroMQ between two processes for messages of `bytes`: the
/// median round trip of an echo, halved.
double link_gbps(std::size_t bytes) {
  std::vector<child> echo;
  const std::string addr = free_address();
  echo.push_back(spawn("/proc/self/exe", {"--serve-echo", addr}));
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect(addr);
  std::vector<char> payload(bytes, 'x');
  // Sent without a copy, as a shard sends its values: ZeroMQ is done with the payload once the
  // echo has come back.
  auto message = [&] { return zmq::message_t(payload.data(), payload.size(), nullptr, nullptr); };
  zmq::message_t reply;
  s.send(message(), zmq::send_flags::none);  // warm up; waits for the bind
  (void)s.recv(reply);
  std::vector<double> rtt;
  const auto until = clock_type::now() + 1s;
  while (rtt.size() < 5 || (clock_type::now() < until && rtt.size() < 200)) {
    const auto t0 = clock_type::now();
    s.send(message(), zmq::send_flags::none);
    (void)s.recv(reply);
    rtt.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  s.close();
  for (auto& c : echo) ::kill(c.pid, SIGKILL), ::waitpid(c.pid, nullptr, 0);
  std::sort(rtt.begin(), rtt.end());
  return double(bytes) / (rtt[rtt.size() / 2] / 2) / 1e9;
}

// --- the cluster, through the job API -----------------------------------------------------

struct cluster {
  std::string at;
  std::vector<child> nodes;
  std::unique_ptr<actors::api_client> api;
  fs::path dir;

  result<actors::api_reply> call(const actors::api_request& r) { return api_call(*api, r); }
  result<actors::job_status> status(std::uint64_t job) { return job_status_of(*api, job); }

  /// Samples trained so far (every epoch).
  result<std::uint64_t> progress(std::uint64_t job) {
    auto s = status(job);
    if (!s) return std::unexpected(s.error());
    std::uint64_t n = s->samples_done;
    for (auto e : s->epoch_samples) n += e;
    if (s->state != actors::job_state::running && s->state != actors::job_state::queued)
      return fail(errc::internal, "job {} ended ({}): {}", job, to_string(s->state), s->error);
    return n;
  }

  /// Waits until job has trained `samples` more samples than `from`.
  result<void> train_past(std::uint64_t job, std::uint64_t samples, std::chrono::seconds limit) {
    const auto deadline = clock_type::now() + limit;
    std::optional<std::uint64_t> start;
    while (clock_type::now() < deadline) {
      auto n = progress(job);
      if (!n) return std::unexpected(n.error());
      if (!start) start = *n;
      if (*n >= *start + samples) return {};
      std::this_thread::sleep_for(20ms);
    }
    return fail(errc::internal, "job {} made no progress for {} s", job, limit.count());
  }

  /// Waits until `n` changes of the job took effect (their first step applied).
  result<void> changes_in_effect(std::uint64_t job, std::uint32_t n, std::chrono::seconds limit) {
    const auto deadline = clock_type::now() + limit;
    while (clock_type::now() < deadline) {
      auto s = status(job);
      if (!s) return std::unexpected(s.error());
      if (s->changes_done >= n) return {};
      if (s->state != actors::job_state::running && s->state != actors::job_state::queued)
        return fail(errc::internal, "job {} ended ({}): {}", job, to_string(s->state), s->error);
      std::this_thread::sleep_for(20ms);
    }
    return fail(errc::internal, "job {}: change {} did not take effect in {} s", job, n,
                limit.count());
  }

  /// Cancels the job and waits for its end; its final status (with the changes).
  result<actors::job_status> finish(std::uint64_t job) {
    if (auto c = call(actors::cancel_request{job}); !c) return std::unexpected(c.error());
    for (int i = 0; i < 1200; ++i) {
      auto s = status(job);
      if (!s) return s;
      if (s->state != actors::job_state::running && s->state != actors::job_state::queued) return s;
      std::this_thread::sleep_for(50ms);
    }
    return fail(errc::internal, "job {} did not stop", job);
  }

  result<std::uint64_t> submit(const std::string& spec_yaml) {
    auto r = call(actors::submit_request{spec_yaml, "rescale_bench.yaml", dir.string(), 0, 0});
    if (!r) return std::unexpected(r.error());
    return std::get<actors::submit_reply>(r->body).job;
  }
};

/// coach-node beside this program when it is there (a copied set of programs, as
/// ../shared/tools/device-bundle makes), else the build's.
std::string node_program() {
  std::error_code ec;
  const auto beside = fs::read_symlink("/proc/self/exe", ec).parent_path() / "coach-node";
  if (!ec && fs::exists(beside)) return beside.string();
  return std::string(COACH_BINARY_DIR) + "/apps/coach-node";
}

/// The digits: data/digits.csv.gz of the working directory when it has one, else the source
/// tree's.
std::string digits_path() {
  if (fs::exists("data/digits.csv.gz")) return fs::absolute("data/digits.csv.gz").string();
  return std::string(COACH_SOURCE_DIR) + "/data/digits.csv.gz";
}

result<cluster> start_cluster(const fs::path& dir) {
  cluster c;
  c.dir = dir;
  c.at = free_address();
  const std::string node = node_program();
  c.nodes.push_back(
      spawn(node,
            // The bench moves the shard itself: dltap's live rebalancing
            // would move it back beside the worker between its moves.
            {"--listen", c.at, "--scheduler", "--store", "", "--name", "node-a", "--heartbeat",
             "0.25", "--node-timeout", "30", "--rebalance-interval", "0", "--exit-with-parent"},
            dir / "node-a.log"));
  for (const char* name : {"node-b", "node-c"})
    c.nodes.push_back(spawn(node,
                            {"--listen", free_address(), "--join", c.at, "--name", name,
                             "--heartbeat", "0.25", "--exit-with-parent"},
                            dir / (std::string(name) + ".log")));
  auto api = actors::api_client::open(c.at);
  if (!api) return std::unexpected(api.error());
  c.api = std::move(*api);
  for (int i = 0; i < 100; ++i) {
    auto r = c.api->call(actors::nodes_request{}, 2s);
    if (r && !r->failure) {
      const auto& nodes = std::get<actors::nodes_reply>(r->body).nodes;
      if (std::count_if(nodes.begin(), nodes.end(), [](auto& n) { return n.alive; }) == 3) return c;
    }
    std::this_thread::sleep_for(100ms);
  }
  return fail(errc::internal, "the three coach-node processes did not come up (logs in {})",
              dir.string());
}

std::string digits_spec(std::size_t hidden, int batch, const char* optimizer) {
  return coach::format(
      "name: rescale-bench\n"
      "dataset: {{format: csv, path: {}, test_fraction: 0.2}}\n"
      "model: {{type: mlp, hidden: [{}], activation: relu}}\n"
      "optimizer: {}\n"
      "batch_size: {}\nepochs: 100000\nseed: 3\n"
      "workers: {{min: 1, max: 4, initial: 1}}\nshards: {{min: 1, max: 4, initial: 1}}\n",
      digits_path(), hidden, optimizer, batch);
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

coach::json num(double v) {
  return coach::json_figure(v);
}

struct migration {
  std::size_t size_bytes = 0;
  double link_gbps = 0;
  double transfer_ms = 0;                      ///< size / link throughput
  std::vector<scheduler::change_report> reps;  ///< each migration of this size
  scheduler::change_report rep;                ///< the one of median pause
};

/// The goal for one move of a shard of this size: its pause at most the transfer time + 20 ms.
double bound_ms(const migration& m) {
  return m.transfer_ms + 20;
}
/// Whether a move met it (a pause that could not be measured did not).
bool within(const migration& m, const scheduler::change_report& r) {
  return r.pause_ms >= 0 && r.pause_ms <= bound_ms(m);
}

int run(const std::vector<std::size_t>& sizes_mib, int joins, int repeat, bool json, bool keep) {
  const fs::path dir =
      fs::temp_directory_path() / ("coach-rescale-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto c = start_cluster(dir);
  if (!c) {
    std::fprintf(stderr, "rescale_bench: %s\n", c.error().message.c_str());
    return 1;
  }
  auto fail_with = [&](const coach::error& e) {
    std::fprintf(stderr, "rescale_bench: %s (node logs in %s)\n", e.message.c_str(),
                 dir.string().c_str());
    stop(c->nodes);
    return 1;
  };

  // Joins: 1 -> 2 -> ... workers, a few steps apart.
  std::vector<scheduler::change_report> join_reports;
  {
    auto job = c->submit(digits_spec(64, 32, "{type: sgd, learning_rate: 0.05}"));
    if (!job) return fail_with(job.error());
    if (auto ok = c->train_past(*job, 32 * 30, 60s); !ok) return fail_with(ok.error());
    for (int n = 2; n <= 1 + joins; ++n) {
      auto r = c->call(actors::rescale_request{*job, std::uint32_t(n), 0});
      if (!r) return fail_with(r.error());
      if (auto ok = c->train_past(*job, std::uint64_t(32 * n * 30), 60s); !ok)
        return fail_with(ok.error());
    }
    auto end = c->finish(*job);
    if (!end) return fail_with(end.error());
    join_reports = end->changes;
  }
  std::vector<double> joins_ms;
  for (const auto& r : join_reports) joins_ms.push_back(r.join_ms);
  // The table goes to stdout, or to stderr with --json (the JSON is then all of stdout).
  FILE* table = json ? stderr : stdout;
  std::fprintf(table, "%-12s %10s %12s %12s\n", "change", "join_ms", "before_sps", "after_sps");
  for (const auto& r : join_reports)
    std::fprintf(table, "%-12s %10.2f %12.0f %12.0f\n", r.what.c_str(), r.join_ms,
                 r.samples_per_s_before, r.samples_per_s_after);

  // Migrations of a shard of each size between node-b and node-c (the worker is on node-a).
  std::vector<migration> migrations;
  for (const auto mib : sizes_mib) {
    const std::size_t floats = mib << 18;                                     // MiB of f32
    const std::size_t hidden = std::max<std::size_t>(1, (floats - 10) / 75);  // 64-H-10 MLP
    migration m;
    m.size_bytes = (75 * hidden + 10) * sizeof(float);
    m.link_gbps = link_gbps(m.size_bytes);
    m.transfer_ms = double(m.size_bytes) / (m.link_gbps * 1e9) * 1e3;
    auto job = c->submit(digits_spec(hidden, 8, "{type: sgd, learning_rate: 0.01}"));
    if (!job) return fail_with(job.error());
    if (auto ok = c->train_past(*job, 8 * 6, 300s); !ok) return fail_with(ok.error());
    // Shard i moves whole to a new shard i + 1, alternately on node-c and node-b: every move
    // crosses processes and every step pushes and pulls over a socket.
    for (int i = 0; i < repeat; ++i) {
      auto r =
          c->call(actors::migrate_request{*job, std::uint32_t(i), i % 2 ? "node-b" : "node-c"});
      if (!r) return fail_with(r.error());
      // The new shard starts first (its node warms the memory the shard will arrive in) and
      // the move takes the next step boundary after that: the next one is asked for once this
      // one took effect and the job trained 6 steps more.
      if (auto ok = c->changes_in_effect(*job, std::uint32_t(i + 1), 300s); !ok)
        return fail_with(ok.error());
      if (auto ok = c->train_past(*job, 8 * 6, 300s); !ok) return fail_with(ok.error());
    }
    auto end = c->finish(*job);
    if (!end) return fail_with(end.error());
    if (end->changes.size() != std::size_t(repeat))
      return fail_with({errc::internal, "a migration of a shard was not timed"});
    m.reps = end->changes;
    auto by_pause = m.reps;
    std::sort(by_pause.begin(), by_pause.end(),
              [](auto& a, auto& b) { return a.pause_ms < b.pause_ms; });
    m.rep = by_pause[by_pause.size() / 2];
    migrations.push_back(m);
    std::fprintf(table,
                 "migrate %zu MiB (%zu bytes): raw ZeroMQ one way %.2f GB/s, transfer %.1f ms\n"
                 "  %4s %9s %9s %9s %4s %9s %9s %9s %11s %10s %9s\n",
                 mib, m.size_bytes, m.link_gbps, m.transfer_ms, "move", "pause_ms", "transf_ms",
                 "bound_ms", "ok", "gap_ms", "step_ms", "spread_ms", "handover_ms", "prepare_ms",
                 "sps_after");
    for (std::size_t k = 0; k < m.reps.size(); ++k) {
      const auto& rep = m.reps[k];
      std::fprintf(table, "  %4zu %9.1f %9.1f %9.1f %4s %9.1f %9.1f %9.1f %11.1f %10.1f %9.0f\n",
                   k + 1, rep.pause_ms, m.transfer_ms, bound_ms(m), within(m, rep) ? "yes" : "NO",
                   rep.gap_ms, rep.step_ms, rep.step_spread_ms, rep.transfer_ms, rep.prepare_ms,
                   rep.samples_per_s_after);
    }
  }
  stop(c->nodes);
  if (!keep) fs::remove_all(dir);

  const double join = median(joins_ms);
  std::size_t moves = 0, ok = 0;
  for (const auto& m : migrations)
    for (const auto& rep : m.reps) ++moves, ok += within(m, rep) ? 1 : 0;
  std::fprintf(table, "join: median %.2f ms over %zu joins (goal < 100 ms)\n", join,
               joins_ms.size());
  for (const auto& m : migrations)
    std::fprintf(table, "migrate %zu bytes: median pause %.1f ms vs transfer %.1f ms + 20 ms\n",
                 m.size_bytes, m.rep.pause_ms, m.transfer_ms);
  std::fprintf(table, "every move within transfer + 20 ms: %s (%zu of %zu)\n",
               ok == moves ? "yes" : "no", ok, moves);
  if (!json) return 0;
  coach::json joins_out = coach::json::array();
  for (const auto v : joins_ms) joins_out.push_back(num(v));
  coach::json migrations_out = coach::json::array();
  for (const auto& m : migrations) {
    coach::json pauses = coach::json::array();
    for (const auto& rep : m.reps) pauses.push_back(num(rep.pause_ms));
    migrations_out.push_back(coach::json{{"size_bytes", m.size_bytes},
                                         {"pause_ms", num(m.rep.pause_ms)},
                                         {"transfer_ms", num(m.transfer_ms)},
                                         {"handover_ms", num(m.rep.transfer_ms)},
                                         {"gap_ms", num(m.rep.gap_ms)},
                                         {"step_ms", num(m.rep.step_ms)},
                                         {"link_gbps", num(m.link_gbps)},
                                         {"pauses_ms", std::move(pauses)}});
  }
  coach::json moves_out = coach::json::array();
  for (const auto& m : migrations)
    for (std::size_t k = 0; k < m.reps.size(); ++k) {
      const auto& rep = m.reps[k];
      moves_out.push_back(coach::json{{"size_bytes", m.size_bytes},
                                      {"move", k + 1},
                                      {"pause_ms", num(rep.pause_ms)},
                                      {"transfer_ms", num(m.transfer_ms)},
                                      {"bound_ms", num(bound_ms(m))},
                                      {"ok", within(m, rep)},
                                      {"gap_ms", num(rep.gap_ms)},
                                      {"step_ms", num(rep.step_ms)},
                                      {"step_spread_ms", num(rep.step_spread_ms)},
                                      {"handover_ms", num(rep.transfer_ms)},
                                      {"prepare_ms", num(rep.prepare_ms)}});
    }
  coach::json throughput = coach::json::object();
  auto add = [&](const std::string& key, const scheduler::change_report& r) {
    throughput[key] =
        coach::json{{"before", num(r.samples_per_s_before)}, {"after", num(r.samples_per_s_after)}};
  };
  for (const auto& r : join_reports) add(r.what, r);
  for (const auto& m : migrations) add(coach::format("migrate {} bytes", m.size_bytes), m.rep);
  const coach::json out{{"join_ms", num(join)},
                        {"joins_ms", std::move(joins_out)},
                        {"migrations", std::move(migrations_out)},
                        {"moves", std::move(moves_out)},
                        {"every_move_ok", ok == moves},
                        {"throughput", std::move(throughput)}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The nodes' memory policy, for this program and (inherited) its echo and nodes: huge pages
  // unless --no-huge-pages (decided before the re-execution that sets them), freed memory kept.
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--no-huge-pages") ::setenv("COACH_HUGE_PAGES", "0", 1);
  coach::use_huge_pages(argv);
  coach::keep_freed_memory();
  CLI::App app{"Coach rescale_bench: the cost of changing a running job, between processes",
               "rescale_bench"};
  std::string sizes = "4,64,256";
  int joins = 3, repeat = 3;
  bool json = false, keep = false, no_huge_pages = false;
  std::string echo;
  app.add_option("--sizes", sizes, "Shard sizes to migrate, MiB, comma-separated");
  app.add_option("--joins", joins, "Workers to add one by one to a 1-worker job")
      ->check(CLI::Range(1, 3));
  app.add_option("--repeat", repeat, "Migrations of each size (the median is reported)")
      ->check(CLI::Range(1, 9));
  app.add_flag("--no-huge-pages", no_huge_pages,
               "Run the nodes and the raw ZeroMQ echo with ordinary pages (COACH_HUGE_PAGES=0; "
               "by default coach-node puts large allocations on transparent huge pages)");
  app.add_flag("--json", json, "Print one JSON object on the last line");
  app.add_flag("--keep-logs", keep, "Keep the coach-node logs (their directory is printed)");
  app.add_option("--serve-echo", echo)->group("");  // internal: the raw ZeroMQ echo process
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!echo.empty()) return serve_echo(echo);
  std::vector<std::size_t> list;
  for (std::size_t at = 0; at < sizes.size();) {
    const auto comma = std::min(sizes.find(',', at), sizes.size());
    try {
      const long v = std::stol(sizes.substr(at, comma - at));
      if (v <= 0 || v > 4096) throw std::out_of_range("size");
      list.push_back(std::size_t(v));
    } catch (const std::exception&) {
      std::fprintf(stderr, "rescale_bench: --sizes: '%s' is not a list of MiB in 1..4096\n",
                   sizes.c_str());
      return 2;
    }
    at = comma + 1;
  }
  signal(SIGPIPE, SIG_IGN);
  return run(list, joins, repeat, json, keep);
}
