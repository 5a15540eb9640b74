// Sparse tables as a user runs them (issue 43): a click-through-rate set made by `coach data
// ctr`, a model with embedding tables trained by `coach train` with 2 workers and 2 shards to
// a bar proportionate to the planted model's AUC, saved with its tables and read back by
// `coach eval` to the same figures; a run that rescales its workers and shards mid-epoch counts
// every sample once and lands near the unchanged run; function mode under a memory cap trains
// the same tables bit for bit; specs the sparse path cannot run yet are refused with one line.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/helpers/run_coach.hpp"
#include "tests/helpers/tensor_bytes.hpp"

namespace {

using test_files::tensor_bytes;

namespace fs = std::filesystem;
using coach::testing::run_coach;

struct fixture {
  fs::path dir;
  nlohmann::json planted;  ///< the generator's summary
};

/// 100,000 rows of 4 dense and 6 categorical fields (vocabularies up to 5,000), made once.
const fixture& data() {
  static const fixture f = [] {
    fixture out;
    out.dir = fs::temp_directory_path() / ("coach-sparse-" + std::to_string(::getpid()));
    fs::remove_all(out.dir);
    fs::create_directories(out.dir);
    const auto r = run_coach("data ctr --rows 100000 --out " + (out.dir / "c.tsv").string() +
                             " --fields 6 --dense 4 --max-vocab 5000 --signal-ids 10 --seed 3");
    EXPECT_EQ(r.code, 0) << r.output;
    std::ifstream in(out.dir / "c.tsv.json");
    out.planted = nlohmann::json::parse(
        std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
    return out;
  }();
  return f;
}

std::string spec(const std::string& extra = "", const std::string& consistency = "bsp") {
  return "name: sparse-it\n"
         "dataset: {format: ctr, path: " +
         (data().dir / "c.tsv").string() +
         ", n_dense: 4, n_fields: 6, test_fraction: 0.1, min_count: 20}\n"
         "model:\n  type: mlp\n  hidden: [64]\n  embeddings:\n"
         "    - {fields: all, rows: 100000, dim: 8}\n"
         "sparse_optimizer: {type: adagrad, learning_rate: 0.1}\n"
         "optimizer: {type: adam, learning_rate: 0.002}\n"
         "batch_size: 128\nepochs: 3\nseed: 3\nconsistency: " +
         consistency +
         "\nworkers: {min: 1, max: 4, initial: 2}\nshards: {min: 1, max: 4, initial: 2}\n" + extra;
}

fs::path write(const std::string& name, const std::string& text) {
  const auto path = data().dir / name;
  std::ofstream(path) << text;
  return path;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(
      std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
}

TEST(sparse_train, reaches_a_share_of_the_planted_auc_and_saves_what_eval_reads_back) {
  const auto s = write("s.yaml", spec());
  const auto model = data().dir / "m.safetensors";
  const auto report = data().dir / "r.json";
  auto r = run_coach("train " + s.string() + " --workers 2 --shards 2 --save " + model.string() +
                     " --report " + report.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("(2 workers, 2 shards, cpu"), std::string::npos) << r.output;
  const auto rep = read_json(report);
  const double auc = rep["epochs"].back()["test_auc"], loss = rep["epochs"].back()["test_log_loss"];
  const double best = data().planted["planted"]["test"]["auc"];
  const double best_loss = data().planted["planted"]["test"]["log_loss"];
  // Measured (2026-11-28): 0.7291 against the planted 0.7658 (86 % of its lift over chance),
  // log loss 0.4766 against 0.4506; the same figures every run (bsp is deterministic).
  EXPECT_GE(auc - 0.5, 0.75 * (best - 0.5)) << "AUC " << auc << ", planted " << best;
  EXPECT_LE(loss, 1.08 * best_loss) << "log loss " << loss << ", planted " << best_loss;
  // The tables beside the model, and coach eval reading both to the training's last figures.
  EXPECT_TRUE(fs::exists(data().dir / "m.tables.safetensors"));
  auto ev = run_coach("eval " + model.string() + " --data " + s.string() + " --json", true);
  ASSERT_EQ(ev.code, 0) << ev.output;
  const auto e = nlohmann::json::parse(ev.output);
  EXPECT_NEAR(e["auc"].get<double>(), auc, 1e-6);  // (the report rounds to 6 digits)
  EXPECT_NEAR(e["log_loss"].get<double>(), loss, 1e-6);
  EXPECT_EQ(e["samples"], 10000);
}

TEST(sparse_train, a_run_rescaled_mid_epoch_counts_every_sample_once_and_lands_near_the_plain_run) {
  const auto plain_report = data().dir / "plain.json";
  const auto elastic_report = data().dir / "elastic.json";
  auto r =
      run_coach("train " + write("p.yaml", spec()).string() + " --report " + plain_report.string());
  ASSERT_EQ(r.code, 0) << r.output;
  // 90,000 training rows, 256 a step: 352 steps an epoch; the changes land in the first.
  const std::string schedule =
      "schedule:\n  - {at_step: 40, workers: 4}\n  - {at_step: 90, shards: 3}\n"
      "  - {at_step: 140, workers: 1}\n  - {at_step: 200, migrate: 0}\n";
  r = run_coach("train " + write("e.yaml", spec(schedule)).string() + " --report " +
                elastic_report.string());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto plain = read_json(plain_report), elastic = read_json(elastic_report);
  ASSERT_EQ(elastic["changes"].size(), 4u) << elastic["changes"].dump();
  for (const auto& e : elastic["epochs"]) EXPECT_EQ(e["samples"], 90000) << e.dump();
  // The same samples in the same steps; only the order the workers' sums are added in differs.
  const double a = plain["epochs"].back()["test_auc"], b = elastic["epochs"].back()["test_auc"];
  EXPECT_NEAR(a, b, 0.01);
}

// A checkpoint holds the rows and their optimizer state: a run stopped after its first epoch
// and resumed from its checkpoint ends with the dense parameters and the tables bit for bit
// those of the straight run.
TEST(sparse_train, a_run_resumed_from_its_checkpoint_ends_with_the_straight_runs_rows) {
  const auto dir = data().dir;
  auto r = run_coach("train " + write("straight.yaml", spec()).string() + " --save " +
                     (dir / "straight.safetensors").string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::string one_epoch = spec();
  one_epoch.replace(one_epoch.find("epochs: 3"), 9, "epochs: 1");
  r = run_coach("train " + write("first.yaml", one_epoch).string() + " --checkpoint " +
                (dir / "ckpt.safetensors").string() + " --checkpoint-every 0");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("coach: checkpoint after epoch 1 "), std::string::npos) << r.output;
  r = run_coach("train " + write("rest.yaml", spec()).string() + " --resume " +
                (dir / "ckpt.safetensors").string() + " --save " +
                (dir / "resumed.safetensors").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("coach: resuming from "), std::string::npos) << r.output;
  EXPECT_TRUE(tensor_bytes(dir / "straight.safetensors") ==
              tensor_bytes(dir / "resumed.safetensors"))
      << "the dense parameters differ";
  const auto rows = tensor_bytes(dir / "straight.tables.safetensors");
  EXPECT_GT(rows.size(), 1000u);
  EXPECT_TRUE(rows == tensor_bytes(dir / "resumed.tables.safetensors")) << "the tables differ";
}

// Function mode: each invocation holds one step's rows, pulled by its worker (docs/sparse.md,
// "Function mode"); under a 256 MB cap the job ends with the dense parameters and the tables bit
// for bit those of the same job without invocations, its invocations each far under the cap.
TEST(sparse_train,
     function_mode_under_a_memory_cap_trains_the_tables_of_the_plain_run_bit_for_bit) {
  const auto dir = data().dir;
  std::string one_epoch = spec();
  one_epoch.replace(one_epoch.find("epochs: 3"), 9, "epochs: 1");
  auto r = run_coach("train " + write("fn-plain.yaml", one_epoch).string() + " --save " +
                     (dir / "fn-plain.safetensors").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto report = dir / "fn.json";
  r = run_coach("train " +
                write("fn.yaml", one_epoch + "function: {memory_mb: 256, deadline_s: 120, "
                                             "chunks_per_invocation: 100}\n")
                    .string() +
                " --save " + (dir / "fn.safetensors").string() + " --report " + report.string());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto rep = read_json(report);
  const auto& inv = rep["invocations"];
  // 352 steps of 2 workers, 100 tasks an invocation: 4 invocations a worker, none failed.
  EXPECT_EQ(inv["tasks"], 704) << inv.dump();
  EXPECT_EQ(inv["started"], 8) << inv.dump();
  EXPECT_EQ(
      inv["timed_out"].get<int>() + inv["out_of_memory"].get<int>() + inv["failed"].get<int>(), 0)
      << inv.dump();
  EXPECT_GT(inv["peak_memory_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_LT(inv["peak_memory_bytes"].get<std::uint64_t>(), std::uint64_t(256) << 20);
  EXPECT_TRUE(tensor_bytes(dir / "fn-plain.safetensors") == tensor_bytes(dir / "fn.safetensors"))
      << "the dense parameters differ";
  const auto rows = tensor_bytes(dir / "fn-plain.tables.safetensors");
  EXPECT_GT(rows.size(), 1000u);
  EXPECT_TRUE(rows == tensor_bytes(dir / "fn.tables.safetensors")) << "the tables differ";
}

TEST(sparse_train, a_consistency_the_sparse_path_cannot_run_is_refused_with_one_line) {
  auto r = run_coach("train " + write("asp.yaml", spec("", "asp")).string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("field 'consistency' is asp: a model with embedding tables "
                          "(model.embeddings) runs under consistency bsp, without host_reduce, "
                          "so far"),
            std::string::npos)
      << r.output;
}

}  // namespace
