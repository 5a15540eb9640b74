#pragma once
// Child processes for the benches: spawn one (this program again, or another), stop them
// (SIGTERM, then SIGKILL after a grace period), a free loopback address, and the raw ZeroMQ echo
// server the benches measure against. Header-only; each bench is one program.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iterator>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "tests/helpers/loopback_port.hpp"

extern char** environ;

namespace coach::bench {

struct child {
  pid_t pid = -1;  ///< -1: it could not be started
};

/// Starts `program` with `args`; its stdout and stderr go to `log` when given.
inline child spawn(const std::string& program, const std::vector<std::string>& args,
                   const std::filesystem::path& log = {}) {
  std::vector<std::string> all{program};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!log.empty()) {
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  }
  child c;
  if (posix_spawn(&c.pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) c.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return c;
}

/// This program again, with `args` (its hidden serving modes).
inline child spawn_self(const std::vector<std::string>& args) {
  return spawn("/proc/self/exe", args);
}

/// SIGTERM to every child, then waits; one still running after `grace` is killed.
inline void stop(std::vector<child>& children,
                 std::chrono::milliseconds grace = std::chrono::seconds(20)) {
  for (auto& c : children)
    if (c.pid > 0) ::kill(c.pid, SIGTERM);
  for (auto& c : children) {
    if (c.pid <= 0) continue;
    const auto deadline = std::chrono::steady_clock::now() + grace;
    int status = 0;
    while (::waitpid(c.pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  children.clear();
}

/// A loopback address with a free port below the kernel's ephemeral range
/// (tests/helpers/loopback_port.hpp); the caller's child binds it next.
inline std::string free_address() {
  if (const int port = test_ports::listen_port(); port > 0)
    return "tcp://127.0.0.1:" + std::to_string(port);
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::router);
  s.bind("tcp://127.0.0.1:0");
  return s.get(zmq::sockopt::last_endpoint);
}

/// Serves a raw ZeroMQ echo at `listen` until killed: every message goes back to its sender.
/// Child: echoes every message back until killed; a CURVE server when `secret_key` (Z85) is
/// given (it then accepts any client key: no ZAP handler).
inline int serve_echo(const std::string& listen, const std::string& secret_key = {}) {
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::router);
  s.set(zmq::sockopt::linger, 0);
  if (!secret_key.empty()) {
    s.set(zmq::sockopt::curve_server, true);
    s.set(zmq::sockopt::curve_secretkey, secret_key);
  }
  s.bind(listen);
  std::vector<zmq::message_t> parts;
  for (;;) {
    parts.clear();
    if (!zmq::recv_multipart(s, std::back_inserter(parts))) continue;
    zmq::send_multipart(s, parts);
  }
}

}  // namespace coach::bench
