#pragma once
// bench/recovery_cluster.hpp: recovery_bench's cluster: four coach-node processes on loopback
// (node-a the scheduler; each counts only the CPUs Coach reserved, --cpu-accounting reserved,
// so that other programs' load, a build or the test suite beside it, never keeps its jobs
// queued), a job API client, losing a node (SIGKILL or SIGSTOP), every child
// killed on SIGINT/SIGTERM. Header-only; included by bench/recovery_bench.cpp alone.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "actors/api_client.hpp"
#include "actors/curve_keys.hpp"
#include "bench/bench_api.hpp"
#include "bench/bench_processes.hpp"
#include "common/format.hpp"

namespace coach::bench::recovery {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
namespace fs = std::filesystem;

// --- every child this program started, for a signal handler ------------------------------

inline constexpr int max_children = 64;
inline std::atomic<pid_t> live_children[max_children];

inline void remember(pid_t pid) {
  for (auto& c : live_children) {
    pid_t none = 0;
    if (c.compare_exchange_strong(none, pid)) return;
  }
}
inline void forget(pid_t pid) {
  for (auto& c : live_children) {
    pid_t p = pid;
    if (c.compare_exchange_strong(p, 0)) return;
  }
}
extern "C" inline void on_signal(int sig) {
  for (auto& c : live_children)
    if (const pid_t p = c.load(); p > 0) ::kill(p, SIGKILL);
  ::_exit(128 + sig);
}

/// The lines of a node log that say what happened to nodes, shards and jobs.
inline std::string relevant_lines(const fs::path& log) {
  std::istringstream in(slurp(log));
  std::string line, out;
  while (std::getline(in, line)) {
    std::string lower = line;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    for (const char* w : {"lost", "take", "backup", "recover", "restart", "suspend", "resum",
                          "fail", "error", "timeout", "dead", "replica"})
      if (lower.find(w) != std::string::npos) {
        out += "    " + line + "\n";
        break;
      }
  }
  return out;
}

// --- the cluster -------------------------------------------------------------------------

struct node {
  std::string name;
  child proc;
  fs::path log;
  bool frozen = false;
};

/// Four coach-node processes and a job API client; stops them when destroyed.
class cluster {
 public:
  cluster() = default;
  cluster(const cluster&) = delete;
  cluster& operator=(const cluster&) = delete;
  ~cluster() { stop_all(); }

  /// Starts node-a (scheduler, `node_timeout_s`) and node-b..d, logs in `dir`; waits until the
  /// scheduler lists all four alive. free_address() gives a port that is free when asked; a
  /// process beside (the suite runs tests two at a time) may take it before node-a binds it:
  /// node-a then exits, and the four start again on fresh addresses (three tries).
  result<void> start(const fs::path& dir, const std::string& bin, double node_timeout_s) {
    dir_ = dir;
    fs::create_directories(dir);
    for (int attempt = 1;; ++attempt) {
      auto up = start_once(bin, node_timeout_s);
      if (!up) return std::unexpected(up.error());
      if (*up) return {};
      stop_all();
      nodes_.clear();
      if (attempt == 3)
        return fail(errc::internal, "node-a exited three times (its address taken?; logs in {})",
                    dir.string());
    }
  }

  result<actors::api_reply> call(const actors::api_request& r) { return api_call(*api_, r); }
  result<actors::job_status> status(std::uint64_t job) { return job_status_of(*api_, job); }

  /// How the scheduler lists `name` (`coach nodes`); not_found when it does not.
  result<actors::node_status> node_listed(const std::string& name) {
    auto r = call(actors::nodes_request{});
    if (!r) return std::unexpected(r.error());
    for (const auto& n : std::get<actors::nodes_reply>(r->body).nodes)
      if (n.last.name == name) return n;
    return fail(errc::not_found, "no node {}", name);
  }

  result<std::uint64_t> submit(const std::string& spec_yaml) {
    auto r = call(actors::submit_request{spec_yaml, "recovery_bench.yaml", dir_.string(), 0, 0});
    if (!r) return std::unexpected(r.error());
    return std::get<actors::submit_reply>(r->body).job;
  }

  /// Cancels the job (if it still runs) and waits up to 30 s for its end.
  void finish(std::uint64_t job) {
    (void)call(actors::cancel_request{job});
    for (int i = 0; i < 300; ++i) {
      auto s = status(job);
      if (!s || over(*s)) return;
      std::this_thread::sleep_for(100ms);
    }
  }

  /// SIGKILL to one node; reaped at once.
  void kill(node& n) {
    if (n.proc.pid <= 0) return;
    ::kill(n.proc.pid, SIGKILL);
    ::waitpid(n.proc.pid, nullptr, 0);
    forget(n.proc.pid);
    n.proc.pid = -1;
  }
  /// SIGSTOP to one node: as a host that vanishes, its connections stay open and nothing
  /// answers on them. Killed by stop_all.
  void freeze(node& n) {
    if (n.proc.pid > 0) ::kill(n.proc.pid, SIGSTOP);
    n.frozen = true;
  }

  /// SIGTERM to every node still running, SIGKILL after 10 s (at once to a frozen one).
  void stop_all() {
    for (auto& n : nodes_)
      if (n.frozen && n.proc.pid > 0) kill(n);
    std::vector<child> running;
    for (auto& n : nodes_)
      if (n.proc.pid > 0) running.push_back(n.proc);
    stop(running, 10s);
    for (auto& n : nodes_) forget(n.proc.pid), n.proc.pid = -1;
    api_.reset();
  }

  static bool over(const actors::job_status& s) {
    return s.state == actors::job_state::succeeded || s.state == actors::job_state::failed ||
           s.state == actors::job_state::cancelled;
  }

  std::vector<node>& nodes() { return nodes_; }
  const fs::path& dir() const { return dir_; }

  std::string logs() const {
    std::string out;
    for (const auto& n : nodes_) {
      const auto lines = relevant_lines(n.log);
      out += "  " + n.log.string() + (lines.empty() ? " (nothing relevant)\n" : ":\n" + lines);
    }
    return out;
  }

 private:
  /// One try of start(): false when node-a exited (its address was taken).
  result<bool> start_once(const std::string& bin, double node_timeout_s) {
    at_ = free_address();
    const std::string exe = bin + "/coach-node";
    const std::string timeout = coach::format("{}", node_timeout_s);
    launch("node-a", exe,
           {"--exit-with-parent", "--listen", at_, "--scheduler", "--store", "", "--name", "node-a",
            "--heartbeat", "0.25", "--node-timeout", timeout, "--rebalance-interval", "0",
            "--cpu-accounting", "reserved"});
    for (const char* name : {"node-b", "node-c", "node-d"})
      launch(name, exe,
             {"--exit-with-parent", "--listen", free_address(), "--join", at_, "--name", name,
              "--heartbeat", "0.25", "--cpu-accounting", "reserved"});
    for (auto& n : nodes_)
      if (n.proc.pid <= 0) return fail(errc::internal, "cannot start {}", exe);
    auto security = actors::load_security("", "", "");
    if (!security) return std::unexpected(security.error());
    auto api = actors::api_client::open(at_, std::move(*security));
    if (!api) return std::unexpected(api.error());
    api_ = std::move(*api);
    const auto deadline = clock_type::now() + 60s;
    while (clock_type::now() < deadline) {
      if (exited(nodes_.front())) return false;
      auto r = api_->call(actors::nodes_request{}, 2s);
      if (r && !r->failure) {
        // This cluster's four (not another test's scheduler that took node-a's port).
        const auto& ns = std::get<actors::nodes_reply>(r->body).nodes;
        const auto ours = [](const auto& x) {
          return x.alive && x.last.name.size() == 6 && x.last.name.starts_with("node-");
        };
        if (std::count_if(ns.begin(), ns.end(), ours) == 4) return true;
      }
      std::this_thread::sleep_for(100ms);
    }
    return fail(errc::internal, "the four coach-node processes did not come up (logs in {})",
                dir_.string());
  }

  /// Whether `n`'s process has ended (reaped here).
  static bool exited(node& n) {
    if (n.proc.pid <= 0) return true;
    int status = 0;
    if (::waitpid(n.proc.pid, &status, WNOHANG) != n.proc.pid) return false;
    forget(n.proc.pid);
    n.proc.pid = -1;
    return true;
  }

  void launch(const std::string& name, const std::string& exe,
              const std::vector<std::string>& args) {
    node n{name, {}, dir_ / (name + ".log")};
    n.proc = spawn(exe, args, n.log);
    if (n.proc.pid > 0) remember(n.proc.pid);
    nodes_.push_back(std::move(n));
  }

  fs::path dir_;
  std::string at_;
  std::vector<node> nodes_;
  std::unique_ptr<actors::api_client> api_;
};

// --- the job -----------------------------------------------------------------------------

/// scheduler_test's digits job (1438 training samples, 45 batches of 32 an epoch).
}  // namespace coach::bench::recovery
