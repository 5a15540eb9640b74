// PyTorch scripts as Coach workers through the embedded cluster, as `coach train` runs them
// (ctest torch.scripts, labels integration and torch): the fashion CNN example learns a subset
// and its saved model loads into the script's own CNN with load_state_dict, giving Coach's
// accuracy; a residual network (which the YAML layer list cannot express) learns; processes
// rescaled 2 -> 4 -> 1 mid-epoch give each step the samples and the loss (within 1e-4) of a run
// that never rescales; a click-through-rate model whose coach.torch.Embedding tables live in the
// shards reaches a share of a planted set's AUC, its rows trained there, and a run of it resumed
// from its checkpoint ends with the straight run's parameters and rows. Needs PyTorch's venv
// (scripts/torch-venv.sh) and Fashion-MNIST; skips with the reason otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "actors/embedded_cluster.hpp"
#include "script_runs.hpp"
#include "sparse/row_store.hpp"
#include "spec/checkpoint_file.hpp"
#include "worker/ctr_generator.hpp"

namespace coach::actors {
namespace {

const std::string python = std::string(COACH_VENV) + "/bin/python";

bool have_torch() {
  static const bool ok =
      std::system((python + " -c 'import torch, safetensors' >/dev/null 2>&1").c_str()) == 0;
  return ok;
}

bool have_fashion() {
  return std::filesystem::exists("/usr/share/datasets/fashion-mnist");
}

#define NEED_TORCH()                                                                          \
  if (!have_torch())                                                                          \
    GTEST_SKIP() << python << " cannot import torch and safetensors (scripts/torch-venv.sh)"; \
  if (!have_fashion()) GTEST_SKIP() << "no Fashion-MNIST (apt-get install dataset-fashion-mnist)"

script_run train(const scheduler::job_spec& spec) {
  return train_script(spec, python);
}

scheduler::job_spec example(const std::string& file, std::vector<std::string> args, int epochs) {
  auto spec = scheduler::load_job_spec(std::string(COACH_SOURCE_DIR) + "/" + file);
  if (!spec) throw std::runtime_error(spec.error().to_string());
  spec->model.script->args = std::move(args);
  spec->epochs = epochs;
  return *spec;
}

/// What `python CMD` printed (stdout), or the empty string when it failed.
std::string python_output(const std::string& args) {
  std::string out;
  FILE* p = ::popen((python + " " + args + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  return ::pclose(p) == 0 ? out : "failed: " + out;
}

TEST(torch_script, the_fashion_cnn_learns_a_subset_and_its_saved_model_loads_in_pytorch) {
  NEED_TORCH();
  auto spec = example("examples/torch/fashion_cnn.yaml",
                      {"--train-limit", "6000", "--test-limit", "2000"}, 2);
  const auto r = train(spec);
  ASSERT_TRUE(r.result) << r.result.error().to_string();
  ASSERT_EQ(r.result->epochs.size(), 2u);
  EXPECT_EQ(r.result->num_params, 422026u);
  for (const auto& e : r.result->epochs) EXPECT_EQ(e.samples, 6000u) << "epoch " << e.epoch;
  std::printf("fashion CNN, 6000 samples, 2 epochs: test accuracy %.4f\n", r.result->test_accuracy);
  // 0.8665 measured (all 60,000 samples for 5 epochs: 0.9247; docs/performance.md).
  EXPECT_GE(r.result->test_accuracy, 0.83);
  // Saved as coach train --save writes it, the script's own CNN loads it as it is.
  const auto path = std::filesystem::temp_directory_path() / "coach-torch-cnn.safetensors";
  ASSERT_TRUE(scheduler::write_model(path.string(), spec, *r.result));
  const auto out = python_output(std::string(COACH_SOURCE_DIR) +
                                 "/tests/python/scripts/load_saved.py " + path.string() + " 2000");
  std::filesystem::remove(path);
  double accuracy = -1;
  ASSERT_EQ(std::sscanf(out.c_str(), "accuracy %lf", &accuracy), 1) << out;
  EXPECT_NEAR(accuracy, r.result->test_accuracy, 1e-6) << out;
}

TEST(torch_script, a_residual_network_learns_a_subset) {
  NEED_TORCH();
  const auto r = train(example("examples/torch/fashion_resnet.yaml",
                               {"--train-limit", "6000", "--test-limit", "2000"}, 2));
  ASSERT_TRUE(r.result) << r.result.error().to_string();
  ASSERT_EQ(r.result->epochs.size(), 2u);
  std::printf("fashion ResNet, 6000 samples, 2 epochs: test accuracy %.4f\n",
              r.result->test_accuracy);
  // 0.8130 measured (all 60,000 samples: docs/performance.md).
  EXPECT_GE(r.result->test_accuracy, 0.77);
}

scheduler::job_spec mlp(const std::string& schedule) {
  const std::string yaml =
      "name: torch-mlp\nmodel: {script: tests/python/scripts/torch_mlp.py}\n"
      "optimizer: {type: adam, learning_rate: 0.01}\nbatch: {global: 64}\nconsistency: bsp\n"
      "seed: 3\nepochs: 1\nworkers: {min: 1, max: 4, initial: 2}\nshards: 2\n" +
      schedule;
  auto spec = scheduler::parse_job_spec(yaml, "torch-mlp.yaml", COACH_SOURCE_DIR);
  EXPECT_TRUE(spec) << (spec ? "" : spec.error().to_string());
  return *spec;
}

TEST(torch_script, processes_rescaled_2_4_1_mid_epoch_train_as_a_run_that_never_rescales) {
  NEED_TORCH();
  const auto plain = train(mlp(""));
  const auto rescaled =
      train(mlp("schedule:\n  - {at_step: 4, workers: 4}\n  - {at_step: 10, workers: 1}\n"));
  expect_same_steps(plain, rescaled, 19u, 1200u, 1e-4);
  ASSERT_EQ(rescaled.steps.size(), 19u);
  EXPECT_EQ(rescaled.steps[2].members, 2u);
  EXPECT_EQ(rescaled.steps[6].members, 4u);
  EXPECT_EQ(rescaled.steps[15].members, 1u);
  EXPECT_NEAR(rescaled.result->test_accuracy, plain.result->test_accuracy, 0.01);
}

/// 100,000 rows of 4 dense and 6 categorical fields (vocabularies up to 5,000, 10 signal ids a
/// field, seed 3; the last 10 % held out): sparse_train_test's set.
struct ctr_set {
  std::filesystem::path path;
  worker::ctr_summary planted;
};

const ctr_set& ctr_data() {
  static const ctr_set set = [] {
    ctr_set out;
    const auto dir =
        std::filesystem::temp_directory_path() / ("coach-torch-ctr-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    out.path = dir / "c.tsv";
    worker::ctr_generator_options o;
    o.rows = 100000;
    o.n_dense = 4;
    o.n_fields = 6;
    o.max_vocab = 5000;
    o.signal_ids = 10;
    o.seed = 3;
    auto s = worker::write_ctr(o, out.path.string());
    if (!s) throw std::runtime_error(s.error().to_string());
    out.planted = *s;
    return out;
  }();
  return set;
}

scheduler::job_spec ctr_spec(int epochs) {
  const auto& data = ctr_data();
  const std::string yaml =
      "name: torch-ctr\nmodel:\n  script: examples/torch/ctr_model.py\n  args: [--data, " +
      data.path.string() +
      ", --dense, '4', --fields, '6', --test-fraction, '0.1', --rows, '100000', --dim, '8', "
      "--hidden, '64', --min-count, '20']\n"
      "optimizer: {type: adam, learning_rate: 0.002}\n"
      "sparse_optimizer: {type: adagrad, learning_rate: 0.1}\n"
      "batch_size: 128\nepochs: " +
      std::to_string(epochs) +
      "\nseed: 3\nconsistency: bsp\n"
      "workers: {min: 1, max: 4, initial: 2}\nshards: {min: 1, max: 4, initial: 2}\n";
  auto spec = scheduler::parse_job_spec(yaml, "torch-ctr.yaml", COACH_SOURCE_DIR);
  EXPECT_TRUE(spec) << spec.error().to_string();
  return *spec;
}

/// The rows of every shard's transfer merged into one store.
sparse::row_store merged_rows(const scheduler::job_spec& spec, const scheduler::job_result& r) {
  std::vector<sparse::table_config> tables(6, sparse::table_config{100000, 8, 0.01f});
  const sparse::bucket_range all[] = {{0, sparse::bucket_count}};
  auto store = sparse::row_store::create(spec.seed, tables, spec.sparse_optimizer, all);
  EXPECT_TRUE(store) << store.error().to_string();
  for (const auto& blob : r.rows) EXPECT_TRUE(store->merge(blob));
  return std::move(*store);
}

TEST(torch_script, a_ctr_model_with_its_tables_in_the_shards_learns_a_planted_set) {
  NEED_TORCH();
  const auto& data = ctr_data();
  const auto spec = ctr_spec(3);
  const auto r = train(spec);
  ASSERT_TRUE(r.result) << r.result.error().to_string();
  ASSERT_EQ(r.result->epochs.size(), 3u);
  for (const auto& e : r.result->epochs) EXPECT_EQ(e.samples, 90000u) << "epoch " << e.epoch;
  // The dense layout is the MLP's alone: (4 + 6 x 8) x 64 + 64 + 64 + 1.
  EXPECT_EQ(r.result->num_params, 3457u);
  const auto& last = r.result->epochs.back();
  const double best = data.planted.test_auc, best_loss = data.planted.test_log_loss;
  std::printf(
      "torch CTR, 90000 samples, 3 epochs: test AUC %.4f (planted %.4f), log loss %.4f "
      "(planted %.4f)\n",
      last.test_auc, best, last.test_log_loss, best_loss);
  // Measured: 0.7375 of the planted 0.7658 (89 % of its lift over chance), log loss 0.4706 of
  // 0.4506; the native model of sparse_train_test on the same set: 0.7291.
  EXPECT_GE(last.test_auc - 0.5, 0.8 * (best - 0.5));
  EXPECT_LE(last.test_log_loss, 1.06 * best_loss);
  // The rows live in the shards: every table's rows came back, trained (Adagrad's accumulator
  // moved) where a step pushed their gradients.
  ASSERT_EQ(r.result->rows.size(), 2u);  // one transfer a shard
  const auto store = merged_rows(spec, *r.result);
  for (std::uint32_t t = 0; t < 6; ++t) {
    const auto held = store.held_rows(t);
    std::size_t trained = 0;
    for (auto row : held) {
      const auto state = store.find_state(t, row);
      trained += std::any_of(state.begin(), state.end(), [](float v) { return v > 0; });
    }
    EXPECT_GT(trained, 0u) << "table " << t;
    EXPECT_EQ(trained, held.size()) << "table " << t << ": rows pulled but never pushed";
  }
}

TEST(torch_script, a_ctr_run_resumed_from_its_checkpoint_ends_with_the_straight_runs_rows) {
  NEED_TORCH();
  const auto straight = train(ctr_spec(2));
  ASSERT_TRUE(straight.result) << straight.result.error().to_string();
  const auto ckpt = std::filesystem::temp_directory_path() /
                    ("coach-torch-ctr-ckpt-" + std::to_string(::getpid()) + ".safetensors");
  train_options opt;
  opt.python = python;
  opt.checkpoint.path = ckpt.string();
  auto first = train_embedded(ctr_spec(1), opt);
  ASSERT_TRUE(first) << first.error().to_string();
  train_options rest;
  rest.python = python;
  rest.resume = ckpt.string();
  auto resumed = train_embedded(ctr_spec(2), rest);
  std::filesystem::remove(ckpt);
  ASSERT_TRUE(resumed) << resumed.error().to_string();
  EXPECT_TRUE(straight.result->params == resumed->params) << "the dense parameters differ";
  EXPECT_EQ(straight.result->epochs.back().test_auc, resumed->epochs.back().test_auc);
  // Every row, its values and Adagrad's state, bit for bit.
  const auto spec = ctr_spec(2);
  const auto a = merged_rows(spec, *straight.result);
  const auto b = merged_rows(spec, *resumed);
  std::size_t rows = 0;
  for (std::uint32_t t = 0; t < 6; ++t) {
    const auto held = a.held_rows(t);
    ASSERT_EQ(held, b.held_rows(t)) << "table " << t;
    for (auto row : held) {
      const auto va = a.find(t, row), vb = b.find(t, row);
      const auto sa = a.find_state(t, row), sb = b.find_state(t, row);
      ASSERT_TRUE(std::equal(va.begin(), va.end(), vb.begin(), vb.end())) << t << " " << row;
      ASSERT_TRUE(std::equal(sa.begin(), sa.end(), sb.begin(), sb.end())) << t << " " << row;
    }
    rows += held.size();
  }
  EXPECT_GT(rows, 1000u);
}

// Function mode: each invocation's process answers its lookups and steps under the cap and
// the deadline; every parameter and row ends bit for bit as without invocations.
TEST(torch_script, a_ctr_run_in_function_mode_ends_with_the_plain_runs_parameters_and_rows) {
  NEED_TORCH();
  const auto plain = train(ctr_spec(1));
  ASSERT_TRUE(plain.result) << plain.result.error().to_string();
  auto spec = ctr_spec(1);
  spec.function = scheduler::function_limits{120, 2048, 200};
  const auto bounded = train(spec);
  ASSERT_TRUE(bounded.result) << bounded.result.error().to_string();
  ASSERT_TRUE(bounded.result->invocations);
  const auto& inv = *bounded.result->invocations;
  // 352 steps a worker (45,000 samples, 128 a step), 200 an invocation: 2 a worker, none failed.
  EXPECT_EQ(inv.tasks, 704u);
  EXPECT_EQ(inv.started, 4u);
  EXPECT_EQ(inv.failed + inv.timed_out + inv.out_of_memory, 0u);
  EXPECT_TRUE(plain.result->params == bounded.result->params) << "the dense parameters differ";
  const auto a = merged_rows(spec, *plain.result);
  const auto b = merged_rows(spec, *bounded.result);
  std::size_t rows = 0;
  for (std::uint32_t t = 0; t < 6; ++t) {
    const auto held = a.held_rows(t);
    ASSERT_EQ(held, b.held_rows(t)) << "table " << t;
    for (auto row : held) {
      const auto va = a.find(t, row), vb = b.find(t, row);
      ASSERT_TRUE(std::equal(va.begin(), va.end(), vb.begin(), vb.end())) << t << " " << row;
    }
    rows += held.size();
  }
  EXPECT_GT(rows, 1000u);
}

}  // namespace
}  // namespace coach::actors
