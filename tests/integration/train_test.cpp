// End to end through the embedded cluster: accuracy reached on real data, sharding invisible to
// the math, clear errors, and a clean stop.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>

#include "actors/embedded_cluster.hpp"
#include "tests/integration/fault_helpers.hpp"

namespace coach::actors {
namespace {

using namespace std::chrono_literals;

scheduler::job_spec digits_spec() {
  auto spec = scheduler::load_job_spec("examples/digits-mlp.yaml");
  EXPECT_TRUE(spec) << (spec ? "" : spec.error().to_string());
  return *spec;
}

bool have_digits() {
  return std::filesystem::exists("data/digits.csv.gz");
}
bool have_fashion() {
  return std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

TEST(train_embedded, digits_reaches_95_percent) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  auto spec = digits_spec();
  std::vector<scheduler::epoch_report> seen;
  train_options opt;
  opt.on_epoch = [&](const scheduler::epoch_report& e) { seen.push_back(e); };
  auto r = train_embedded(spec, opt);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_FALSE(r->cancelled);
  ASSERT_EQ(r->epochs.size(), std::size_t(spec.epochs));
  ASSERT_EQ(seen.size(), std::size_t(spec.epochs));
  EXPECT_GE(r->test_accuracy, 0.95);
  // Every epoch processed the whole training set exactly once.
  for (const auto& e : r->epochs) {
    EXPECT_EQ(e.samples, 1438u) << "epoch " << e.epoch;
    // The workers computed for part of the epoch's wall time, never more than all of it.
    EXPECT_GT(e.compute_seconds, 0.0) << "epoch " << e.epoch;
    EXPECT_LE(e.compute_seconds, e.seconds * e.workers * 1.01 + 1e-3) << "epoch " << e.epoch;
  }
  EXPECT_LT(r->epochs.back().train_loss, r->epochs.front().train_loss);
  EXPECT_EQ(r->params.size(), r->num_params);
  EXPECT_GT(r->bytes_moved, r->num_params * sizeof(float) * 2);
}

TEST(train_embedded, final_parameters_are_bitwise_equal_for_1_and_4_shards) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  auto spec = digits_spec();
  spec.epochs = 3;
  spec.slice_size = 256;  // 4810 parameters: 19 slices, so 4 shards each own several
  std::vector<std::vector<float>> finals;
  for (std::uint32_t shards : {1u, 4u}) {
    train_options opt;
    opt.workers = 3;
    opt.shards = shards;
    auto r = train_embedded(spec, opt);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->shards, shards);
    finals.push_back(r->params);
  }
  ASSERT_EQ(finals[0].size(), finals[1].size());
  ASSERT_FALSE(finals[0].empty());
  EXPECT_EQ(0, std::memcmp(finals[0].data(), finals[1].data(), finals[0].size() * sizeof(float)));
}

/// A BSP run whose messages go through a faulty_transport with `plan` ends with the parameters
/// of an undisturbed run and counts every sample of every epoch once.
void expect_bsp_run_unchanged_by(fault_plan plan, const char* what) {
  SCOPED_TRACE(what);
  auto spec = digits_spec();
  spec.epochs = 3;
  train_options opt;
  opt.workers = 3;
  opt.shards = 2;
  auto clean = train_embedded(spec, opt);
  ASSERT_TRUE(clean) << clean.error().to_string();
  std::shared_ptr<faulty_transport> faulty;
  opt.wrap_transport = [&](std::shared_ptr<transport> inner) -> std::shared_ptr<transport> {
    faulty = faulty_transport::wrap(std::move(inner), plan);
    return faulty;
  };
  auto shaken = train_embedded(spec, opt);
  ASSERT_TRUE(shaken) << shaken.error().to_string();
  const auto c = faulty->counts();
  // Of about a thousand messages.
  EXPECT_TRUE(plan.reorder == 0 || c.reordered > 20u) << c.reordered;
  EXPECT_TRUE(plan.delay == 0 || c.delayed >= 3u) << c.delayed;
  EXPECT_TRUE(plan.duplicate == 0 || c.duplicated > 20u) << c.duplicated;
  ASSERT_EQ(shaken->epochs.size(), 3u);
  for (const auto& e : shaken->epochs) EXPECT_EQ(e.samples, 1438u) << "epoch " << e.epoch;
  ASSERT_EQ(shaken->params.size(), clean->params.size());
  EXPECT_EQ(0, std::memcmp(shaken->params.data(), clean->params.data(),
                           clean->params.size() * sizeof(float)));
}

TEST(train_faults, reordered_messages_change_no_bit_of_a_bsp_run) {
  // A tenth of the job's messages are each held until the next message to their endpoint has
  // gone: two messages swapped, the order of one link broken.
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  expect_bsp_run_unchanged_by({.seed = 11, .reorder = 0.1, .max_delay = 2ms}, "swaps");
}

TEST(train_faults, delayed_duplicated_and_reordered_messages_change_no_bit_of_a_bsp_run) {
  // Every kind of message: 5 % delivered twice, 10 % held up to 2 ms on a slow link (others
  // overtake them), 5 % swapped. Several seeds: each shakes different messages.
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  for (std::uint64_t seed : {1u, 5u, 6u, 23u}) {
    expect_bsp_run_unchanged_by(
        {.seed = seed, .duplicate = 0.05, .delay = 0.1, .reorder = 0.05, .max_delay = 2ms},
        ("seed " + std::to_string(seed)).c_str());
  }
}

TEST(train_faults, a_slow_snapshot_request_is_not_overtaken_by_the_next_steps_pushes) {
  // Every snapshot request held up to 20 ms on its link: without the request riding on the
  // step's grants and pushes (flag::snapshot), the next steps' pushes took the shards past the
  // version and epochs went unreported.
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  expect_bsp_run_unchanged_by(
      {.seed = 3,
       .delay = 1.0,
       .max_delay = 20ms,
       .applies = [](const wire_message& m) { return m.hdr.kind == msg_kind::snapshot_request; }},
      "slow snapshot requests");
}

TEST(train_embedded, parameters_are_bitwise_equal_when_shards_answer_in_pieces) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  auto spec = digits_spec();
  spec.epochs = 1;
  // 675,010 parameters: one shard answers a push in 3 pieces (ps::shard_options::piece_floats,
  // 256 Ki floats), each of 2 shards in 2, each of 4 shards in 1. Adam, whose cpu update is
  // bitwise the same only when cut at multiples of ps::piece_multiple.
  spec.model.hidden = {9000};
  spec.optimizer.kind = ps::optimizer_kind::adam;
  spec.optimizer.adam.learning_rate = 0.001f;
  std::vector<std::vector<float>> finals;
  for (std::uint32_t shards : {1u, 2u, 4u}) {
    train_options opt;
    opt.workers = 2;
    opt.shards = shards;
    auto r = train_embedded(spec, opt);
    ASSERT_TRUE(r) << r.error().to_string();
    ASSERT_EQ(r->num_params, 675010u);
    EXPECT_EQ(r->epochs.at(0).samples, 1438u);
    finals.push_back(r->params);
  }
  for (std::size_t k = 1; k < finals.size(); ++k) {
    ASSERT_EQ(finals[0].size(), finals[k].size());
    EXPECT_EQ(0, std::memcmp(finals[0].data(), finals[k].data(), finals[0].size() * sizeof(float)))
        << "run " << k;
  }
}

TEST(train_embedded, same_seed_same_result_different_seed_different_result) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  auto spec = digits_spec();
  spec.epochs = 1;
  auto a = train_embedded(spec);
  auto b = train_embedded(spec);
  spec.seed += 1;
  auto c = train_embedded(spec);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->params, b->params);
  EXPECT_NE(a->params, c->params);
}

TEST(train_embedded, fashion_mnist_subset_learns) {
  if (!have_fashion())
    GTEST_SKIP() << "Fashion-MNIST missing: apt-get install dataset-fashion-mnist";
  auto spec = scheduler::load_job_spec("examples/fashion-mlp.yaml");
  ASSERT_TRUE(spec) << spec.error().to_string();
  spec->epochs = 2;
  spec->dataset.train_limit = 12000;
  spec->dataset.test_limit = 2000;
  train_options opt;
  opt.workers = 2;
  opt.shards = 2;
  auto r = train_embedded(*spec, opt);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_GE(r->test_accuracy, 0.80);
  EXPECT_EQ(r->epochs.front().samples, 12000u);
}

// The README's main job, as shipped: >= 0.87 test accuracy within its 5 epochs (about 16 s on
// 2 cores).
TEST(train_embedded, fashion_mnist_example_reaches_87_percent_in_5_epochs) {
  if (!have_fashion())
    GTEST_SKIP() << "Fashion-MNIST missing: apt-get install dataset-fashion-mnist";
  auto spec = scheduler::load_job_spec("examples/fashion-mlp.yaml");
  ASSERT_TRUE(spec) << spec.error().to_string();
  ASSERT_LE(spec->epochs, 5);
  train_options opt;
  opt.workers = 2;
  opt.shards = 2;
  auto r = train_embedded(*spec, opt);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_GE(r->test_accuracy, 0.87);
  for (const auto& e : r->epochs) EXPECT_EQ(e.samples, 60000u);
}

TEST(train_embedded, fashion_cnn_example_learns_on_a_tenth_of_the_data) {
  if (!have_fashion())
    GTEST_SKIP() << "Fashion-MNIST missing: apt-get install dataset-fashion-mnist";
  // The example as shipped, on 6,000 training images for 2 epochs (the full run, 5 epochs on
  // 60,000, is in docs/performance.md): the bar is what a tenth of the data reaches.
  auto spec = scheduler::load_job_spec("examples/fashion-cnn.yaml");
  ASSERT_TRUE(spec) << spec.error().to_string();
  spec->dataset.train_limit = 6000;
  spec->dataset.test_limit = 2000;
  spec->epochs = 2;
  train_options opt;
  opt.workers = 2;
  opt.shards = 2;
  auto r = train_embedded(*spec, opt);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_GE(r->test_accuracy, 0.80);
  EXPECT_EQ(r->num_params, 215370u);  // 16x1x5x5+16, 32x16x5x5+32, 1568x128+128, 128x10+10
  for (const auto& e : r->epochs) EXPECT_EQ(e.samples, 6000u);
}

TEST(train_embedded, errors_name_what_is_wrong) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  auto spec = digits_spec();
  train_options opt;
  opt.workers = 9;
  auto r = train_embedded(spec, opt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::invalid_argument);
  EXPECT_NE(r.error().message.find("--workers 9 is outside the job's workers range [1, 4]"),
            std::string::npos)
      << r.error().message;

  spec.dataset.path = "/nonexistent/digits.csv";
  r = train_embedded(spec);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("/nonexistent/digits.csv"), std::string::npos)
      << r.error().message;

  spec = digits_spec();
  spec.gpus_per_worker = 1;
  spec.backend = kernels::backend_kind::cpu;
  r = train_embedded(spec);
  if (!kernels::cuda_device_present()) {
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, errc::resource_exhausted);
    EXPECT_NE(r.error().message.find("GPU"), std::string::npos);
  }
}

TEST(train_embedded, stop_flag_ends_the_job_cleanly) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  auto spec = digits_spec();
  spec.epochs = 1000;
  std::atomic<bool> stop{false};
  train_options opt;
  opt.stop = &stop;
  opt.on_epoch = [&](const scheduler::epoch_report& e) {
    if (e.epoch == 1) stop = true;
  };
  auto r = train_embedded(spec, opt);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_TRUE(r->cancelled);
  EXPECT_GE(r->epochs.size(), 2u);
  EXPECT_LT(r->epochs.size(), 1000u);
  EXPECT_EQ(r->params.size(), r->num_params);
}

}  // namespace
}  // namespace coach::actors

namespace coach::actors {
namespace {

/// The elastic example with `schedule` replaced.
scheduler::job_spec elastic_spec(std::vector<scheduler::schedule_action> schedule, int epochs) {
  auto spec = scheduler::load_job_spec("examples/elastic.yaml");
  EXPECT_TRUE(spec) << (spec ? "" : spec.error().to_string());
  spec->schedule = std::move(schedule);
  spec->epochs = epochs;
  return *spec;
}

TEST(train_elastic, example_rescales_mid_epoch_and_reaches_95_percent) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  auto spec = scheduler::load_job_spec("examples/elastic.yaml");
  ASSERT_TRUE(spec) << spec.error().to_string();
  ASSERT_EQ(spec->schedule.size(), 6u);
  auto r = train_embedded(*spec);
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_EQ(r->epochs.size(), std::size_t(spec->epochs));
  EXPECT_GE(r->test_accuracy, 0.95);
  // Every epoch processed every sample exactly once, whatever joined or left during it.
  for (const auto& e : r->epochs) EXPECT_EQ(e.samples, 1438u) << "epoch " << e.epoch;
  // Each epoch reports the counts of its last step, which follow the schedule: 45 chunks an
  // epoch, 2 a step until step 10 and 3 after, so epoch 1 ends at step 18, epoch 2 at step 33.
  EXPECT_EQ(r->epochs[0].workers, 3u);
  EXPECT_EQ(r->epochs[0].shards, 1u);
  EXPECT_EQ(r->epochs[1].workers, 3u);
  EXPECT_EQ(r->epochs[1].shards, 3u);
  EXPECT_EQ(r->workers, 2u);
  EXPECT_EQ(r->shards, 2u);
  // The master timed every change (the report's "changes").
  ASSERT_EQ(r->changes.size(), 6u);
  const char* what[] = {"workers 3", "shards 3", "migrate 0", "workers 4", "shards 2", "workers 2"};
  const std::size_t key_bytes = 2 * sizeof(float);  // momentum: value and velocity per key
  for (std::size_t i = 0; i < 6; ++i) {
    const auto& c = r->changes[i];
    SCOPED_TRACE(c.what);
    EXPECT_EQ(c.what, what[i]);
    EXPECT_EQ(c.step, spec->schedule[i].at_step);
    const bool grows = i == 0 || i == 3, moves = i == 1 || i == 2 || i == 4;
    EXPECT_EQ(c.join_ms >= 0, grows);
    EXPECT_EQ(c.transfer_ms >= 0, moves);
    EXPECT_EQ(c.moved_bytes > 0, moves);
    EXPECT_EQ(c.moved_bytes % key_bytes, 0u);
    EXPECT_GE(c.gap_ms, 0);
    EXPECT_GE(c.pause_ms, 0);
    EXPECT_GT(c.samples_per_s_before, 0);
    EXPECT_GT(c.samples_per_s_after, 0);
  }
  // 1 -> 3 shards moves about two thirds of the 4,810 keys; a migration all of one shard's.
  EXPECT_GT(r->changes[1].moved_bytes, 4810 * key_bytes * 4 / 10);
  EXPECT_LT(r->changes[1].moved_bytes, 4810 * key_bytes * 8 / 10);
  EXPECT_LE(r->changes[2].moved_bytes, 4810 * key_bytes / 2);
}

TEST(train_elastic, migrating_and_adding_shards_is_invisible_to_the_math) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  using k = scheduler::schedule_action::kind_type;
  // The same worker changes at the same steps, with and without shard changes in between.
  auto plain = elastic_spec({{7, k::workers, 3}, {25, k::workers, 2}}, 3);
  auto moving = elastic_spec({{4, k::shards, 3},
                              {7, k::workers, 3},
                              {12, k::migrate, 1},
                              {19, k::shards, 1},
                              {25, k::workers, 2},
                              {31, k::migrate, 0}},
                             3);
  auto a = train_embedded(plain);
  auto b = train_embedded(moving);
  ASSERT_TRUE(a) << a.error().to_string();
  ASSERT_TRUE(b) << b.error().to_string();
  ASSERT_EQ(a->params.size(), b->params.size());
  ASSERT_FALSE(a->params.empty());
  EXPECT_EQ(0, std::memcmp(a->params.data(), b->params.data(), a->params.size() * sizeof(float)));
  for (const auto& e : b->epochs) EXPECT_EQ(e.samples, 1438u);
  // And the worker changes did happen: the run differs from one without them.
  auto fixed = elastic_spec({}, 3);
  auto c = train_embedded(fixed);
  ASSERT_TRUE(c);
  EXPECT_NE(a->params, c->params);
}

}  // namespace
}  // namespace coach::actors

namespace coach::actors {
namespace {

TEST(train_elastic, a_worker_that_dies_mid_step_leaves_and_the_job_completes) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  for (std::int64_t step : {0, 10, 22}) {  // its first step, mid-epoch, an epoch's last step
    auto spec = elastic_spec({}, 6);
    train_options opt;
    opt.workers = 3;
    opt.shards = 2;
    // Worker 1 dies after its push reached shard 0 and before it reached shard 1.
    opt.wrap_transport = crash_worker_after_first_push(1, step);
    auto r = train_embedded(spec, opt);
    ASSERT_TRUE(r) << r.error().to_string();
    ASSERT_EQ(r->epochs.size(), 6u) << "killed at step " << step;
    // Its chunk went back to the queue: every sample of every epoch processed exactly once.
    for (const auto& e : r->epochs) EXPECT_EQ(e.samples, 1438u) << "epoch " << e.epoch;
    EXPECT_EQ(r->workers, 2u);
    EXPECT_GE(r->test_accuracy, 0.93) << "killed at step " << step;
  }
}

}  // namespace
}  // namespace coach::actors

namespace coach::actors {
namespace {

TEST(train_host_reduce, one_push_per_host_learns_as_well_and_is_deterministic) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  auto spec = digits_spec();
  spec.slice_size = 256;
  auto run = [&](bool reduce, std::uint32_t shards) {
    auto s = spec;
    s.host_reduce = reduce;
    train_options opt;
    opt.workers = 3;
    opt.shards = shards;
    auto r = train_embedded(s, opt);
    EXPECT_TRUE(r) << r.error().to_string();
    return r ? *r : scheduler::job_result{};
  };
  const auto plain = run(false, 2);
  const auto reduced = run(true, 2);
  ASSERT_EQ(reduced.epochs.size(), std::size_t(spec.epochs));
  EXPECT_GE(reduced.test_accuracy, 0.95);
  for (const auto& e : reduced.epochs) EXPECT_EQ(e.samples, 1438u) << "epoch " << e.epoch;
  // Gradients cross once per host instead of once per worker; answers still reach all three:
  // (1 + 3) / (3 + 3) of the bytes, less the headers of the empty pushes.
  EXPECT_LT(double(reduced.bytes_moved), 0.72 * double(plain.bytes_moved))
      << reduced.bytes_moved << " against " << plain.bytes_moved;
  EXPECT_GT(double(reduced.bytes_moved), 0.6 * double(plain.bytes_moved));
  // Deterministic whoever deposits last, and sharding stays invisible to the math.
  const auto again = run(true, 2);
  const auto four = run(true, 4);
  ASSERT_EQ(again.params.size(), reduced.params.size());
  ASSERT_EQ(four.params.size(), reduced.params.size());
  EXPECT_EQ(0, std::memcmp(again.params.data(), reduced.params.data(),
                           reduced.params.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(four.params.data(), reduced.params.data(),
                           reduced.params.size() * sizeof(float)));
}

TEST(train_host_reduce, workers_joining_and_leaving_mid_epoch_reduce_with_the_rest) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  auto spec = scheduler::load_job_spec("examples/elastic.yaml");
  ASSERT_TRUE(spec) << spec.error().to_string();
  spec->host_reduce = true;
  auto r = train_embedded(*spec);
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_EQ(r->epochs.size(), std::size_t(spec->epochs));
  EXPECT_GE(r->test_accuracy, 0.95);
  for (const auto& e : r->epochs) EXPECT_EQ(e.samples, 1438u) << "epoch " << e.epoch;
  EXPECT_EQ(r->changes.size(), 6u);
}

}  // namespace
}  // namespace coach::actors
