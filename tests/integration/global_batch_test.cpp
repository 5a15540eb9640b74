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
#include "common/json.hpp"
#include "ps/adascale.hpp"
#include "report/job_report.hpp"

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

/// Every step of one run, in order; the run's result in `out` when given.
std::vector<step_trace> steps_of(const scheduler::job_spec& spec,
                                 scheduler::job_result* out = nullptr) {
  std::mutex mu;
  std::vector<step_trace> steps;
  train_options opt;
  opt.on_step = [&](const step_trace& t) {
    std::lock_guard lock(mu);
    steps.push_back(t);
  };
  auto r = train_embedded(spec, opt);
  EXPECT_TRUE(r) << (r ? "" : r.error().to_string());
  if (out && r) *out = *r;
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
    // 1.51e-8 measured (the sums' order differs between the layouts); docs/status.md says so.
    EXPECT_NEAR(lb, la, 1e-7) << "step " << s;
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

TEST(global_batch,
     adascale_raises_the_rate_from_the_first_step_with_more_than_the_initial_workers) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  const std::string grow = "schedule:\n  - {at_step: 5, workers: 4}\n";
  const auto plain = steps_of(digits("batch: {per_worker: 32}", grow));
  const auto spec = digits("batch: {per_worker: 32, lr_scaling: adascale}", grow);
  ASSERT_EQ(spec.optimizer.reference_batch, 64u);
  scheduler::job_result ada_result;
  const auto ada = steps_of(spec, &ada_result);
  ASSERT_EQ(ada.size(), plain.size());
  std::size_t grown = 0;
  while (grown < ada.size() && ada[grown].members < 4) ++grown;
  ASSERT_LT(grown + 1, ada.size()) << "it grew to 4 workers";
  // Every push carried the totals of the step before it, over both members' whole gradients
  // (the shards' sums added up by each worker); the gain follows from them.
  ps::adascale_gain gain;
  for (std::size_t s = 1; s <= grown; ++s) {
    ASSERT_TRUE(ada[s].grad_totals) << "step " << s;
    EXPECT_EQ(ada[s].grad_totals->version, std::int64_t(s));
    EXPECT_EQ(ada[s].grad_totals->contributions, 2.0);
    EXPECT_EQ(ada[s].grad_totals->samples, 64.0);
    gain.observe(*ada[s].grad_totals);
  }
  EXPECT_FALSE(plain[1].grad_totals) << "none unless adascale";
  const double g = gain.gain(64, 128);
  // 1.1248 measured (docs/status.md: 1.12); in (1, 2] is any gain at all.
  EXPECT_NEAR(g, 1.125, 0.005);
  // At the initial workers the gain is 1: the same steps as without it, up to and including the
  // first step of 4 workers (computed from the values before its update); the next differs.
  for (std::size_t s = 0; s <= grown; ++s)
    EXPECT_NEAR(ada[s].loss_sum, plain[s].loss_sum, 1e-9 * std::abs(plain[s].loss_sum))
        << "step " << s;
  EXPECT_GT(std::abs(ada[grown + 1].loss_sum - plain[grown + 1].loss_sum), 1e-6)
      << "the step after the first of 4 workers computes from values updated at a gain of " << g;
  std::printf("adascale: gain %.4f at 4 workers (step %zu)\n", g, grown);
  // The epoch's report shows the gain of its last step, the shards' estimate followed from the
  // same totals.
  ps::adascale_gain all;
  for (const auto& t : ada)
    if (t.grad_totals) all.observe(*t.grad_totals);
  ASSERT_EQ(ada_result.epochs.size(), 1u);
  EXPECT_DOUBLE_EQ(ada_result.epochs[0].lr_gain, all.gain(64, double(ada.back().samples.size())));
  EXPECT_GT(ada_result.epochs[0].lr_gain, 1.0);
  const auto report = json::parse(scheduler::to_json(ada_result));
  EXPECT_NEAR(report["epochs"][0]["lr_gain"].get<double>(), ada_result.epochs[0].lr_gain, 1e-5);
  // Over two shards (the keys split between them, slice_size 1024 of 4810) the workers add up
  // the same totals: the sums add key by key.
  auto two = spec;
  two.shards = {1, 2, 2};
  const auto split = steps_of(two);
  ASSERT_EQ(split.size(), ada.size());
  for (std::size_t s = 1; s <= grown; ++s) {
    ASSERT_TRUE(split[s].grad_totals) << "step " << s;
    EXPECT_NEAR(split[s].grad_totals->parts_sq, ada[s].grad_totals->parts_sq,
                1e-9 * ada[s].grad_totals->parts_sq);
    EXPECT_NEAR(split[s].grad_totals->sum_sq, ada[s].grad_totals->sum_sq,
                1e-9 * ada[s].grad_totals->sum_sq);
  }
}

}  // namespace
}  // namespace coach::actors
