#pragma once
// Helpers of the integration tests that drive real processes: `coach` runs, coach-node
// processes (started with --exit-with-parent, so a killed test leaves none behind), free
// loopback addresses, and the few JSON reads the tests make. Each test binary has its own work
// directory under the system's temporary directory.
//
// Every process the suite starts is authenticated (docs/security.md): the first use of the
// harness makes a cluster-wide key pair in WORK_DIR/keys and sets COACH_KEY, which coach-node and
// coach read; in-process transports that talk to them load suite_key().
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

extern char** environ;

namespace itest {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct run_result {
  int code = -1;
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

inline fs::path work_dir() {
  static const fs::path dir = [] {
    auto d = fs::temp_directory_path() / ("coach-itest-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

/// The suite's key pair (WORK_DIR/keys/cluster.key), made once per test binary with `coach
/// keygen` and handed to every child through COACH_KEY. Its directory holds the public key, so
/// every process of the suite authorizes every other.
inline const fs::path& suite_key() {
  static const fs::path key = [] {
    const auto dir = work_dir() / "keys";
    fs::remove_all(dir);
    const std::string cmd = std::string(COACH_BINARY_DIR) + "/apps/coach keygen " + dir.string() +
                            " --name cluster >/dev/null";
    if (std::system(cmd.c_str()) != 0) std::abort();
    ::setenv("COACH_KEY", (dir / "cluster.key").c_str(), 1);
    return dir / "cluster.key";
  }();
  return key;
}
/// Made before any test starts a process.
inline const bool suite_keyed = !suite_key().empty();

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs `coach ARGS` to completion from the source tree (examples/ paths resolve).
inline run_result coach(const std::string& args) {
  static int n = 0;
  const auto out = work_dir() / ("out" + std::to_string(++n));
  const auto err = work_dir() / ("err" + std::to_string(n));
  const std::string cmd = "cd " + std::string(COACH_SOURCE_DIR) + " && " +
                          std::string(COACH_BINARY_DIR) + "/apps/coach " + args + " >" +
                          out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  run_result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

inline std::string free_address() {
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::router);
  s.bind("tcp://127.0.0.1:0");
  return s.get(zmq::sockopt::last_endpoint);
}

/// A free port on 127.0.0.1 (of free_address()), for a server other than a coach-node's data path.
inline int free_port() {
  const auto a = free_address();
  return std::stoi(a.substr(a.rfind(':') + 1));
}

/// The number after "KEY": in a JSON text (first occurrence), or -1.
inline double json_number(const std::string& text, const std::string& key, std::size_t from = 0) {
  const auto at = text.find("\"" + key + "\": ", from);
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + key.size() + 4, nullptr);
}

inline std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct node_process {
  pid_t pid = -1;
  std::string name;
  fs::path log;
};

/// Starts `coach-node ARGS` with stdout and stderr in WORK_DIR/LOG_NAME.log (default: name).
inline node_process start_node(const std::vector<std::string>& args, const std::string& name,
                               const std::string& log_name = {}) {
  node_process p;
  p.name = name;
  p.log = work_dir() / ((log_name.empty() ? name : log_name) + ".log");
  // A test killed by its timeout leaves no node behind.
  std::vector<std::string> argv_s{std::string(COACH_BINARY_DIR) + "/apps/coach-node",
                                  "--exit-with-parent"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, p.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  if (posix_spawn(&p.pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) p.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return p;
}

/// Waits up to `limit` for the process to exit; its exit code, or -1 if it did not.
inline int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
    std::this_thread::sleep_for(50ms);
  }
  return -1;
}

/// SIGTERM to every node, then waits up to 20 s for each (SIGKILL after); clears `nodes`.
inline void stop_nodes(std::vector<node_process>& nodes) {
  for (auto& n : nodes)
    if (n.pid > 0) ::kill(n.pid, SIGTERM);
  for (auto& n : nodes) {
    if (n.pid <= 0) continue;
    if (wait_exit(n.pid, 20s) == -1) {
      ::kill(n.pid, SIGKILL);
      ::waitpid(n.pid, nullptr, 0);
    }
  }
  nodes.clear();
}

/// Waits (up to 20 s) until the scheduler at `at` lists `alive` nodes alive; false if it never
/// does.
inline bool await_nodes_alive(const std::string& at, std::size_t alive) {
  for (int i = 0; i < 100; ++i) {
    auto r = coach("nodes --json --at " + at);
    if (r.code == 0 && count(r.out, "\"alive\": true") == alive) return true;
    std::this_thread::sleep_for(200ms);
  }
  return false;
}

}  // namespace itest
