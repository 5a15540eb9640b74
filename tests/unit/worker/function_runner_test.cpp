// worker::function_runner: a function-mode worker's invocations. Each task is answered with the
// bits computed here; invocations end after their tasks and are counted; one killed, timed out
// or out of memory costs no task (the next one answers it); limits too small for one step are a
// clear error rather than a loop.
#include <gtest/gtest.h>

#include <thread>

#include "tests/helpers/invocation_fixtures.hpp"
#include "worker/function_runner.hpp"

namespace coach::worker {
namespace {

using namespace std::chrono_literals;

/// The tests' invocations: 8 hidden units over 6 features, tasks of 4 rows.
invocation_setup setup_of(bool averaging) {
  return testing::small_setup(averaging, 8, 6);
}

invocation_task task_of(const invocation_setup& s, unsigned seed) {
  return testing::small_task(s, 4, seed);
}

std::vector<float> here(const invocation_setup& s, const invocation_task& t) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  return compute_invocation(s, t, *be)->out;
}

TEST(function_runner, each_invocation_answers_its_tasks_then_exits_and_is_counted) {
  const auto s = setup_of(true);
  function_runner f(COACH_INVOCATION, s, {30s, 0}, 2);
  for (unsigned seed = 1; seed <= 5; ++seed) {
    const auto t = task_of(s, seed);
    auto r = f.run(t);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->samples, 4u);
    EXPECT_EQ(r->out, here(s, t)) << "task " << seed;
  }
  const auto& c = f.counts();
  EXPECT_EQ(c.tasks, 5u);
  EXPECT_EQ(c.started, 3u) << "two tasks an invocation";
  EXPECT_EQ(c.completed, 2u) << "the third is still running, with one task left";
  EXPECT_EQ(c.timed_out + c.out_of_memory + c.failed, 0u);
  EXPECT_GT(c.peak_memory_bytes, 0u);
}

TEST(function_runner, a_killed_invocation_costs_no_task) {
  const auto s = setup_of(false);
  function_runner f(COACH_INVOCATION, s, {30s, 0}, 10);
  const auto a = task_of(s, 1), b = task_of(s, 2);
  ASSERT_TRUE(f.run(a));
  f.kill_current();
  auto r = f.run(b);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->out, here(s, b));
  EXPECT_EQ(f.counts().started, 2u);
  EXPECT_EQ(f.counts().failed, 1u);
  EXPECT_EQ(f.counts().tasks, 2u);
}

TEST(function_runner, an_invocation_past_its_deadline_is_replaced_and_counted_timed_out) {
  const auto s = setup_of(true);
  function_runner f(COACH_INVOCATION, s, {400ms, 0}, 100);
  ASSERT_TRUE(f.run(task_of(s, 1)));
  // The invocation outlives its deadline waiting for its next task (the gap is the point).
  std::this_thread::sleep_for(700ms);
  const auto t = task_of(s, 2);
  auto r = f.run(t);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->out, here(s, t));
  EXPECT_EQ(f.counts().timed_out, 1u);
  EXPECT_EQ(f.counts().started, 2u);
}

TEST(function_runner, limits_too_small_for_one_step_are_a_clear_error) {
  auto s = setup_of(true);
  s.inputs = 64;
  s.model.hidden = {60'000};  // several copies of 15 MB
  function_runner f(COACH_INVOCATION, s, {30s, 40ull << 20}, 4, 3);
  invocation_task t;
  t.params.assign(invocation_network(s).value().num_params(), 0.01f);
  t.x.assign(std::size_t(s.inputs), 0.5f);
  t.y = {1};
  t.sizes = {1};
  auto r = f.run(t);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::resource_exhausted);
  EXPECT_EQ(r.error().message,
            "function mode: 3 invocations in a row ended without finishing one step (the last "
            "out of memory); the limits (deadline 30 s, memory 40 MB; 0 = none) are too small "
            "for this model and batch");
  EXPECT_EQ(f.counts().out_of_memory, 3u);
  EXPECT_EQ(f.counts().tasks, 0u);
}

}  // namespace
}  // namespace coach::worker
