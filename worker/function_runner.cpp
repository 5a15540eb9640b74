// worker/function_runner.cpp: a worker's invocations (function_runner.hpp).
#include "worker/function_runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace coach::worker {

result<std::string> find_invocation_program() {
  if (const char* env = std::getenv("COACH_INVOCATION"); env && *env) {
    if (::access(env, X_OK) == 0) return std::string(env);
    return fail(errc::not_found, "function mode: COACH_INVOCATION='{}' is not an executable", env);
  }
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return fail(errc::not_found, "function mode: cannot find this program: {}", ec.message());
  const auto beside = self.parent_path() / "coach-invocation";
  const auto in_apps = self.parent_path().parent_path() / "apps" / "coach-invocation";
  for (const auto& p : {beside, in_apps})
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  return fail(errc::not_found,
              "function mode: coach-invocation is neither at {} nor at {} (set COACH_INVOCATION)",
              beside.string(), in_apps.string());
}

void count_end(invocation_counts& c, process_end e) noexcept {
  switch (e) {
    case process_end::completed:
      ++c.completed;
      break;
    case process_end::timed_out:
      ++c.timed_out;
      break;
    case process_end::out_of_memory:
      ++c.out_of_memory;
      break;
    case process_end::failed:
    case process_end::killed:
      ++c.failed;
      break;
  }
}

function_runner::function_runner(std::string program, invocation_setup setup, process_limits limits,
                                 std::uint32_t tasks_per_invocation, std::uint32_t max_attempts)
    : program_(std::move(program)),
      setup_(std::move(setup)),
      limits_(limits),
      per_invocation_(std::max<std::uint32_t>(1, tasks_per_invocation)),
      max_attempts_(std::max<std::uint32_t>(1, max_attempts)) {}

function_runner::~function_runner() {
  if (child_) finish();
}

result<void> function_runner::start() {
  auto c = bounded_process::start({program_, "--tasks", std::to_string(per_invocation_)}, limits_,
                                  default_memory_enforcement(), true);
  if (!c) return std::unexpected(c.error());
  child_.emplace(std::move(*c));
  answered_ = 0;
  ++counts_.started;
  if (auto w = write_setup(child_->input_fd(), setup_); !w) {
    finish();   // it died at once: counted by how it ended
    return {};  // run() notices there is no child and tries again
  }
  return {};
}

process_end function_runner::finish() {
  child_->close_input();
  auto r = child_->wait();
  child_.reset();
  if (!r) {
    ++counts_.failed;
    return process_end::failed;
  }
  // Under a cgroup its memory.peak is the child's own; under rlimit wait4's figure includes the
  // resident size of this process at the fork, so only the child's answers (VmHWM) count.
  if (r->enforcement == memory_enforcement::cgroup)
    counts_.peak_memory_bytes = std::max(counts_.peak_memory_bytes, r->peak_memory_bytes);
  count_end(counts_, r->end);
  return r->end;
}

result<invocation_result> function_runner::run(const invocation_task& task) {
  process_end last = process_end::completed;
  for (std::uint32_t attempt = 0; attempt < max_attempts_;) {
    if (!child_) {
      if (auto s = start(); !s) return std::unexpected(s.error());
      if (!child_) {  // it ended before taking the model
        ++attempt;
        continue;
      }
    }
    // The deadline holds while the answer is awaited (await_output kills the child at it).
    result<std::optional<invocation_result>> answer = std::optional<invocation_result>{};
    if (write_task(child_->input_fd(), task)) {
      auto ready = child_->await_output();
      if (ready && *ready) answer = read_result(child_->output_fd());
    }
    if (answer && *answer) {
      ++answered_;
      ++counts_.tasks;
      auto r = std::move(**answer);
      counts_.peak_memory_bytes = std::max(counts_.peak_memory_bytes, r.peak_rss_bytes);
      if (answered_ >= per_invocation_) finish();  // it exits by itself after its tasks
      return r;
    }
    // No answer: the child ended (deadline, memory, crash) or broke the protocol. The task
    // goes to a fresh one; a child that had answered earlier tasks does not count against it.
    const bool fresh = answered_ == 0;
    last = finish();
    if (fresh) ++attempt;
  }
  const double deadline_s = double(limits_.deadline.count()) / 1000.0;
  return fail(errc::resource_exhausted,
              "function mode: {} invocations in a row ended without finishing one step (the last "
              "{}); the limits (deadline {} s, memory {} MB; 0 = none) are too small for this "
              "model and batch",
              max_attempts_, to_string(last), deadline_s, limits_.memory_bytes >> 20);
}

void function_runner::kill_current() noexcept {
  if (child_) child_->kill();
}

}  // namespace coach::worker
