// worker/bounded_process.cpp: a child process under a deadline and a memory cap
// (bounded_process.hpp).
#include "worker/bounded_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

namespace coach::worker {
namespace {

/// This process's cgroup v2 directory under `root` ("" when it has none: a v1-only host).
std::string own_cgroup(const std::string& root) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("0::")) return root + line.substr(3);
  return {};
}

bool has_word(const std::string& path, std::string_view word) {
  std::ifstream in(path);
  std::string w;
  while (in >> w)
    if (w == word) return true;
  return false;
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return bool(out);
}

/// A counter in a flat-keyed cgroup file ("oom_kill 1").
std::uint64_t keyed(const std::string& path, std::string_view key) {
  std::ifstream in(path);
  std::string k;
  std::uint64_t v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

std::atomic<std::uint64_t> next_cgroup{0};

// Through syscall(): Debian 12's glibc (2.36) declares pidfd_open in <sys/pidfd.h> without C
// linkage, so C++ cannot link the wrappers.
int open_pidfd(pid_t pid) {
  return int(::syscall(SYS_pidfd_open, pid, 0));
}
int signal_pidfd(int fd, int sig) {
  return int(::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0));
}

}  // namespace

std::string_view to_string(process_end e) noexcept {
  switch (e) {
    case process_end::completed:
      return "completed";
    case process_end::failed:
      return "failed";
    case process_end::timed_out:
      return "timed out";
    case process_end::out_of_memory:
      return "out of memory";
    case process_end::killed:
      return "killed";
  }
  return "?";
}

memory_enforcement default_memory_enforcement() {
  static const memory_enforcement how = detect_memory_enforcement();
  return how;
}

std::string_view to_string(memory_enforcement m) noexcept {
  return m == memory_enforcement::cgroup ? "cgroup" : "rlimit";
}

memory_enforcement detect_memory_enforcement(const std::string& cgroup_root) {
  const auto dir = own_cgroup(cgroup_root);
  if (dir.empty() || !has_word(dir + "/cgroup.controllers", "memory"))
    return memory_enforcement::rlimit;
  // A child cgroup gets the memory controller only if whoever delegated this one hands it down
  // (cgroup.subtree_control): checked, never changed here, since that is the host's setting.
  const auto probe = dir + "/coach-probe-" + std::to_string(::getpid());
  if (::mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST) return memory_enforcement::rlimit;
  const bool ok = has_word(probe + "/cgroup.controllers", "memory");
  ::rmdir(probe.c_str());
  return ok ? memory_enforcement::cgroup : memory_enforcement::rlimit;
}

result<bounded_process> bounded_process::start(const std::vector<std::string>& argv,
                                               const process_limits& limits, memory_enforcement how,
                                               bool pipes) {
  if (argv.empty()) return fail(errc::invalid_argument, "a bounded process needs a program");
  bounded_process p;
  p.limits_ = limits;
  p.how_ = how;
  int procs_fd = -1;
  if (how == memory_enforcement::cgroup) {
    p.cgroup_ = own_cgroup("/sys/fs/cgroup") + "/coach-" + std::to_string(::getpid()) + "-" +
                std::to_string(next_cgroup++);
    if (::mkdir(p.cgroup_.c_str(), 0755) != 0)
      return fail(errc::io_error, "cannot make cgroup '{}': {}", p.cgroup_, std::strerror(errno));
    if (limits.memory_bytes > 0 &&
        (!write_file(p.cgroup_ + "/memory.max", std::to_string(limits.memory_bytes)) ||
         !write_file(p.cgroup_ + "/memory.swap.max", "0"))) {
      ::rmdir(p.cgroup_.c_str());
      return fail(errc::io_error, "cannot set memory.max in cgroup '{}'", p.cgroup_);
    }
    procs_fd = ::open((p.cgroup_ + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (procs_fd < 0) {
      ::rmdir(p.cgroup_.c_str());
      return fail(errc::io_error, "cannot open '{}/cgroup.procs': {}", p.cgroup_,
                  std::strerror(errno));
    }
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // A child gone while its input is written must not end this process (SIGPIPE): the write
  // fails instead (EPIPE), and how the child ended is read from its exit.
  static std::once_flag ignore_sigpipe;
  if (pipes) std::call_once(ignore_sigpipe, [] { std::signal(SIGPIPE, SIG_IGN); });
  // The child's stdin and stdout (with pipes): [0] read end, [1] write end.
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  auto close_pipes = [&] {
    for (int fd : {in[0], in[1], out[0], out[1]})
      if (fd >= 0) ::close(fd);
  };
  if (pipes && (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0)) {
    const int e = errno;
    close_pipes();
    if (procs_fd >= 0) ::close(procs_fd);
    return fail(errc::io_error, "pipe: {}", std::strerror(e));
  }
  // The child reports a failed exec through this pipe (closed on a successful exec).
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    const int e = errno;
    close_pipes();
    if (procs_fd >= 0) ::close(procs_fd);
    return fail(errc::io_error, "pipe: {}", std::strerror(e));
  }
  p.started_ = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    close_pipes();
    if (procs_fd >= 0) ::close(procs_fd);
    return fail(errc::io_error, "fork: {}", std::strerror(e));
  }
  if (pid == 0) {  // the child: async-signal-safe calls only
    ::close(fds[0]);
    int e = 0;
    // dup2 clears close-on-exec on the copies; the originals close at exec.
    if (pipes && (::dup2(in[0], STDIN_FILENO) < 0 || ::dup2(out[1], STDOUT_FILENO) < 0)) e = errno;
    if (e == 0 && procs_fd >= 0 && ::write(procs_fd, "0", 1) != 1) e = errno;
    if (e == 0 && how == memory_enforcement::rlimit && limits.memory_bytes > 0) {
      const rlimit r{limits.memory_bytes, limits.memory_bytes};
      if (::setrlimit(RLIMIT_DATA, &r) != 0) e = errno;
    }
    if (e == 0) {
      ::execv(args[0], args.data());
      e = errno;
    }
    [[maybe_unused]] auto n = ::write(fds[1], &e, sizeof e);
    ::_exit(127);
  }
  ::close(fds[1]);
  if (procs_fd >= 0) ::close(procs_fd);
  if (pipes) {
    ::close(in[0]);
    ::close(out[1]);
    p.in_fd_ = in[1];
    p.out_fd_ = out[0];
  }
  p.pid_ = pid;
  int child_errno = 0;
  const auto n = ::read(fds[0], &child_errno, sizeof child_errno);
  ::close(fds[0]);
  if (n == sizeof child_errno) {
    ::waitpid(pid, nullptr, 0);
    p.reaped_ = true;
    return fail(errc::io_error, "cannot run '{}': {}", argv[0], std::strerror(child_errno));
  }
  p.pidfd_ = open_pidfd(pid);
  if (p.pidfd_ < 0) {
    const int e = errno;
    p.kill();
    return fail(errc::io_error, "pidfd_open: {}", std::strerror(e));
  }
  return p;
}

bounded_process::bounded_process(bounded_process&& o) noexcept
    : pid_(o.pid_),
      pidfd_(o.pidfd_),
      in_fd_(o.in_fd_),
      out_fd_(o.out_fd_),
      cgroup_(std::move(o.cgroup_)),
      limits_(o.limits_),
      how_(o.how_),
      started_(o.started_),
      reaped_(o.reaped_),
      deadline_killed_(o.deadline_killed_) {
  o.pid_ = -1;
  o.pidfd_ = -1;
  o.in_fd_ = -1;
  o.out_fd_ = -1;
  o.cgroup_.clear();
  o.reaped_ = true;
}

bounded_process::~bounded_process() {
  if (pid_ > 0 && !reaped_) {
    kill();
    ::waitpid(pid_, nullptr, 0);
  }
  if (pidfd_ >= 0) ::close(pidfd_);
  close_input();
  if (out_fd_ >= 0) ::close(out_fd_);
  if (!cgroup_.empty()) ::rmdir(cgroup_.c_str());
}

void bounded_process::close_input() noexcept {
  if (in_fd_ >= 0) ::close(in_fd_);
  in_fd_ = -1;
}

void bounded_process::kill() noexcept {
  if (pid_ <= 0 || reaped_) return;
  if (pidfd_ >= 0)
    signal_pidfd(pidfd_, SIGKILL);
  else
    ::kill(pid_, SIGKILL);
}

namespace {
/// Milliseconds until `deadline` for poll(), rounded up (a poll that ends at a rounded-down
/// timeout would kill the child before its deadline): -1 without one, 0 once it passed.
int poll_timeout(std::chrono::milliseconds limit, std::chrono::steady_clock::time_point deadline) {
  if (limit.count() <= 0) return -1;
  const auto now = std::chrono::steady_clock::now();
  if (deadline <= now) return 0;
  return int(std::max<std::int64_t>(
      1, std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count()));
}
}  // namespace

result<bool> bounded_process::await_output() {
  if (out_fd_ < 0) return fail(errc::invalid_argument, "a bounded process without pipes");
  for (;;) {
    // Past its deadline, a child's answer does not count, even one already written.
    const int timeout = poll_timeout(limits_.deadline, started_ + limits_.deadline);
    int r = 0;
    if (timeout != 0) {
      pollfd pfd{out_fd_, POLLIN, 0};
      r = ::poll(&pfd, 1, timeout);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return fail(errc::io_error, "poll: {}", std::strerror(errno));
    }
    if (r > 0) return true;
    if (r == 0 && std::chrono::steady_clock::now() < started_ + limits_.deadline) continue;
    deadline_killed_ = true;  // the deadline passed
    kill();
    return false;
  }
}

result<process_result> bounded_process::wait() {
  if (pid_ <= 0 || reaped_) return fail(errc::invalid_argument, "no child to wait for");
  process_result out;
  out.enforcement = how_;
  bool timed_out = deadline_killed_;
  const auto deadline = started_ + limits_.deadline;
  for (;;) {
    pollfd pfd{pidfd_, POLLIN, 0};
    const int r = ::poll(&pfd, 1, poll_timeout(limits_.deadline, deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail(errc::io_error, "poll: {}", std::strerror(errno));
    if (r == 0 && std::chrono::steady_clock::now() < deadline) continue;  // woke early
    if (r == 0) {                                                         // the deadline passed
      timed_out = true;
      kill();
    }
    break;
  }
  int status = 0;
  rusage usage{};
  while (::wait4(pid_, &status, 0, &usage) < 0)
    if (errno != EINTR) return fail(errc::io_error, "wait4: {}", std::strerror(errno));
  reaped_ = true;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  out.peak_memory_bytes = std::uint64_t(usage.ru_maxrss) * 1024;  // KiB on Linux
  bool oom_killed = false;
  if (!cgroup_.empty()) {
    std::ifstream peak(cgroup_ + "/memory.peak");
    if (std::uint64_t v = 0; peak >> v) out.peak_memory_bytes = v;
    oom_killed = keyed(cgroup_ + "/memory.events", "oom_kill") > 0;
  }
  if (WIFEXITED(status)) {
    out.exit_code = WEXITSTATUS(status);
    out.end = out.exit_code == 0                    ? process_end::completed
              : out.exit_code == exit_out_of_memory ? process_end::out_of_memory
                                                    : process_end::failed;
  } else if (WIFSIGNALED(status)) {
    out.signal = WTERMSIG(status);
    out.end = timed_out    ? process_end::timed_out
              : oom_killed ? process_end::out_of_memory
                           : process_end::killed;
  }
  return out;
}

}  // namespace coach::worker

namespace coach::worker {

result<memory_cap> memory_cap::apply(pid_t pid, std::uint64_t bytes, memory_enforcement how) {
  memory_cap cap;
  cap.pid_ = pid;
  if (how == memory_enforcement::rlimit) {
    const rlimit r{bytes, bytes};
    if (::prlimit(pid, RLIMIT_DATA, &r, nullptr) != 0)
      return fail(errc::io_error, "cannot cap process {} at {} bytes (prlimit): {}", pid, bytes,
                  std::strerror(errno));
    return cap;
  }
  cap.cgroup_ = own_cgroup("/sys/fs/cgroup") + "/coach-" + std::to_string(::getpid()) + "-" +
                std::to_string(next_cgroup++);
  if (::mkdir(cap.cgroup_.c_str(), 0755) != 0) {
    const int e = errno;
    const auto dir = std::move(cap.cgroup_);
    cap.cgroup_.clear();
    return fail(errc::io_error, "cannot make cgroup '{}': {}", dir, std::strerror(e));
  }
  if (!write_file(cap.cgroup_ + "/memory.max", std::to_string(bytes)) ||
      !write_file(cap.cgroup_ + "/memory.swap.max", "0") ||
      !write_file(cap.cgroup_ + "/cgroup.procs", std::to_string(pid)))
    return fail(errc::io_error, "cannot put process {} under memory.max in cgroup '{}'", pid,
                cap.cgroup_);
  return cap;
}

memory_cap& memory_cap::operator=(memory_cap&& o) noexcept {
  if (this != &o) {
    if (!cgroup_.empty()) ::rmdir(cgroup_.c_str());
    cgroup_ = std::move(o.cgroup_);
    pid_ = o.pid_;
    o.cgroup_.clear();
  }
  return *this;
}

memory_cap::~memory_cap() {
  if (!cgroup_.empty()) ::rmdir(cgroup_.c_str());
}

bool memory_cap::oom_killed() const {
  return !cgroup_.empty() && keyed(cgroup_ + "/memory.events", "oom_kill") > 0;
}

std::uint64_t memory_cap::peak_bytes() const {
  if (!cgroup_.empty()) {
    std::ifstream peak(cgroup_ + "/memory.peak");
    if (std::uint64_t v = 0; peak >> v) return v;
  }
  if (pid_ <= 0) return 0;
  std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with("VmHWM:")) {
      std::istringstream in(line.substr(6));
      std::uint64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
  return 0;
}

}  // namespace coach::worker
