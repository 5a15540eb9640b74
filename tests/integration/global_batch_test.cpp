// A fixed global batch (batch_size × the initial workers, the default under bsp): a run that
// rescales 2 → 4 → 1 workers mid-epoch has every step cover exactly the samples of the same step
// in a run that never rescales, and the same per-step losses within 1e-4 (only the order in
// which the members' sums are added differs); with batch: {per_worker: N} the steps grow with
// the workers instead.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <mutex>
#include <vector>

#include "actors/embedded_cluster.hpp"

namespace coach::actors {
namespace {

bool have_digits() {
  return std::filesystem::exists("data/digits.csv.gz");
}

scheduler::job_spec digits(const std::string& batch, const std::string& schedule = "") {
  const std::string yaml =
      "name: global-batch\n"
      "dataset: {format: csv, path: data/digits.csv.gz, test_fraction: 0.2}\n"
      "model: {type: mlp, hidden: [64], activation: relu}\n"
      "optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.9}\n" +
      batch +
      "\nepochs: 1\nconsistency: bsp\nseed: 7\n"
      "workers: {min: 1, max: 4, initial: 2}\nshards: 1\nslice_size: 1024\nbackend: cpu\n" +
      schedule;
  auto spec = scheduler::parse_job_spec(yaml, "global-batch.yaml", ".");
  EXPECT_TRUE(spec) << (spec ? "" : spec.error().to_string());
  return *spec;
}

/// Every step of one run, in order.
std::vector<step_trace> steps_of(const scheduler::job_spec& spec) {
  std::mutex mu;
  std::vector<step_trace> steps;
  train_options opt;
  opt.on_step = [&](const step_trace& t) {
    std::lock_guard lock(mu);
    steps.push_back(t);
  };
  auto r = train_embedded(spec, opt);
  EXPECT_TRUE(r) << (r ? "" : r.error().to_string());
  std::sort(steps.begin(), steps.end(),
            [](const step_trace& a, const step_trace& b) { return a.step < b.step; });
  return steps;
}

TEST(global_batch, a_run_rescaled_2_4_1_mid_epoch_covers_each_step_as_one_that_never_rescales) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  const auto spec = digits("batch_size: 32");
  ASSERT_EQ(spec.global_batch, 64);
  const auto plain = steps_of(spec);
  const auto rescaled =
      steps_of(digits("batch_size: 32",
                      "schedule:\n  - {at_step: 5, workers: 4}\n  - {at_step: 12, workers: 1}\n"));
  // 1438 samples, 64 a step: 23 steps, the last of 30.
  ASSERT_EQ(plain.size(), 23u);
  ASSERT_EQ(rescaled.size(), plain.size());
  std::size_t samples = 0;
  double worst = 0;
  for (std::size_t s = 0; s < plain.size(); ++s) {
    const auto& a = plain[s];
    const auto& b = rescaled[s];
    ASSERT_EQ(a.step, std::int64_t(s));
    ASSERT_EQ(b.step, a.step);
    EXPECT_EQ(b.samples, a.samples) << "step " << s << " covers other samples";
    ASSERT_FALSE(a.samples.empty());
    samples += a.samples.size();
    const double la = a.loss_sum / double(a.samples.size());
    const double lb = b.loss_sum / double(b.samples.size());
    worst = std::max(worst, std::abs(la - lb));
    EXPECT_NEAR(lb, la, 1e-4) << "step " << s;
  }
  EXPECT_EQ(samples, 1438u) << "every sample once";
  std::printf("23 steps, largest per-step mean-loss difference %.3g\n", worst);
  // The rescaled run did rescale, mid-epoch: 2 members, then 4, then 1.
  EXPECT_EQ(rescaled[4].members, 2u);
  EXPECT_EQ(rescaled[8].members, 4u);
  EXPECT_EQ(rescaled[15].members, 1u);
  EXPECT_EQ(plain[15].members, 2u);
}

TEST(global_batch, per_worker_batches_grow_the_step_with_the_workers) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  const auto spec =
      digits("batch: {per_worker: 32}",
             "schedule:\n  - {at_step: 5, workers: 4}\n  - {at_step: 12, workers: 1}\n");
  EXPECT_EQ(spec.global_batch, 0);
  const auto steps = steps_of(spec);
  ASSERT_GT(steps.size(), 12u);
  EXPECT_EQ(steps[4].samples.size(), 64u);
  EXPECT_EQ(steps[8].samples.size(), 128u);
  EXPECT_EQ(steps[12].samples.size(), 32u);
}

TEST(global_batch, an_explicit_global_batch_is_shared_by_however_many_workers) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  const auto spec = digits("batch: {global: 96}", "schedule:\n  - {at_step: 3, workers: 3}\n");
  EXPECT_EQ(spec.global_batch, 96);
  const auto steps = steps_of(spec);
  ASSERT_EQ(steps.size(), 15u);  // ceil(1438 / 96)
  EXPECT_EQ(steps[1].samples.size(), 96u);
  EXPECT_EQ(steps[1].members, 2u);
  EXPECT_EQ(steps[5].samples.size(), 96u);
  EXPECT_EQ(steps[5].members, 3u);
}

}  // namespace
}  // namespace coach::actors
