// A script's model (model: {script: ...}) through the embedded cluster, as `coach train` runs it:
// the NumPy softmax worker (examples/numpy/softmax_worker.py, over the `coach` package) learns its
// planted data; rescaled 2 -> 4 -> 1 processes mid-epoch, every step covers the samples of the
// same step of a run that never rescales, with the same loss within 1e-4; a process SIGKILLed
// mid-epoch loses its worker, and the job still trains every sample of every epoch once. Needs
// Debian's python3 with NumPy (python3-numpy); skips with the reason otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "actors/embedded_cluster.hpp"
#include "script_runs.hpp"
#include "tests/helpers/numpy_python.hpp"

namespace coach::actors {
namespace {

const std::string& python = coach_tests::numpy_python;
using coach_tests::have_numpy;

scheduler::job_spec spec_of(const std::string& script, const std::string& more) {
  const std::string yaml = "name: script-model\nmodel: {script: " + script +
                           "}\n"
                           "optimizer: {type: sgd, learning_rate: 0.05}\n"
                           "batch: {global: 64}\nconsistency: bsp\nseed: 7\n"
                           "workers: {min: 1, max: 4, initial: 2}\nshards: 2\nslice_size: 16\n" +
                           more;
  auto spec = scheduler::parse_job_spec(yaml, "script-model.yaml", COACH_SOURCE_DIR);
  EXPECT_TRUE(spec) << (spec ? "" : spec.error().to_string());
  return *spec;
}

script_run train(const scheduler::job_spec& spec) {
  return train_script(spec, python);
}

TEST(script_model, the_numpy_worker_learns_its_planted_data) {
  COACH_NEED_NUMPY();
  auto r = train(spec_of("examples/numpy/softmax_worker.py", "epochs: 3\n"));
  ASSERT_TRUE(r.result) << r.result.error().to_string();
  ASSERT_EQ(r.result->epochs.size(), 3u);
  EXPECT_EQ(r.result->num_params, 33u);
  EXPECT_EQ(r.result->workers, 2u);
  // The planted labels carry Gumbel noise: 0.91 measured after 3 epochs (0.64 from the start).
  EXPECT_GE(r.result->test_accuracy, 0.88);
  EXPECT_LT(r.result->epochs.back().train_loss, r.result->epochs.front().train_loss);
  std::size_t samples = 0;
  for (const auto& s : r.steps) samples += s.samples.size();
  EXPECT_EQ(samples, 3u * 2000u) << "every sample of every epoch once";
}

TEST(script_model, processes_rescaled_2_4_1_mid_epoch_train_as_a_run_that_never_rescales) {
  COACH_NEED_NUMPY();
  const auto plain = train(spec_of("examples/numpy/softmax_worker.py", "epochs: 1\n"));
  const auto rescaled = train(spec_of("examples/numpy/softmax_worker.py",
                                      "epochs: 1\nschedule:\n  - {at_step: 5, workers: 4}\n"
                                      "  - {at_step: 14, workers: 1}\n"));
  expect_same_steps(plain, rescaled, 32u, 2000u, 1e-4);
  ASSERT_EQ(rescaled.steps.size(), 32u);
  EXPECT_EQ(rescaled.steps[4].members, 2u);
  EXPECT_EQ(rescaled.steps[8].members, 4u);
  EXPECT_EQ(rescaled.steps[20].members, 1u);
  EXPECT_EQ(rescaled.result->test_accuracy, plain.result->test_accuracy);
}

TEST(script_model, a_process_killed_mid_epoch_loses_its_worker_and_no_sample) {
  COACH_NEED_NUMPY();
  // tests/python/scripts/external_worker.py: 100 samples; worker 1's process kills itself
  // (SIGKILL) when it is given step 3 of the first epoch.
  auto spec = spec_of("tests/python/scripts/external_worker.py", "epochs: 2\n");
  spec.model.script->args = {"kill-at-step:3:1"};
  spec.global_batch = 16;
  const auto r = train(spec);
  ASSERT_TRUE(r.result) << r.result.error().to_string();
  ASSERT_EQ(r.result->epochs.size(), 2u);
  // Its chunk went back to the queue: every sample of every epoch processed exactly once.
  for (const auto& e : r.result->epochs) EXPECT_EQ(e.samples, 100u) << "epoch " << e.epoch;
  EXPECT_EQ(r.result->workers, 1u) << "the killed worker left the job";
  ASSERT_GT(r.steps.size(), 5u);
  EXPECT_EQ(r.steps[2].members, 2u);
  EXPECT_EQ(r.steps.back().members, 1u);
}

TEST(script_model, function_limits_recycle_the_processes_and_change_no_step) {
  COACH_NEED_NUMPY();
  // 2 workers, 32 steps: each worker's processes answer 3 steps each, under a deadline and a
  // memory cap that fit; the steps and parameters are those of the run without limits, bit for
  // bit.
  const auto plain = train(spec_of("examples/numpy/softmax_worker.py", "epochs: 1\n"));
  const auto bounded = train(spec_of(
      "examples/numpy/softmax_worker.py",
      "epochs: 1\nfunction: {deadline_s: 60, memory_mb: 2048, chunks_per_invocation: 3}\n"));
  expect_same_steps(plain, bounded, 32u, 2000u, 0.0);
  ASSERT_TRUE(bounded.result);
  EXPECT_EQ(bounded.result->params, plain.result->params);
  ASSERT_TRUE(bounded.result->invocations);
  const auto& c = *bounded.result->invocations;
  // Each worker computes its share of (almost) every step: an empty share asks no process.
  EXPECT_GE(c.tasks, 60u);
  EXPECT_LE(c.tasks, 64u);
  EXPECT_EQ(c.timed_out + c.out_of_memory + c.failed, 0u);
  // Each process answered 3 steps and was replaced; each worker's last one may have fewer.
  EXPECT_GE(c.started, (c.tasks + 2) / 3) << c.tasks << " tasks";
  EXPECT_LE(c.started, (c.tasks + 2) / 3 + 2) << c.tasks << " tasks";
  EXPECT_GE(c.completed + 2, c.started);
  EXPECT_LE(c.completed * 3, c.tasks);
  EXPECT_GT(c.peak_memory_bytes, 1u << 20);
  EXPECT_FALSE(plain.result->invocations);
}

TEST(script_model, a_process_killed_in_function_mode_is_an_invocation_retried_not_a_worker_lost) {
  COACH_NEED_NUMPY();
  auto spec = spec_of("tests/python/scripts/external_worker.py",
                      "epochs: 2\nfunction: {chunks_per_invocation: 4}\n");
  spec.model.script->args = {"kill-at-step:3:1"};
  spec.global_batch = 16;
  // Only the first process given step 3 kills itself (external_worker.py's COACH_TEST_ONCE).
  const auto once =
      std::filesystem::temp_directory_path() / ("coach-once-" + std::to_string(::getpid()));
  std::filesystem::remove(once);
  ::setenv("COACH_TEST_ONCE", once.c_str(), 1);
  const auto r = train(spec);
  ::unsetenv("COACH_TEST_ONCE");
  EXPECT_TRUE(std::filesystem::exists(once)) << "a process was given step 3";
  std::filesystem::remove(once);
  ASSERT_TRUE(r.result) << r.result.error().to_string();
  for (const auto& e : r.result->epochs) EXPECT_EQ(e.samples, 100u) << "epoch " << e.epoch;
  EXPECT_EQ(r.result->workers, 2u) << "the worker stayed; its step went to a fresh process";
  ASSERT_TRUE(r.result->invocations);
  EXPECT_GE(r.result->invocations->failed, 1u);
}

}  // namespace
}  // namespace coach::actors
