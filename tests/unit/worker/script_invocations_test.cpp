// worker::script_invocations against a real script (tests/python/scripts/external_worker.py over
// the `coach` package): function mode's limits on a script's processes. A process answers
// chunks_per_invocation steps and is replaced; one killed at its deadline, out of memory under
// its cap or by a signal leaves its step to a fresh process, which computes the same gradient;
// limits too small for one step are an error naming them; the script's own error is not
// retried. Without limits a process's death is the worker's error. Needs Debian's python3 with
// NumPy (python3-numpy); skips with the reason otherwise.
#include "worker/script_invocations.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <numeric>

#include "tests/helpers/numpy_python.hpp"

namespace coach::worker {
namespace {

const std::string& python = coach_tests::numpy_python;
using coach_tests::have_numpy;

/// A pool of external_worker.py in `mode`, its layout registered; `memory_bytes`: each
/// process's cap.
std::shared_ptr<external_pool> pool_of(std::string mode, std::uint64_t memory_bytes = 0) {
  script_options o;
  o.python = python;
  o.script = std::string(COACH_SOURCE_DIR) + "/tests/python/scripts/external_worker.py";
  o.args = {std::move(mode)};
  o.package_dir = std::string(COACH_SOURCE_DIR) + "/python";
  o.seed = 5;
  o.start_timeout_s = 60;
  o.memory_bytes = memory_bytes;
  auto pool = std::make_shared<external_pool>(o);
  auto ok = pool->register_first();
  EXPECT_TRUE(ok) << ok.error().to_string();
  return pool;
}

/// COACH_TEST_ONCE for the processes started while it lives: the misbehaviour happens once.
struct once_file {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("coach-once-" + std::to_string(::getpid()) + "-" +
                       std::to_string(std::chrono::steady_clock::now().time_since_epoch().count())))
                         .string();
  once_file() { ::setenv("COACH_TEST_ONCE", path.c_str(), 1); }
  ~once_file() {
    ::unsetenv("COACH_TEST_ONCE");
    std::filesystem::remove(path);
  }
};

const float params[6] = {1, 2, 3, 4, 0.5f, 0.5f};  // w, then the buffer b

/// Runs step `s` on samples {s, s + 10}, checking the script's exact gradient.
void expect_step(script_invocations& inv, std::int64_t s) {
  const std::uint32_t idx[] = {std::uint32_t(s), std::uint32_t(s + 10)};
  float grad[6] = {};
  auto r = inv.step(s, 0, params, idx, grad);
  ASSERT_TRUE(r) << "step " << s << ": " << r.error().to_string();
  EXPECT_EQ(r->samples, 2u);
  EXPECT_EQ(r->loss_sum, double(2 * s + 10));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(grad[i], params[i] * 2 + float(2 * s + 10));
  for (int i = 4; i < 6; ++i) EXPECT_EQ(grad[i], (params[i] + 1) * 2);
}

script_limits limits(std::uint32_t steps, double deadline_s = 0, std::uint32_t attempts = 5) {
  script_limits l;
  l.steps_per_invocation = steps;
  l.deadline = std::chrono::milliseconds(std::int64_t(deadline_s * 1000));
  l.max_attempts = attempts;
  return l;
}

TEST(script_invocations, a_process_answers_chunks_per_invocation_steps_and_is_replaced) {
  COACH_NEED_NUMPY();
  auto pool = pool_of("normal");
  script_invocations inv(pool, "worker 0", limits(2));
  std::vector<pid_t> pids;
  for (std::int64_t s = 1; s <= 5; ++s) {
    expect_step(inv, s);
    if (inv.current()) pids.push_back(inv.current()->pid());
  }
  // Steps 1-2, 3-4 and 5 in three processes; the first two retired after their second step.
  const auto& c = inv.counts();
  EXPECT_EQ(c.started, 3u);
  EXPECT_EQ(c.completed, 2u);
  EXPECT_EQ(c.tasks, 5u);
  EXPECT_EQ(c.timed_out + c.out_of_memory + c.failed, 0u);
  EXPECT_GT(c.peak_memory_bytes, 1u << 20) << "the script's resident high-water mark";
  ASSERT_EQ(pids.size(), 3u) << "a process between steps after steps 1, 3 and 5";
  EXPECT_NE(pids[0], pids[1]);
  EXPECT_NE(pids[1], pids[2]);
}

TEST(script_invocations, a_process_past_its_deadline_is_killed_and_its_step_computed_anew) {
  COACH_NEED_NUMPY();
  once_file once;
  auto pool = pool_of("sleep-at-step:3");
  script_invocations inv(pool, "worker 0", limits(8, 1.0));
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t s = 1; s <= 4; ++s) expect_step(inv, s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto& c = inv.counts();
  EXPECT_EQ(c.timed_out, 1u);
  EXPECT_EQ(c.started, 2u);
  EXPECT_EQ(c.tasks, 4u);
  EXPECT_GE(took, 1.0) << "killed at its deadline, not before";
  EXPECT_LT(took, 30.0) << "not after the script's 600 s sleep";
}

TEST(script_invocations, a_deadline_shorter_than_a_step_is_an_error_naming_it) {
  COACH_NEED_NUMPY();
  auto pool = pool_of("sleep-at-step:1");
  script_invocations inv(pool, "worker 0", limits(8, 0.3, 2));
  const std::uint32_t idx[] = {1};
  float grad[6];
  auto r = inv.step(1, 0, params, idx, grad);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::resource_exhausted);
  EXPECT_NE(r.error().message.find("2 processes of the script in a row ended without finishing "
                                   "step 1 (the last: worker 0: the script external_worker.py did "
                                   "not finish step 1 within its invocation's deadline (0.3 s, "
                                   "function.deadline_s); killed); the limits (deadline 0.3 s"),
            std::string::npos)
      << r.error().message;
  EXPECT_EQ(inv.counts().timed_out, 2u);
}

TEST(script_invocations, a_process_out_of_memory_under_its_cap_leaves_its_step_to_a_fresh_one) {
  COACH_NEED_NUMPY();
  once_file once;
  // 2 GiB asked under a 1 GiB cap: a MemoryError under RLIMIT_DATA, the OOM killer under a
  // cgroup; either way counted as out of memory.
  auto pool = pool_of("allocate-at-step:2", std::uint64_t(1) << 30);
  script_invocations inv(pool, "worker 0", limits(8));
  for (std::int64_t s = 1; s <= 3; ++s) expect_step(inv, s);
  const auto& c = inv.counts();
  EXPECT_EQ(c.out_of_memory, 1u) << "enforced by " << to_string(default_memory_enforcement());
  EXPECT_EQ(c.started, 2u);
  EXPECT_EQ(c.tasks, 3u);
  EXPECT_LT(c.peak_memory_bytes, std::uint64_t(1) << 30);
}

TEST(script_invocations, a_process_killed_by_a_signal_is_a_failed_invocation_retried) {
  COACH_NEED_NUMPY();
  once_file once;
  auto pool = pool_of("kill-at-step:2:0");
  script_invocations inv(pool, "worker 0", limits(8));
  for (std::int64_t s = 1; s <= 3; ++s) expect_step(inv, s);
  EXPECT_EQ(inv.counts().failed, 1u);
  EXPECT_EQ(inv.counts().started, 2u);
}

TEST(script_invocations, the_scripts_own_error_is_not_retried) {
  COACH_NEED_NUMPY();
  auto pool = pool_of("raise-at-step:2");
  script_invocations inv(pool, "worker 0", limits(8));
  expect_step(inv, 1);
  const std::uint32_t idx[] = {2};
  float grad[6];
  auto r = inv.step(2, 0, params, idx, grad);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::invalid_argument);
  EXPECT_EQ(r.error().message,
            "worker 0: step 2 failed in the script: ValueError: step 2 is not for this script");
  EXPECT_EQ(inv.counts().started, 1u);
}

TEST(script_invocations, without_limits_a_process_that_dies_is_the_workers_error) {
  COACH_NEED_NUMPY();
  auto pool = pool_of("kill-at-step:2:0");
  script_invocations inv(pool, "worker 0", std::nullopt);
  expect_step(inv, 1);
  const std::uint32_t idx[] = {2};
  float grad[6];
  auto r = inv.step(2, 0, params, idx, grad);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("was killed by signal 9"), std::string::npos)
      << r.error().message;
  EXPECT_FALSE(inv.bounded());
}

}  // namespace
}  // namespace coach::worker
