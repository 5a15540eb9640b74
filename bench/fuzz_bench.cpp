// fuzz_bench: hostile input at volume (docs/hostile-input.md). Starts two coach-node processes on
// loopback, node-a (the scheduler, the node under attack) and node-b (joined to it; each
// advertises one CPU, so a job's worker and shard run one on each node and the job's own
// messages cross node-a's socket with the flood), then sends --frames hostile ZeroMQ messages
// (tests/fuzz/hostile_frames.hpp: random bytes, mutated and truncated headers, wrong versions,
// frame counts and sizes, unknown endpoints, huge announced sizes, empty messages, thousands of
// frames, mutated control payloads) at node-a over one DEALER, as fast as node-a takes them.
//
// While the flood runs (every --check-every messages) and after it, a check: `coach nodes`
// must list both nodes alive, and a small digits job (1 worker, 1 shard, 3 epochs) submitted
// through the job API must succeed. At the end the bench compares node-a's own counts of what
// it refused, by reason (its "received:" log line on stderr, actors::receive_stats), with
// the counts the generator predicted for the messages it sent, and reports whether node-a stayed
// up, its memory, and each check's result. Exit code 0 when node-a stayed up, every check passed
// and every refusal count is the predicted one; 1 otherwise; 2 for bad flags.
//
// The nodes use the key of COACH_KEY when it is set (docs/security.md), as this program's DEALER
// and job API client do; without it, plain connections on loopback.

#include <CLI/CLI.hpp>
#include <zmq.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "actors/api_client.hpp"
#include "bench/bench_api.hpp"
#include "bench/bench_processes.hpp"
#include "common/format.hpp"
#include "common/json.hpp"
#include "tests/fuzz/hostile_frames.hpp"

namespace {

using namespace coach;
using namespace coach::bench;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

/// The last `bytes` of a file (a flooded node's log may grow large).
std::string tail(const fs::path& p, std::size_t bytes) {
  std::ifstream in(p, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const auto size = std::size_t(in.tellg());
  const auto from = size > bytes ? size - bytes : 0;
  in.seekg(std::streamoff(from));
  std::string s(size - from, '\0');
  in.read(s.data(), std::streamsize(s.size()));
  return s;
}

/// A /proc/PID/status field in KiB (VmRSS, VmHWM), or -1.
long proc_kib(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0)
      return std::strtol(line.c_str() + field.size() + 1, nullptr, 10);
  return -1;
}

/// Whether `pid` (a child) still runs; its wait status is kept once it has ended.
struct child_watch {
  pid_t pid = -1;
  std::optional<int> status;
  bool running() {
    if (status) return false;
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) status = st;
    return !status;
  }
  std::string how_it_ended() const {
    if (!status) return "running";
    if (WIFSIGNALED(*status)) return coach::format("killed by signal {}", WTERMSIG(*status));
    return coach::format("exited with code {}", WEXITSTATUS(*status));
  }
};

/// One check: `coach nodes` lists both nodes alive, and a digits job succeeds.
struct check_result {
  std::string when;
  std::uint64_t frames_at_start = 0, frames_at_end = 0;
  bool nodes_ok = false;
  std::string nodes_detail;
  std::uint64_t job = 0;
  std::string job_state = "not submitted";
  std::size_t links = 0;  ///< traffic links in node-a's heartbeat
  double accuracy = -1;
  double nodes_seconds = 0;  ///< `coach nodes`, from start to exit
  double seconds = 0;        ///< the job, from its submission to its end
  std::string error;
  bool ok() const { return nodes_ok && job_state == "succeeded"; }
};

struct bench {
  fs::path dir;
  std::string at;
  actors::transport_security security;
  child_watch node_a, node_b;
  std::unique_ptr<actors::api_client> api;
  std::atomic<std::uint64_t> sent{0};

  fs::path log_a() const { return dir / "node-a.log"; }

  /// The nodes alive in the output of `coach nodes --json` ({"nodes": [{..., "alive": true,
  /// ...}]} on a line of its own; stderr, beside it in `out`, may hold other lines).
  static std::size_t alive_nodes(const std::string& out) {
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      const auto doc = coach::json::parse(line, nullptr, false);
      if (doc.is_discarded() || !doc.is_object() || !doc.contains("nodes") ||
          !doc["nodes"].is_array())
        continue;
      std::size_t alive = 0;
      for (const auto& n : doc["nodes"])
        if (n.is_object() && n.value("alive", false)) ++alive;
      return alive;
    }
    return 0;
  }

  std::string coach_nodes(int& code, const std::string& when) {
    const auto out = dir / ("coach-nodes-" + when + ".out");
    const std::string cmd = std::string(COACH_BINARY_DIR) + "/apps/coach nodes --json --at " + at +
                            " >" + out.string() + " 2>&1";
    const int st = std::system(cmd.c_str());
    code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return slurp(out);
  }

  std::string spec(const std::string& name) const {
    return coach::format(
        "name: {}\n"
        "dataset: {{format: csv, path: {}/data/digits.csv.gz, test_fraction: 0.2}}\n"
        "model: {{type: mlp, hidden: [32], activation: relu}}\n"
        "optimizer: {{type: sgd, learning_rate: 0.1}}\n"
        "batch_size: 32\nepochs: 3\nseed: 5\n"
        "workers: {{min: 1, max: 1, initial: 1}}\nshards: {{min: 1, max: 1, initial: 1}}\n",
        name, COACH_SOURCE_DIR);
  }

  check_result check(const std::string& when) {
    check_result r;
    r.when = when;
    r.frames_at_start = sent.load();
    const auto t0 = clock_type::now();
    int code = -1;
    std::string tag = when;
    std::replace(tag.begin(), tag.end(), ' ', '-');
    const auto out = coach_nodes(code, tag);
    r.nodes_seconds = seconds_since(t0);
    const std::size_t alive = alive_nodes(out);
    r.nodes_ok = code == 0 && alive == 2;
    // The links node-a's heartbeat carries (its transport's traffic, actors::traffic_stats).
    if (auto n = api->call(actors::nodes_request{}, 30s); n && !n->failure)
      for (const auto& st : std::get<actors::nodes_reply>(n->body).nodes)
        if (st.last.name == "node-a") r.links = st.last.traffic.size();
    char detail[64];
    std::snprintf(detail, sizeof detail, "exit %d, %zu alive, %.1f s", code, alive,
                  r.nodes_seconds);
    r.nodes_detail = detail;
    if (code != 0) r.nodes_detail += ": " + out.substr(0, out.find('\n'));
    const auto t1 = clock_type::now();
    auto reply = api->call(
        actors::submit_request{spec("fuzz-check"), "fuzz-check.yaml", dir.string(), 0, 0}, 30s);
    if (!reply || reply->failure) {
      r.error = reply ? reply->failure->message : reply.error().message;
    } else {
      r.job = std::get<actors::submit_reply>(reply->body).job;
      const auto deadline = clock_type::now() + 180s;
      while (clock_type::now() < deadline) {
        auto s = api->call(actors::status_request{r.job}, 30s);
        if (s && !s->failure) {
          const auto& jobs = std::get<actors::status_reply>(s->body).jobs;
          if (!jobs.empty()) {
            const auto& j = jobs.front();
            r.job_state = std::string(to_string(j.state));
            r.accuracy = j.test_accuracy;
            r.error = j.error;
            if (j.state != actors::job_state::queued && j.state != actors::job_state::running)
              break;
          }
        } else {
          r.error = s ? s->failure->message : s.error().message;
        }
        std::this_thread::sleep_for(200ms);
      }
    }
    r.seconds = seconds_since(t1);
    r.frames_at_end = sent.load();
    return r;
  }
};

void print_check(const check_result& r) {
  std::printf(
      "check %-7s frames %7llu..%-7llu coach nodes: %s (%s); job %llu: %s in %.1f s, test "
      "accuracy %.3f; node-a's heartbeat: %zu links%s%s\n",
      r.when.c_str(), (unsigned long long)r.frames_at_start, (unsigned long long)r.frames_at_end,
      r.nodes_ok ? "ok" : "NO", r.nodes_detail.c_str(), (unsigned long long)r.job,
      r.job_state.c_str(), r.seconds, r.accuracy, r.links, r.error.empty() ? "" : ": ",
      r.error.c_str());
  std::fflush(stdout);
}

int run(std::uint64_t frames, std::uint64_t seed, std::uint64_t check_every, bool keep,
        const std::string& listen) {
  bench b;
  b.dir = fs::temp_directory_path() / ("coach-fuzz-bench-" + std::to_string(::getpid()));
  fs::create_directories(b.dir);
  auto security = actors::load_security("", "", "");
  if (!security) {
    std::fprintf(stderr, "fuzz_bench: %s\n", security.error().message.c_str());
    return 2;
  }
  b.security = *security;
  b.at = listen.empty() ? free_address() : listen;
  const std::string node = std::string(COACH_BINARY_DIR) + "/apps/coach-node";
  b.node_a.pid =
      spawn(node,
            {"--listen", b.at, "--scheduler", "--store", "", "--name", "node-a", "--cpus", "1",
             "--heartbeat", "0.25", "--stats-interval", "0.25", "--exit-with-parent"},
            b.log_a())
          .pid;
  b.node_b.pid = spawn(node,
                       {"--listen", free_address(), "--join", b.at, "--name", "node-b", "--cpus",
                        "1", "--heartbeat", "0.25", "--exit-with-parent"},
                       b.dir / "node-b.log")
                     .pid;
  std::vector<child> children{{b.node_a.pid}, {b.node_b.pid}};
  auto finish = [&](int rc) {
    stop(children);
    if (!keep && rc == 0)
      fs::remove_all(b.dir);
    else
      std::printf("node logs: %s\n", b.dir.c_str());
    return rc;
  };
  auto api = actors::api_client::open(b.at, b.security);
  if (!api) {
    std::fprintf(stderr, "fuzz_bench: %s\n", api.error().message.c_str());
    return finish(1);
  }
  b.api = std::move(*api);
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    auto r = b.api->call(actors::nodes_request{}, 2s);
    if (r && !r->failure) {
      const auto& nodes = std::get<actors::nodes_reply>(r->body).nodes;
      up = std::count_if(nodes.begin(), nodes.end(), [](auto& n) { return n.alive; }) == 2;
    }
    if (!up) std::this_thread::sleep_for(100ms);
  }
  if (!up) {
    std::fprintf(stderr, "fuzz_bench: the two coach-node processes did not come up\n");
    return finish(1);
  }

  const std::uint32_t host = actors::node_host_id(b.at);
  std::printf("fuzz_bench: %llu frames, seed %llu, at node-a %s (host %u, pid %d)%s\n",
              (unsigned long long)frames, (unsigned long long)seed, b.at.c_str(), host,
              b.node_a.pid, b.security.key ? ", with keys" : ", no keys (loopback)");
  std::vector<check_result> checks;
  checks.push_back(b.check("before"));
  print_check(checks.back());
  const long rss_before = proc_kib(b.node_a.pid, "VmRSS");

  // The checks during the flood run beside it, on their own thread.
  std::mutex mu;
  std::condition_variable cv;
  bool flood_done = false;
  std::thread checker([&] {
    if (check_every == 0) return;
    for (std::uint64_t next = check_every; next < frames; next += check_every) {
      {
        std::unique_lock lock{mu};
        cv.wait_for(lock, 24h, [&] { return flood_done || b.sent.load() >= next; });
        if (flood_done) return;
      }
      auto r = b.check(coach::format("at {}k", next / 1000));
      std::lock_guard lock{mu};
      checks.push_back(r);
      print_check(r);
    }
  });

  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndtimeo, 10000);
  s.set(zmq::sockopt::routing_id, "fuzz-bench");
  if (const auto& key = b.security.key) {
    s.set(zmq::sockopt::curve_serverkey, b.security.server_key_for(""));
    s.set(zmq::sockopt::curve_publickey, key->public_key);
    s.set(zmq::sockopt::curve_secretkey, key->secret_key);
  }
  s.connect(b.at);

  fuzz::hostile_frames gen(seed, host);
  fuzz::hostile_message m;
  std::array<std::uint64_t, fuzz::hostile_kind_count> by_kind{};
  std::array<std::uint64_t, fuzz::outcome_count> expected{};
  std::uint64_t bytes = 0, parts = 0, replies = 0, stalls = 0;
  bool hung = false;
  const auto start = clock_type::now();
  auto last_print = start;
  std::uint64_t last_sent = 0;
  long rss_peak = rss_before;
  zmq::message_t reply;
  for (std::uint64_t i = 0; i < frames && !hung; ++i) {
    gen.next(m);
    for (std::size_t k = 0; k < m.parts.size(); ++k) {
      const auto more = k + 1 < m.parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      // Only the first part can wait (ZeroMQ takes a message's other parts once it took one):
      // 10 s at a time (sndtimeo), 60 s in all before node-a counts as hung.
      for (int waited = 0; !s.send(zmq::buffer(m.parts[k].data(), m.parts[k].size()), more);) {
        ++stalls;
        std::printf("  node-a took no frame for 10 s (pid %d)\n", b.node_a.pid);
        if (!b.node_a.running() || ++waited == 6) {
          hung = true;
          break;
        }
      }
      if (hung) break;
    }
    if (hung) break;
    ++by_kind[std::size_t(m.kind)];
    ++expected[std::size_t(m.expected)];
    bytes += m.bytes();
    parts += m.parts.size();
    if ((i & 63) == 0)
      while (s.recv(reply, zmq::recv_flags::dontwait)) ++replies;  // the scheduler's answers
    const auto n = b.sent.fetch_add(1) + 1;
    if (n % 1024 == 0) cv.notify_all();
    if ((i & 1023) == 0 && seconds_since(last_print) >= 2) {
      const double dt = seconds_since(last_print);
      last_print = clock_type::now();
      const long rss = proc_kib(b.node_a.pid, "VmRSS");
      rss_peak = std::max(rss_peak, rss);
      const auto counts = fuzz::last_receive_stats(tail(b.log_a(), 1 << 16));
      std::printf("sent %9llu  %7.0f messages/s (mean %7.0f)  node-a %s, RSS %ld MiB%s%s\n",
                  (unsigned long long)n, double(n - last_sent) / dt,
                  double(n) / seconds_since(start), b.node_a.running() ? "up" : "DOWN", rss / 1024,
                  counts ? ", counts: " : "", counts ? actors::to_string(*counts).c_str() : "");
      std::fflush(stdout);
      last_sent = n;
    }
  }
  const double flood_s = seconds_since(start);
  {
    std::lock_guard lock{mu};
    flood_done = true;
  }
  cv.notify_all();
  checker.join();
  while (s.recv(reply, zmq::recv_flags::dontwait)) ++replies;
  const bool up_after_flood = b.node_a.running();
  if (up_after_flood) {
    checks.push_back(b.check("after"));
    print_check(checks.back());
  }

  // Wait until node-a has counted every message of the flood (its line comes every second).
  const std::uint64_t sent_total = b.sent.load();
  std::optional<actors::receive_stats> counts;
  auto counted = [&](const actors::receive_stats& c) {
    return c.malformed + c.foreign + c.unknown_dst + c.messages >= sent_total;
  };
  double counted_s = -1;  // from the flood's start until node-a's line shows every message
  for (int i = 0; i < 600 && b.node_a.running(); ++i) {
    counts = fuzz::last_receive_stats(tail(b.log_a(), 1 << 16));
    if (counts && counted(*counts)) {
      counted_s = seconds_since(start);
      break;
    }
    std::this_thread::sleep_for(50ms);
  }
  const long rss_end = proc_kib(b.node_a.pid, "VmRSS");
  const long hwm = proc_kib(b.node_a.pid, "VmHWM");
  rss_peak = std::max(rss_peak, rss_end);
  const bool up_at_end = b.node_a.running();
  // SIGTERM: node-a drains and prints its final counts.
  if (up_at_end) ::kill(b.node_a.pid, SIGTERM);
  for (int i = 0; i < 600 && b.node_a.running(); ++i) std::this_thread::sleep_for(50ms);
  if (b.node_a.running()) ::kill(b.node_a.pid, SIGKILL), ::waitpid(b.node_a.pid, nullptr, 0);
  children.erase(children.begin());  // node-a: ended and waited for
  stop(children);
  const bool clean_exit =
      b.node_a.status && WIFEXITED(*b.node_a.status) && WEXITSTATUS(*b.node_a.status) == 0;
  const std::string log = slurp(b.log_a());
  if (auto last = fuzz::last_receive_stats(log)) counts = last;
  std::size_t control_drops = 0;
  for (auto p = log.find("dropped a control message"); p != std::string::npos;
       p = log.find("dropped a control message", p + 1))
    ++control_drops;

  std::printf(
      "\nsent %llu messages (%llu frames, %.1f MiB) in %.1f s: %.0f messages/s; "
      "%llu replies from the scheduler read; %llu sends waited 10 s\n"
      "node-a had counted them all %.1f s after the first (its counts come every 0.25 s; the "
      "checks ran beside the flood): %.0f messages/s\n",
      (unsigned long long)sent_total, (unsigned long long)parts, double(bytes) / (1 << 20), flood_s,
      double(sent_total) / flood_s, (unsigned long long)replies, (unsigned long long)stalls,
      counted_s, counted_s > 0 ? double(sent_total) / counted_s : 0.0);
  std::printf("\n%-18s %10s\n", "sent, by kind", "messages");
  for (std::size_t k = 0; k < fuzz::hostile_kind_count; ++k)
    std::printf("%-18s %10llu\n", std::string(to_string(fuzz::hostile_kind(k))).c_str(),
                (unsigned long long)by_kind[k]);
  const auto exp = [&](fuzz::outcome o) { return expected[std::size_t(o)]; };
  const actors::receive_stats c = counts.value_or(actors::receive_stats{});
  struct row {
    const char* reason;
    std::uint64_t predicted, node;
    bool exact;  ///< the node's count must equal the prediction (else: at least)
  };
  const std::uint64_t malformed_header = exp(fuzz::outcome::malformed);
  const std::uint64_t malformed_frames = exp(fuzz::outcome::malformed_frames);
  const std::vector<row> rows{
      {"malformed", malformed_header + malformed_frames, c.malformed, true},
      {"  of which frames", malformed_frames, c.malformed_frames, true},
      {"foreign", exp(fuzz::outcome::foreign), c.foreign, true},
      {"unknown_dst", exp(fuzz::outcome::unknown_dst), c.unknown_dst, false},
      {"delivered", exp(fuzz::outcome::delivered), c.messages, false},
      {"refused (connections)", 0, c.refused(), true},
  };
  bool counts_ok = counts.has_value();
  std::printf("\n%-22s %12s %12s %s\n", "node-a counted", "predicted", "node-a", "");
  for (const auto& r : rows) {
    const bool ok = r.exact ? r.node == r.predicted : r.node >= r.predicted;
    counts_ok = counts_ok && ok;
    std::printf(
        "%-22s %12llu %12llu %s\n", r.reason, (unsigned long long)r.predicted,
        (unsigned long long)r.node,
        ok ? (r.exact || r.node == r.predicted ? "" : "(+ the checks' and node-b's traffic)")
           : "MISMATCH");
  }
  std::printf(
      "\nnode-a: %s during the flood, %s at the end, %s after SIGTERM (%s); "
      "RSS %ld MiB before, %ld MiB peak sampled, %ld MiB at the end (VmHWM %ld MiB); "
      "log %.1f MiB, %zu 'dropped a control message' lines\n",
      up_after_flood ? "up" : "DOWN", up_at_end ? "up" : "DOWN",
      clean_exit ? "clean exit" : "no clean exit", b.node_a.how_it_ended().c_str(),
      rss_before / 1024, rss_peak / 1024, rss_end / 1024, hwm / 1024,
      double(fs::file_size(b.log_a())) / (1 << 20), control_drops);
  bool checks_ok = !checks.empty() && checks.back().when == "after";
  for (const auto& r : checks) checks_ok = checks_ok && r.ok();
  std::printf("checks: %zu, %s\n", checks.size(), checks_ok ? "all passed" : "NOT all passed");
  const bool ok = !hung && up_at_end && clean_exit && counts_ok && checks_ok;
  std::printf("result: %s\n", ok ? "ok" : "FAILED");
  return finish(ok ? 0 : 1);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Coach fuzz_bench: a live coach-node under a flood of hostile ZeroMQ messages",
               "fuzz_bench"};
  std::uint64_t frames = 1000000, seed = 1, check_every = 250000;
  bool keep = false;
  std::string listen;
  app.add_option("--frames", frames, "Hostile messages to send")->capture_default_str();
  app.add_option("--seed", seed, "Seed of the generator (the same seed sends the same messages)")
      ->capture_default_str();
  app.add_option("--check-every", check_every,
                 "Messages between checks during the flood (0: before and after it only)")
      ->capture_default_str();
  app.add_option("--listen", listen,
                 "node-a's address, tcp://127.0.0.1:PORT (default: a free port). Its host id is "
                 "in the messages: the same seed and address send the same messages");
  app.add_flag("--keep-logs", keep, "Keep the coach-node logs (their directory is printed)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  signal(SIGPIPE, SIG_IGN);
  return run(frames, seed, check_every, keep, listen);
}
