#pragma once
// worker::bounded_process: one child process under a deadline and a memory cap, as the operating
// system enforces them. Function mode (issue 15: a worker is a sequence of bounded invocations)
// runs each invocation as one: a child that pulls the parameters, trains on a bounded number of
// chunks, pushes and exits.
//
// The memory cap: a cgroup v2 of its own with `memory.max` (and `memory.swap.max` 0) where the
// host delegates the memory controller to this process's cgroup; the kernel then kills the
// child when it exceeds the cap, and memory.events counts the kill. Elsewhere (cgroup v1 hosts,
// containers without delegation) `setrlimit(RLIMIT_DATA)`, which makes the child's allocations
// fail beyond the cap: a child reports that by exiting with exit_out_of_memory (function mode's
// invocations catch std::bad_alloc and do). The deadline: the parent waits on a pidfd and kills
// the child (SIGKILL) when it passes. Peak memory: the cgroup's `memory.peak` where there is one,
// else the child's maximum resident set (wait4), which Linux keeps across fork and exec: it
// includes this process's resident size at the fork, an upper bound only (a child that needs
// its own reads VmHWM from /proc/self/status, as coach-invocation does).
//
// Threads: a bounded_process belongs to one thread; different ones may run concurrently. The
// child is started with fork() and execv(), with only async-signal-safe calls between them, so
// a multithreaded parent (CAF) is safe.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace coach::worker {

/// What bounds one child. Zero: unbounded.
struct process_limits {
  std::chrono::milliseconds deadline{0};
  std::uint64_t memory_bytes = 0;
};

/// How a child ended.
enum class process_end {
  completed,      ///< exited with 0
  failed,         ///< exited with another code (not exit_out_of_memory)
  timed_out,      ///< killed at its deadline
  out_of_memory,  ///< killed by the cgroup's OOM killer, or exited with exit_out_of_memory
  killed,         ///< killed by a signal (kill(), or another)
};
/// "completed", "failed", "timed out", "out of memory", "killed".
std::string_view to_string(process_end e) noexcept;

/// The exit code of a child whose allocation failed under RLIMIT_DATA.
inline constexpr int exit_out_of_memory = 3;

/// How a memory cap is enforced on this host.
enum class memory_enforcement { cgroup, rlimit };
std::string_view to_string(memory_enforcement m) noexcept;
/// cgroup when this process's cgroup v2 has the memory controller and a child cgroup can be
/// made in it with that controller (the host delegated it; cgroup_root, default
/// /sys/fs/cgroup); else rlimit. Probes on every call.
memory_enforcement detect_memory_enforcement(const std::string& cgroup_root = "/sys/fs/cgroup");
/// detect_memory_enforcement() of the first call, kept for the process's life (a probe makes
/// and removes a cgroup: not once per invocation).
memory_enforcement default_memory_enforcement();

struct process_result {
  process_end end = process_end::completed;
  int exit_code = 0;  ///< when it exited
  int signal = 0;     ///< when a signal ended it
  std::uint64_t peak_memory_bytes = 0;
  double seconds = 0;  ///< from start to end
  memory_enforcement enforcement = memory_enforcement::rlimit;
};

/// A memory cap put on a process already running (a script started with posix_spawn): a
/// cgroup of its own (cgroup enforcement) or its RLIMIT_DATA set with prlimit (rlimit). What it
/// allocated before the cap came stays uncounted: cap it right after it starts.
class memory_cap {
 public:
  /// Caps `pid` at `bytes` (> 0). Errors: io_error naming the cgroup or prlimit's errno.
  static result<memory_cap> apply(pid_t pid, std::uint64_t bytes,
                                  memory_enforcement how = default_memory_enforcement());
  /// No cap: only peak_bytes() of `pid`.
  static memory_cap watch(pid_t pid) {
    memory_cap c;
    c.pid_ = pid;
    return c;
  }
  memory_cap() = default;
  memory_cap(memory_cap&& o) noexcept : cgroup_(std::move(o.cgroup_)), pid_(o.pid_) {
    o.cgroup_.clear();
  }
  memory_cap& operator=(memory_cap&& o) noexcept;
  /// Removes its cgroup (once the process is reaped: a cgroup with members stays).
  ~memory_cap();
  /// Whether the kernel's OOM killer ended a process of its cgroup (false under rlimit).
  bool oom_killed() const;
  /// The largest memory use so far: the cgroup's memory.peak, else the process's resident
  /// high-water mark (VmHWM; 0 once it is gone).
  std::uint64_t peak_bytes() const;

 private:
  std::string cgroup_;
  pid_t pid_ = -1;
};

class bounded_process {
 public:
  /// Starts `argv[0]` (a path) with `argv` under `limits`; with `pipes`, the child's stdin and
  /// stdout are pipes to this process (input_fd(), output_fd()), else it inherits them; with
  /// pipes, this process ignores SIGPIPE from then on (a write to a child gone fails instead).
  /// Errors: invalid_argument for an empty argv; io_error when the child cannot be made or the
  /// program not run (its errno's text).
  static result<bounded_process> start(const std::vector<std::string>& argv,
                                       const process_limits& limits,
                                       memory_enforcement how = default_memory_enforcement(),
                                       bool pipes = false);

  bounded_process(bounded_process&& other) noexcept;
  bounded_process& operator=(bounded_process&&) = delete;
  /// Kills and reaps a child not waited for.
  ~bounded_process();

  /// Waits until the child ends, killing it when its deadline passes. Call once.
  result<process_result> wait();
  /// Kills the child now (SIGKILL); wait() says killed.
  void kill() noexcept;
  pid_t pid() const noexcept { return pid_; }
  /// With pipes: writes reach the child's stdin (-1 once closed, or without pipes).
  int input_fd() const noexcept { return in_fd_; }
  /// With pipes: reads the child's stdout (-1 without pipes).
  int output_fd() const noexcept { return out_fd_; }
  /// Closes the child's stdin: it reads the end of its input.
  void close_input() noexcept;
  /// With pipes: waits until the child's stdout can be read (data, or its end), killing the
  /// child when its deadline passes first (wait() then says timed out): the deadline holds
  /// while the parent reads, not only in wait(). True when there is something to read.
  result<bool> await_output();

 private:
  bounded_process() = default;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int in_fd_ = -1;
  int out_fd_ = -1;
  std::string cgroup_;  ///< its cgroup's directory; empty under rlimit
  process_limits limits_;
  memory_enforcement how_ = memory_enforcement::rlimit;
  std::chrono::steady_clock::time_point started_{};
  bool reaped_ = false;
  bool deadline_killed_ = false;  ///< await_output() killed it at its deadline
};

}  // namespace coach::worker
