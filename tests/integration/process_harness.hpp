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

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include <nlohmann/json.hpp>

#include "tests/helpers/loopback_port.hpp"

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

/// A loopback address whose port nothing listens on now, never one this process was given
/// before, below the kernel's ephemeral range (tests/helpers/loopback_port.hpp: a port from
/// there could become another test's source port before the node binds it).
inline std::string free_address() {
  if (const int port = test_ports::listen_port(); port > 0)
    return "tcp://127.0.0.1:" + std::to_string(port);
  // None free below the range: the kernel's choice, as before.
  static std::mutex mu;
  static std::set<std::string> given;
  std::lock_guard lock(mu);
  for (int attempt = 0;; ++attempt) {
    zmq::context_t ctx;
    zmq::socket_t s(ctx, zmq::socket_type::router);
    s.bind("tcp://127.0.0.1:0");
    auto address = s.get(zmq::sockopt::last_endpoint);
    if (given.insert(address).second || attempt >= 100) return address;
  }
}

/// A free port on 127.0.0.1 (of free_address()), for a server other than a coach-node's data path.
inline int free_port() {
  const auto a = free_address();
  return std::stoi(a.substr(a.rfind(':') + 1));
}

/// TEXT parsed as JSON: a discarded value (is_discarded()) where TEXT is not JSON, so that a
/// check on it fails (with the text streamed beside it) rather than throws.
inline nlohmann::json parse_json(const std::string& text) {
  return nlohmann::json::parse(text, nullptr, false);
}

/// J's member KEY where J is an object that has it; null otherwise (never throws, never adds).
inline nlohmann::json json_field(const nlohmann::json& j, const std::string& key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nlohmann::json() : *it;
}

/// J's member KEY where it is a number; -1 where J has no number there.
inline double number_field(const nlohmann::json& j, const std::string& key) {
  const auto v = json_field(j, key);
  return v.is_number() ? v.get<double>() : -1;
}

/// J's member KEY where it is a string; "" where J has no string there.
inline std::string string_field(const nlohmann::json& j, const std::string& key) {
  const auto v = json_field(j, key);
  return v.is_string() ? v.get<std::string>() : std::string();
}

/// The strings of J's array KEY (other elements skipped); empty where J has no array there.
inline std::vector<std::string> strings_field(const nlohmann::json& j, const std::string& key) {
  std::vector<std::string> out;
  const auto list = json_field(j, key);
  if (list.is_array())
    for (const auto& v : list)
      if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

/// The numbers of J's array KEY (other elements skipped); empty where J has no array there.
inline std::vector<double> numbers_field(const nlohmann::json& j, const std::string& key) {
  std::vector<double> out;
  const auto list = json_field(j, key);
  if (list.is_array())
    for (const auto& v : list)
      if (v.is_number()) out.push_back(v.get<double>());
  return out;
}

/// The number at the top-level key KEY of the JSON object TEXT (`coach submit --json`'s "job", a
/// `coach train --report`'s "test_accuracy"); -1 where it has none or TEXT is not JSON.
inline double json_number(const std::string& text, const std::string& key) {
  return number_field(parse_json(text), key);
}

/// The one job in TEXT: `coach status JOB --json` prints {"jobs": [JOB]}, `coach submit --wait
/// --json` prints JOB itself (and `coach submit --json` {"job": ID}). Null where TEXT is not JSON
/// or holds not exactly one job.
inline nlohmann::json job_json(const std::string& text) {
  const auto j = parse_json(text);
  if (!j.is_object()) return nullptr;
  if (const auto jobs = json_field(j, "jobs"); jobs.is_array())
    return jobs.size() == 1 ? jobs[0] : nlohmann::json();
  return j.contains("job") ? j : nlohmann::json();
}

/// The number KEY of the one job in TEXT (job_json); -1 where it has none.
inline double job_number(const std::string& text, const std::string& key) {
  return number_field(job_json(text), key);
}

/// The string KEY of the one job in TEXT (job_json); "" where it has none.
inline std::string job_string(const std::string& text, const std::string& key) {
  return string_field(job_json(text), key);
}

/// The state of the one job in TEXT ("running", "succeeded", ...); "" where there is none.
inline std::string state_of(const std::string& text) {
  return job_string(text, "state");
}

/// The strings of the array KEY of the one job in TEXT (worker_nodes, shard_nodes).
inline std::vector<std::string> job_strings(const std::string& text, const std::string& key) {
  return strings_field(job_json(text), key);
}

/// The numbers of the array KEY of the one job in TEXT (epoch_samples).
inline std::vector<double> job_numbers(const std::string& text, const std::string& key) {
  return numbers_field(job_json(text), key);
}

/// Whether `list` holds `what`.
inline bool holds(const std::vector<std::string>& list, const std::string& what) {
  return std::find(list.begin(), list.end(), what) != list.end();
}

/// Whether the one job in TEXT lists NODE among its worker_nodes or shard_nodes.
inline bool runs_on(const std::string& text, const std::string& node) {
  const auto job = job_json(text);
  return holds(strings_field(job, "worker_nodes"), node) ||
         holds(strings_field(job, "shard_nodes"), node);
}

/// The nodes of a `coach nodes --json` reply ({"nodes": [NODE, ...]}); empty where TEXT is not one.
inline std::vector<nlohmann::json> nodes_of(const std::string& text) {
  std::vector<nlohmann::json> out;
  const auto list = json_field(parse_json(text), "nodes");
  if (list.is_array())
    for (const auto& n : list)
      if (n.is_object()) out.push_back(n);
  return out;
}

/// How many nodes a `coach nodes --json` reply lists alive ("alive": true); 0 where TEXT is not
/// such a reply.
inline std::size_t alive_nodes(const std::string& text) {
  std::size_t n = 0;
  for (const auto& node : nodes_of(text))
    if (json_field(node, "alive") == true) ++n;
  return n;
}

/// The names of the nodes a `coach nodes --json` reply lists, alive or not.
inline std::vector<std::string> node_names(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& node : nodes_of(text)) out.push_back(string_field(node, "name"));
  return out;
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
/// Unless ARGS choose, the node counts only what Coach reserved (--cpu-accounting reserved):
/// the suite's other tests run beside it, and their CPUs would otherwise shrink its jobs.
inline node_process start_node(const std::vector<std::string>& args, const std::string& name,
                               const std::string& log_name = {}) {
  node_process p;
  p.name = name;
  p.log = work_dir() / ((log_name.empty() ? name : log_name) + ".log");
  // A test killed by its timeout leaves no node behind.
  std::vector<std::string> argv_s{std::string(COACH_BINARY_DIR) + "/apps/coach-node",
                                  "--exit-with-parent"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  if (std::find(args.begin(), args.end(), "--cpu-accounting") == args.end())
    argv_s.insert(argv_s.end(), {"--cpu-accounting", "reserved"});
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
    if (r.code == 0 && alive_nodes(r.out) == alive) return true;
    std::this_thread::sleep_for(200ms);
  }
  return false;
}

}  // namespace itest
