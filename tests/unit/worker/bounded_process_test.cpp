// worker::bounded_process: a child under a deadline and a memory cap ends the way the operating
// system made it end, and says so: completed, failed with its code, timed out at its deadline,
// out of memory under its cap (by rlimit everywhere; by a cgroup v2 where the host delegates
// one, else skipped with the reason), killed; with its peak memory.

#include "worker/bounded_process.hpp"

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>

namespace coach::worker {
namespace {

using namespace std::chrono_literals;
constexpr std::uint64_t mib = 1 << 20;

std::vector<std::string> child(const std::string& mode, long n) {
  return {COACH_TEST_CHILD, mode, std::to_string(n)};
}

process_result run(const std::vector<std::string>& argv, process_limits limits,
                   memory_enforcement how = memory_enforcement::rlimit) {
  auto p = bounded_process::start(argv, limits, how);
  EXPECT_TRUE(p) << p.error().message;
  if (!p) return {};
  auto r = p->wait();
  EXPECT_TRUE(r) << r.error().message;
  return r ? *r : process_result{};
}

TEST(bounded_process, an_exit_code_says_completed_or_failed) {
  auto r = run(child("exit", 0), {});
  EXPECT_EQ(r.end, process_end::completed);
  EXPECT_EQ(r.exit_code, 0);
  r = run(child("exit", 5), {});
  EXPECT_EQ(r.end, process_end::failed);
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_EQ(to_string(r.end), "failed");
}

TEST(bounded_process, a_child_past_its_deadline_is_killed_and_timed_out) {
  auto r = run(child("sleep", 60'000), {300ms, 0});
  EXPECT_EQ(r.end, process_end::timed_out);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_GE(r.seconds, 0.3);
  EXPECT_LT(r.seconds, 30.0) << "killed at its deadline, not at the end of its sleep";
  r = run(child("sleep", 10), {10s, 0});
  EXPECT_EQ(r.end, process_end::completed) << "a deadline not reached changes nothing";
}

TEST(bounded_process, under_rlimit_an_allocation_beyond_the_cap_is_out_of_memory) {
  auto r = run(child("alloc", 512), {0ms, 64 * mib});
  EXPECT_EQ(r.end, process_end::out_of_memory);
  EXPECT_EQ(r.exit_code, exit_out_of_memory);
  EXPECT_EQ(r.enforcement, memory_enforcement::rlimit);
  // The resident set also counts the program's code and shared libraries, which RLIMIT_DATA
  // does not: a few MiB over the cap, never the 512 MiB asked for.
  EXPECT_LE(r.peak_memory_bytes, 72 * mib);
  r = run(child("alloc", 16), {0ms, 128 * mib});
  EXPECT_EQ(r.end, process_end::completed);
  EXPECT_GE(r.peak_memory_bytes, 16 * mib) << "it touched 16 MiB";
  EXPECT_LE(r.peak_memory_bytes, 128 * mib);
}

TEST(bounded_process, under_a_cgroup_the_kernel_kills_what_exceeds_memory_max) {
  if (detect_memory_enforcement() != memory_enforcement::cgroup)
    GTEST_SKIP() << "this host delegates no cgroup v2 memory controller to this process "
                    "(cgroup v1, or a container without delegation): rlimit is used";
  auto r = run(child("alloc", 512), {0ms, 64 * mib}, memory_enforcement::cgroup);
  EXPECT_EQ(r.end, process_end::out_of_memory);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_LE(r.peak_memory_bytes, 64 * mib);
  r = run(child("alloc", 16), {0ms, 128 * mib}, memory_enforcement::cgroup);
  EXPECT_EQ(r.end, process_end::completed);
  EXPECT_GE(r.peak_memory_bytes, 16 * mib);
}

TEST(bounded_process, kill_ends_it_killed) {
  auto p = bounded_process::start(child("sleep", 60'000), {}, memory_enforcement::rlimit);
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_GT(p->pid(), 0);
  p->kill();
  auto r = p->wait();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->end, process_end::killed);
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_FALSE(p->wait()) << "waited once";
}

TEST(bounded_process, a_program_that_cannot_run_is_a_clear_error) {
  auto p = bounded_process::start({"/nonexistent/coach-invocation"}, {});
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, errc::io_error);
  EXPECT_EQ(p.error().message,
            "cannot run '/nonexistent/coach-invocation': No such file or directory");
  EXPECT_FALSE(bounded_process::start({}, {}));
}

TEST(bounded_process, a_child_not_waited_for_is_killed_and_reaped) {
  pid_t pid = 0;
  {
    auto p = bounded_process::start(child("sleep", 60'000), {});
    ASSERT_TRUE(p);
    pid = p->pid();
  }
  EXPECT_EQ(::kill(pid, 0), -1) << "no zombie, no orphan left running";
}

}  // namespace
}  // namespace coach::worker
