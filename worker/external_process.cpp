// worker/external_process.cpp: one process of a user's script and its channel
// (external_process.hpp).
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

#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/format.hpp"
#include "common/log.hpp"

extern char** environ;

namespace coach::worker {
namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

/// The longest line either side may send.
constexpr std::size_t max_line = std::size_t(1) << 20;
/// The stderr lines kept for the message that names a failed process.
constexpr std::size_t tail_lines = 20;
/// The control channel's descriptor in the process.
constexpr int control_fd = 3;

std::atomic<std::uint64_t> next_shm{0};

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

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

/// At most `n` bytes of `text` for a message, with what cannot be printed escaped.
std::string shown(std::string_view text, std::size_t n = 80) {
  std::string out;
  for (char c : text.substr(0, n)) {
    if (c >= 0x20 && c < 0x7f)
      out += c;
    else
      out += coach::format("\\x{:02x}", static_cast<unsigned char>(c));
  }
  if (text.size() > n) out += "...";
  return out;
}

}  // namespace

std::string external_totals::summary() const {
  const double per = steps ? 1000.0 / double(steps) : 0;
  return coach::format(
      "{} steps: parameters in {:.3f} ms, the script's copies {:.3f} ms, its compute {:.3f} ms, "
      "gradient out {:.3f} ms a step",
      steps, copy_in_s * per, handoff_s * per, (compute_s - handoff_s) * per, copy_out_s * per);
}

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

result<void> external_process::map_shared(std::size_t floats) {
  floats_ = floats;
  const std::size_t grads_offset = (floats * sizeof(float) + 63) / 64 * 64;
  map_bytes_ = grads_offset + floats * sizeof(float);
  shm_path_ = coach::format("/dev/shm/coach-{}-{}", ::getpid(), next_shm++);
  const int fd = ::open(shm_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    auto why = coach::format("{}: cannot create {}: {}", who_, shm_path_, std::strerror(errno));
    shm_path_.clear();
    return std::unexpected(refuse(error{errc::io_error, why}));
  }
  if (::ftruncate(fd, off_t(map_bytes_)) != 0) {
    ::close(fd);
    return std::unexpected(
        refuse(error{errc::io_error, coach::format("{}: cannot size {} to {} bytes: {}", who_,
                                                   shm_path_, map_bytes_, std::strerror(errno))}));
  }
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    return std::unexpected(
        refuse(error{errc::io_error, coach::format("{}: cannot map {}: {}", who_, shm_path_,
                                                   std::strerror(errno))}));
  }
  params_ = static_cast<float*>(map_);
  grads_ = reinterpret_cast<float*>(static_cast<char*>(map_) + grads_offset);
  return {};
}

result<external_layout> external_process::handshake(const external_layout* registered,
                                                    std::vector<float>* initial) {
  auto line = receive(clock_type::now() + start_timeout_, "before it called init");
  if (!line) return std::unexpected(timed_out_ ? start_timed_out() : line.error());
  const json hello = json::parse(*line, nullptr, false);
  if (hello.is_discarded() || !hello.is_object() || hello.value("op", "") != "hello")
    return std::unexpected(refuse(error{
        errc::protocol_error, coach::format("{}: script process {} sent '{}' where its hello was "
                                            "due",
                                            who_, pid_, shown(*line))}));
  auto layout = parse_hello(*line);
  std::optional<std::string> refused;
  if (!layout)
    refused = layout.error().message;
  else if (registered != nullptr)
    refused = layout_difference(*registered, *layout);
  if (refused) {
    (void)send(json{{"op", "refused"}, {"message", *refused}}.dump() + "\n");
    const errc code = layout ? errc::invalid_argument : layout.error().code;
    return std::unexpected(refuse(
        error{code, coach::format("{}: the script's layout is refused: {}", who_, *refused)}));
  }
  test_samples_ = layout->test_samples;
  tables_ = layout->tables;
  if (auto ok = map_shared(layout->floats); !ok) return std::unexpected(ok.error());
  const bool first = registered == nullptr;
  const json answer = {{"op", "layout"},
                       {"shm", shm_path_},
                       {"floats", layout->floats},
                       {"grads_offset", reinterpret_cast<char*>(grads_) - static_cast<char*>(map_)},
                       {"send_initial", first}};
  if (auto ok = send(answer.dump() + "\n"); !ok) return std::unexpected(ok.error());
  auto reply = receive(clock_type::now() + start_timeout_, "during its handshake");
  if (!reply) return std::unexpected(timed_out_ ? start_timed_out() : reply.error());
  const json r = json::parse(*reply, nullptr, false);
  const std::string want = first ? "initial" : "ready";
  if (r.is_discarded() || !r.is_object() || r.value("op", "") != want) {
    if (r.is_object() && r.value("op", "") == "error")
      return std::unexpected(refuse(
          error{errc::invalid_argument,
                coach::format("{}: {}", who_, shown(r.value("message", std::string("?")), 300))}));
    return std::unexpected(refuse(error{
        errc::protocol_error, coach::format("{}: script process {} sent '{}' where '{}' was due",
                                            who_, pid_, shown(*reply), want)}));
  }
  // Mapped by both: nothing is left behind whichever ends first.
  ::unlink(shm_path_.c_str());
  shm_path_.clear();
  if (first && initial != nullptr) initial->assign(params_, params_ + floats_);
  ready_ = true;
  log::debug("{}: script process {} ready ({} floats, {} tensors, {})", who_, pid_, floats_,
             layout->tensors.size(), layout->framework);
  return std::move(*layout);
}

result<external_step> external_process::step(std::int64_t step, std::uint32_t rank,
                                             const float* params,
                                             std::span<const std::uint32_t> indices, float* grad,
                                             const invocation_deadline* deadline,
                                             const external_step_rows* rows) {
  if (!ready_)
    return fail(errc::io_error, "{}: script process {} is not ready for a step", who_, pid_);
  external_step out;
  auto t0 = clock_type::now();
  if (params != params_) std::memcpy(params_, params, floats_ * sizeof(float));
  out.copy_in_s = seconds_since(t0);
  std::string msg =
      coach::format("{{\"op\":\"step\",\"step\":{},\"rank\":{},\"indices\":[", step, rank);
  msg.reserve(msg.size() + indices.size() * 7 + 4);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (i) msg += ',';
    msg += std::to_string(indices[i]);
  }
  msg += ']';
  if (rows != nullptr) {
    auto fields = put_step_rows(*rows);
    if (!fields) return std::unexpected(fields.error());
    msg += *fields;
  }
  msg += "}\n";
  t0 = clock_type::now();
  if (auto ok = send(msg); !ok) return std::unexpected(ok.error());
  auto line = receive(deadline ? std::optional(deadline->at) : std::nullopt,
                      coach::format("during step {}", step));
  if (!line && timed_out_)
    return fail(errc::resource_exhausted,
                "{}: the script {} did not finish step {} within its invocation's deadline "
                "({:g} s, function.deadline_s); killed",
                who_, script_name_, step, deadline ? deadline->seconds : 0.0);
  if (!line) return std::unexpected(line.error());
  out.compute_s = seconds_since(t0);
  const json r = json::parse(*line, nullptr, false);
  const auto op = r.is_object() ? r.value("op", "") : std::string();
  if (op == "error") {
    // A MemoryError (or a framework's allocation failure) says "kind": "memory".
    const bool memory = r.value("kind", std::string()) == "memory";
    if (memory) end_ = process_end::out_of_memory;
    return std::unexpected(
        refuse(error{memory ? errc::resource_exhausted : errc::invalid_argument,
                     coach::format("{}: step {} failed in the script{}: {}", who_, step,
                                   memory ? " for memory" : "",
                                   shown(r.value("message", std::string("?")), 300))}));
  }
  const auto samples = r.is_object() ? r.find("samples") : r.end();
  const auto loss = r.is_object() ? r.find("loss_sum") : r.end();
  if (op != "done" || r.value("step", std::int64_t(-1)) != step || samples == r.end() ||
      !samples->is_number_unsigned() || loss == r.end() || !(loss->is_number() || loss->is_null()))
    return std::unexpected(
        refuse(error{errc::protocol_error,
                     coach::format("{}: script process {} sent '{}' where step {}'s done was due",
                                   who_, pid_, shown(*line), step)}));
  out.samples = samples->get<std::uint64_t>();
  out.loss_sum = loss->is_null() ? std::nan("") : loss->get<double>();
  if (out.samples != indices.size())
    return std::unexpected(
        refuse(error{errc::invalid_argument,
                     coach::format("{}: the script computed {} samples of step {}; it was given {}",
                                   who_, out.samples, step, indices.size())}));
  if (auto h = r.find("handoff_s"); h != r.end() && h->is_number() && h->get<double>() >= 0)
    out.handoff_s = std::min(h->get<double>(), out.compute_s);
  t0 = clock_type::now();
  std::memcpy(grad, grads_, floats_ * sizeof(float));
  if (rows != nullptr) take_row_grads(*rows);
  out.copy_out_s = seconds_since(t0);
  ++totals_.steps;
  totals_.copy_in_s += out.copy_in_s;
  totals_.compute_s += out.compute_s;
  totals_.handoff_s += out.handoff_s;
  totals_.copy_out_s += out.copy_out_s;
  return out;
}

result<external_eval> external_process::evaluate(std::uint32_t epoch, const float* params,
                                                 const external_row_source* rows) {
  if (test_samples_ == 0)
    return fail(errc::unsupported, "{}: the script registered no evaluation (test_samples 0)",
                who_);
  if (!ready_)
    return fail(errc::io_error, "{}: script process {} is not ready to evaluate", who_, pid_);
  std::memcpy(params_, params, floats_ * sizeof(float));
  if (auto ok = send(coach::format("{{\"op\":\"evaluate\",\"epoch\":{}}}\n", epoch)); !ok)
    return std::unexpected(ok.error());
  const auto during = coach::format("while evaluating epoch {}", epoch);
  auto line = receive(std::nullopt, during);
  json r;
  std::string op;
  for (;; line = receive(std::nullopt, during)) {  // a script with tables pulls its rows
    if (!line) return std::unexpected(line.error());
    r = json::parse(*line, nullptr, false);
    op = r.is_object() ? r.value("op", "") : std::string();
    if (op != "pull") break;
    if (auto ok = answer_pull(*line, epoch, rows); !ok) return std::unexpected(ok.error());
  }
  rows_.unlink();
  if (op == "error")
    return std::unexpected(
        refuse(error{errc::invalid_argument,
                     coach::format("{}: evaluating epoch {} failed in the script: {}", who_, epoch,
                                   shown(r.value("message", std::string("?")), 300))}));
  external_eval out;
  try {
    if (op != "evaluated" || r.at("epoch").get<std::int64_t>() != std::int64_t(epoch))
      throw std::runtime_error("op");
    out.epoch = epoch;
    out.samples = r.at("samples").get<std::uint64_t>();
    out.correct = r.at("correct").get<std::uint64_t>();
    out.loss_sum = r.at("loss_sum").is_null() ? std::nan("") : r.at("loss_sum").get<double>();
    if (auto a = r.find("auc"); a != r.end() && a->is_number() && *a >= 0 && *a <= 1)
      out.auc = a->get<double>();
    if (auto l = r.find("log_loss"); l != r.end() && l->is_number() && *l >= 0)
      out.log_loss = l->get<double>();
  } catch (const std::exception&) {
    return std::unexpected(refuse(
        error{errc::protocol_error,
              coach::format("{}: script process {} sent '{}' where epoch {}'s evaluation was due",
                            who_, pid_, shown(*line), epoch)}));
  }
  if (out.correct > out.samples)
    return std::unexpected(
        refuse(error{errc::protocol_error,
                     coach::format("{}: the script's evaluation counts {} correct of {} samples",
                                   who_, out.correct, out.samples)}));
  return out;
}

}  // namespace coach::worker
