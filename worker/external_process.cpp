// worker/external_process.cpp: one process of a user's script and its channel
// (external_process.hpp): started, its lines sent and received, its stderr kept, how it ended,
// stopped. The exchanges on the channel (handshake, step, evaluation) are in
// external_messages.cpp.
#include "worker/external_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/format.hpp"
#include "common/log.hpp"
#include "worker/external_shown.hpp"

extern char** environ;

namespace coach::worker {
namespace {

using clock_type = std::chrono::steady_clock;
using detail::shown;

/// The longest line either side may send.
constexpr std::size_t max_line = std::size_t(1) << 20;
/// The stderr lines kept for the message that names a failed process.
constexpr std::size_t tail_lines = 20;
/// The control channel's descriptor in the process.
constexpr int control_fd = 3;

/// `environ` with COACH_*, PYTHONPATH and the thread count set for the script.
std::vector<std::string> script_environment(const script_options& o) {
  std::vector<std::string> env;
  std::string pythonpath = o.package_dir;
  bool has_omp = false;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view v(*e);
    if (v.starts_with("COACH_CONTROL_FD=") || v.starts_with("COACH_PROTOCOL=") ||
        v.starts_with("COACH_SEED=") || v.starts_with("COACH_JOB=") ||
        v.starts_with("PYTHONUNBUFFERED="))
      continue;
    if (v.starts_with("PYTHONPATH=")) {
      const auto rest = v.substr(11);
      if (!rest.empty()) pythonpath += (pythonpath.empty() ? "" : ":") + std::string(rest);
      continue;
    }
    if (v.starts_with("OMP_NUM_THREADS=")) has_omp = true;
    env.emplace_back(v);
  }
  env.push_back(coach::format("COACH_CONTROL_FD={}", control_fd));
  env.push_back("COACH_PROTOCOL=1");
  env.push_back(coach::format("COACH_SEED={}", o.seed));
  env.push_back(coach::format("COACH_JOB={}", o.job));
  env.push_back("PYTHONUNBUFFERED=1");
  if (!pythonpath.empty()) env.push_back("PYTHONPATH=" + pythonpath);
  if (o.threads > 0 && !has_omp) env.push_back(coach::format("OMP_NUM_THREADS={}", o.threads));
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& v) {
  std::vector<char*> p;
  for (auto& s : v) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

}  // namespace

result<std::string> find_python_package() {
  if (const char* env = std::getenv("COACH_PYTHON_PACKAGE"); env && *env) {
    if (std::filesystem::exists(std::filesystem::path(env) / "coach" / "__init__.py"))
      return std::string(env);
    return fail(errc::not_found, "COACH_PYTHON_PACKAGE='{}' has no coach/__init__.py", env);
  }
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::vector<std::filesystem::path> places;
  if (!ec) {
    auto dir = self.parent_path();
    places.push_back(dir.parent_path() / "share" / "coach" / "python");
    for (int up = 0; up < 4 && !dir.empty(); ++up, dir = dir.parent_path())
      places.push_back(dir / "python");
  }
  std::string looked;
  for (const auto& p : places) {
    if (std::filesystem::exists(p / "coach" / "__init__.py", ec)) return p.string();
    looked += (looked.empty() ? "" : ", ") + p.string();
  }
  return fail(errc::not_found,
              "the coach Python package is not in {} (set COACH_PYTHON_PACKAGE to its folder)",
              looked);
}

std::string default_python() {
  if (const char* env = std::getenv("COACH_PYTHON"); env && *env) return env;
  if (::access("/opt/coach-venv/bin/python", X_OK) == 0) return "/opt/coach-venv/bin/python";
  return "python3";
}

result<std::unique_ptr<external_process>> external_process::start(const script_options& opt,
                                                                  std::string who) {
  std::unique_ptr<external_process> p(new external_process());
  p->who_ = std::move(who);
  p->script_name_ = std::filesystem::path(opt.script).filename().string();
  p->start_timeout_ =
      std::chrono::milliseconds(std::int64_t(std::max(0.001, opt.start_timeout_s) * 1000));
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    return fail(errc::io_error, "{}: no socket for the script: {}", p->who_, std::strerror(errno));
  int errpipe[2];
  if (::pipe2(errpipe, O_CLOEXEC) != 0) {
    ::close(pair[0]);
    ::close(pair[1]);
    return fail(errc::io_error, "{}: no pipe for the script: {}", p->who_, std::strerror(errno));
  }
  p->sock_ = pair[0];
  p->err_ = errpipe[0];
  // The child's ends must not already sit on the descriptors they are moved to.
  int child_sock = ::fcntl(pair[1], F_DUPFD_CLOEXEC, 10);
  int child_err = ::fcntl(errpipe[1], F_DUPFD_CLOEXEC, 10);
  ::close(pair[1]);
  ::close(errpipe[1]);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, child_err, 2);
  posix_spawn_file_actions_adddup2(&fa, child_sock, control_fd);
  const auto dir = std::filesystem::path(opt.script).parent_path().string();
  if (!dir.empty()) posix_spawn_file_actions_addchdir_np(&fa, dir.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  // A process group of its own: a Ctrl-C at the terminal reaches Coach, which stops it.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_USEVFORK);
  std::vector<std::string> args{opt.python, opt.script};
  args.insert(args.end(), opt.args.begin(), opt.args.end());
  auto env = script_environment(opt);
  auto argv = pointers(args);
  auto envp = pointers(env);
  pid_t pid = -1;
  const int rc =
      opt.python.find('/') != std::string::npos
          ? ::posix_spawn(&pid, opt.python.c_str(), &fa, &attr, argv.data(), envp.data())
          : ::posix_spawnp(&pid, opt.python.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(child_sock);
  ::close(child_err);
  if (rc != 0)
    return fail(errc::io_error, "{}: cannot run {} {}: {}", p->who_, opt.python, opt.script,
                std::strerror(rc));
  p->pid_ = pid;
  p->memory_bytes_ = opt.memory_bytes;
  if (opt.memory_bytes > 0) {
    auto cap = memory_cap::apply(pid, opt.memory_bytes);
    if (!cap) {
      p->kill();
      return fail(errc::io_error, "{}: {}", p->who_, cap.error().message);
    }
    p->cap_ = std::move(*cap);
  } else {
    p->cap_ = memory_cap::watch(pid);
  }
  log::debug("{}: started {} {} (pid {})", p->who_, opt.python, opt.script, pid);
  return p;
}

external_process::~external_process() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  if (!shm_path_.empty()) ::unlink(shm_path_.c_str());
  if (sock_ >= 0) ::close(sock_);
  if (err_ >= 0) ::close(err_);
}

result<void> external_process::send(const std::string& line) {
  std::size_t done = 0;
  while (done < line.size()) {
    const auto n = ::send(sock_, line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::unexpected(ended("while Coach wrote to it"));
    done += std::size_t(n);
  }
  return {};
}

bool external_process::drain_stderr() {
  if (err_ < 0) return false;
  char buf[4096];
  const auto n = ::read(err_, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!err_buf_.empty()) {
      log::info("{} ({}): {}", script_name_, who_, err_buf_);
      tail_.push_back(std::move(err_buf_));
      err_buf_.clear();
    }
    ::close(err_);
    err_ = -1;
    return false;
  }
  err_buf_.append(buf, std::size_t(n));
  std::size_t pos;
  while ((pos = err_buf_.find('\n')) != std::string::npos) {
    std::string line = err_buf_.substr(0, pos);
    err_buf_.erase(0, pos + 1);
    log::info("{} ({}): {}", script_name_, who_, line);
    tail_.push_back(std::move(line));
    if (tail_.size() > tail_lines) tail_.pop_front();
  }
  if (err_buf_.size() > 64 * 1024) {  // a line without end: kept in pieces
    tail_.push_back(err_buf_.substr(0, 200));
    err_buf_.clear();
  }
  return true;
}

result<std::string> external_process::receive(std::optional<clock_type::time_point> deadline,
                                              std::string_view during) {
  for (;;) {
    if (auto pos = in_.find('\n'); pos != std::string::npos) {
      std::string line = in_.substr(0, pos);
      in_.erase(0, pos + 1);
      return line;
    }
    if (in_.size() > max_line)
      return std::unexpected(refuse(error{
          errc::protocol_error, coach::format("{}: script process {} sent a line of more than {} "
                                              "bytes on the control channel",
                                              who_, pid_, max_line)}));
    pollfd fds[2] = {{sock_, POLLIN, 0}, {err_, POLLIN, 0}};
    int timeout = -1;
    if (deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - clock_type::now());
      if (left.count() <= 0) {
        kill();
        timed_out_ = true;
        end_ = process_end::timed_out;
        return fail(errc::resource_exhausted, "");
      }
      timeout = int(std::min<std::int64_t>(left.count() + 1, 1000 * 1000));
    }
    const int n = ::poll(fds, err_ >= 0 ? 2 : 1, timeout);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errc::io_error, "{}: poll: {}", who_, std::strerror(errno));
    if (err_ >= 0 && (fds[1].revents & (POLLIN | POLLHUP))) drain_stderr();
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[65536];
      const auto got = ::recv(sock_, buf, sizeof buf, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return std::unexpected(ended(during));
      in_.append(buf, std::size_t(got));
    }
  }
}

error external_process::ended(std::string_view during) {
  ready_ = false;
  std::string how = "ended";
  if (pid_ > 0 && !reaped_) {
    // Its socket closed: the process is ending. Give it a moment, then make sure.
    int status = 0;
    pid_t r = 0;
    const auto until = clock_type::now() + std::chrono::seconds(2);
    // Woken the moment it exits (a pidfd polls readable then), or by its last stderr lines.
    const int pidfd = int(::syscall(SYS_pidfd_open, pid_, 0));
    while ((r = ::waitpid(pid_, &status, WNOHANG)) == 0 && clock_type::now() < until) {
      pollfd f[2] = {{pidfd, POLLIN, 0}, {err_, POLLIN, 0}};
      const int n = err_ >= 0 ? 2 : 1;
      if (pidfd < 0) {
        f[0] = f[1];
        if (err_ < 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          continue;
        }
      }
      if (::poll(f, nfds_t(pidfd < 0 ? 1 : n), 20) > 0)
        for (const auto& e : f)
          if (e.fd == err_ && (e.revents & (POLLIN | POLLHUP))) drain_stderr();
    }
    if (pidfd >= 0) ::close(pidfd);
    end_ = process_end::failed;
    if (r == 0) {
      ::kill(pid_, SIGKILL);
      r = ::waitpid(pid_, &status, 0);
      how = "closed its control channel and was killed";
    } else if (WIFEXITED(status)) {
      how = coach::format("exited with code {}", WEXITSTATUS(status));
      if (WEXITSTATUS(status) == exit_out_of_memory) end_ = process_end::out_of_memory;
    } else if (WIFSIGNALED(status)) {
      how = coach::format("was killed by signal {} ({})", WTERMSIG(status),
                          ::strsignal(WTERMSIG(status)));
      end_ = cap_.oom_killed() ? process_end::out_of_memory : process_end::killed;
      if (end_ == process_end::out_of_memory) how += " for memory (its cgroup's memory.max)";
    }
    reaped_ = r == pid_;
  }
  while (drain_stderr()) {
  }
  // An allocation that failed before init (no hook to say so yet) ends in a traceback whose
  // last line names it.
  if (end_ == process_end::failed && !tail_.empty()) {
    const auto& t = tail_.back();
    for (std::string_view mark : {"MemoryError", "can't allocate memory", "Cannot allocate memory",
                                  "failed to map segment"})
      if (t.find(mark) != std::string::npos) end_ = process_end::out_of_memory;
  }
  // Under a cap, say so: an import that cannot map its library names no memory.
  if (memory_bytes_ > 0 && end_ != process_end::completed)
    how += coach::format(" (under a memory cap of {} MB, function.memory_mb)", memory_bytes_ >> 20);
  std::string last;
  const std::size_t from = tail_.size() > 3 ? tail_.size() - 3 : 0;
  for (std::size_t i = from; i < tail_.size(); ++i)
    last += (last.empty() ? "" : " | ") + shown(tail_[i], 300);
  return error{end_ == process_end::out_of_memory ? errc::resource_exhausted : errc::io_error,
               coach::format("{} ({}, pid {}) {} {}{}{}", script_name_, who_, pid_, how, during,
                             last.empty() ? "" : ": ", last)};
}

error external_process::start_timed_out() const {
  return error{errc::io_error,
               coach::format("{}: the script {} did not call init within {:g} s "
                             "(model.start_timeout_s); killed",
                             who_, script_name_, double(start_timeout_.count()) / 1000.0)};
}

error external_process::refuse(error why) {
  kill();  // the caller reports `why`
  if (end_ == process_end::completed) end_ = process_end::failed;
  ready_ = false;
  return why;
}

void external_process::kill() noexcept {
  if (pid_ > 0 && !reaped_) ::kill(pid_, SIGKILL);
  ready_ = false;
}

void external_process::stop(std::chrono::milliseconds grace) noexcept {
  request_stop();
  finish_stop(clock_type::now() + grace);
}

void external_process::request_stop() noexcept {
  if (pid_ <= 0 || reaped_) return;
  if (ready_) {
    const std::string line = "{\"op\":\"stop\"}\n";
    (void)::send(sock_, line.data(), line.size(), MSG_NOSIGNAL);
  }
  ready_ = false;
}

void external_process::finish_stop(clock_type::time_point until) noexcept {
  if (pid_ <= 0 || reaped_) return;
  const auto since = clock_type::now();
  while (clock_type::now() < until) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      reaped_ = true;
      break;
    }
    if (err_ >= 0) {
      pollfd f{err_, POLLIN, 0};
      if (::poll(&f, 1, 20) > 0) drain_stderr();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (!reaped_) {
    log::warn("{}: script process {} did not end within {:.1f} s of stop; killed", who_, pid_,
              std::chrono::duration<double>(clock_type::now() - since).count());
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    reaped_ = true;
  }
}

}  // namespace coach::worker
