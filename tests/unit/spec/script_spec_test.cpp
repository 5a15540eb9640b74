// A job spec whose model is a user's script (model: {script: ...}): the script's path resolved
// against the spec's folder, its arguments and start-up settings read, and what a script's model
// cannot run with refused in one line naming the field.
#include <gtest/gtest.h>

#include "spec/job_spec.hpp"

namespace coach::scheduler {
namespace {

const std::string base = R"(name: torch-job
model: {script: train.py, args: [--lr, "0.1"], start_timeout_s: 30, warm: 2}
optimizer: {type: adam, learning_rate: 0.001}
batch: {global: 64}
epochs: 2
)";

error error_of(const std::string& text) {
  auto r = parse_job_spec(text, "job.yaml", "/submitter", "/specs/dir");
  EXPECT_FALSE(r) << "parsed although it should not:\n" << text;
  if (r) return {};
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << "not one line";
  return r.error();
}

TEST(script_spec, the_script_is_found_beside_its_spec_with_its_arguments) {
  auto s = parse_job_spec(base, "job.yaml", "/submitter", "/specs/dir");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->model.type, "script");
  ASSERT_TRUE(s->model.script);
  EXPECT_EQ(s->model.script->path, "/specs/dir/train.py");
  EXPECT_EQ(s->model.script->args, (std::vector<std::string>{"--lr", "0.1"}));
  EXPECT_EQ(s->model.script->start_timeout_s, 30);
  EXPECT_EQ(s->model.script->warm, 2);
  EXPECT_EQ(s->model.external, nullptr) << "registered by its first process, not the parser";
  // Without the spec's folder (a spec sent as text), against the submitter's directory.
  auto t = parse_job_spec(base, "job.yaml", "/submitter");
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->model.script->path, "/submitter/train.py");
  auto defaults = parse_job_spec(
      "name: j\nmodel: {script: /abs/t.py}\noptimizer: {type: sgd}\nbatch_size: 8\nepochs: 1\n",
      "job.yaml");
  ASSERT_TRUE(defaults) << defaults.error().to_string();
  EXPECT_EQ(defaults->model.script->path, "/abs/t.py");
  EXPECT_EQ(defaults->model.script->start_timeout_s, 120);
  EXPECT_EQ(defaults->model.script->warm, 1);
}

TEST(script_spec, function_limits_bound_a_scripts_processes) {
  auto s = parse_job_spec(base +
                              "function: {deadline_s: 2.5, memory_mb: 700, "
                              "chunks_per_invocation: 3}\n",
                          "job.yaml");
  ASSERT_TRUE(s) << s.error().to_string();
  ASSERT_TRUE(s->function);
  EXPECT_EQ(s->function->deadline_s, 2.5);
  EXPECT_EQ(s->function->memory_mb, 700u);
  EXPECT_EQ(s->function->chunks_per_invocation, 3u);
  EXPECT_EQ(error_of(base + "function: {chunks_per_invocation: 0}\n").message.substr(0, 56),
            "job.yaml:6: field 'function.chunks_per_invocation' must ");
}

TEST(script_spec, what_a_script_cannot_run_with_is_refused_at_its_field) {
  EXPECT_EQ(error_of(base + "dataset: {format: idx, path: /data}\n").message,
            "job.yaml:6: field 'dataset' is for a model of layers; a script reads its own data");
  EXPECT_EQ(error_of(base + "backend: cuda\n").message,
            "job.yaml:6: field 'backend' is for a model of layers; a script puts its model on a "
            "device itself");
  EXPECT_EQ(error_of(base + "gpus_per_worker: 1\n").message,
            "job.yaml:6: field 'gpus_per_worker' is for a model of layers; a script puts its "
            "model on a device itself");
  const std::string sgd = "optimizer: {type: sgd, learning_rate: 0.1}\n";
  std::string averaging = base;
  averaging.replace(averaging.find("optimizer:"),
                    averaging.find("batch:") - averaging.find("optimizer:"), sgd);
  averaging.replace(averaging.find("batch:"), averaging.find("epochs:") - averaging.find("batch:"),
                    "batch: {per_worker: 16}\n");
  EXPECT_NE(error_of(averaging + "consistency: averaging:4\n")
                .message.find("a script's model takes bsp, ssp:S or asp"),
            std::string::npos);
}

TEST(script_spec, bad_script_fields_name_the_field) {
  auto model = [](const std::string& m) {
    return "name: j\nmodel: " + m + "\noptimizer: {type: sgd}\nbatch_size: 8\n";
  };
  EXPECT_NE(error_of(model("{script: t.py, layers: [dense]}"))
                .message.find(
                    "field 'model.layers' is for a model of layers; a script builds its own model"),
            std::string::npos);
  EXPECT_NE(error_of(model("{script: t.py, args: --lr}"))
                .message.find("must be a list of the script's arguments"),
            std::string::npos);
  EXPECT_NE(error_of(model("{script: \"\"}")).message.find("must name the script's file"),
            std::string::npos);
  EXPECT_NE(error_of(model("{script: t.py, warm: 100}")).message.find("warm"), std::string::npos);
  EXPECT_NE(error_of(model("{script: t.py, start_timeout_s: 0}")).message.find("start_timeout_s"),
            std::string::npos);
  EXPECT_NE(error_of(model("{type: script}")).message.find("script"), std::string::npos);
  EXPECT_NE(error_of("name: j\ndataset: {format: csv, path: d.csv}\nmodel: {hidden: [8], args: "
                     "[x]}\noptimizer: {type: sgd}\nbatch_size: 8\n")
                .message.find("is for a script's model (model: {script: FILE})"),
            std::string::npos);
}

worker::external_layout layout_with_tables(std::size_t tables) {
  worker::external_layout l;
  l.tensors = {{"fc.weight", {2, 8}, worker::tensor_kind::param, 0}};
  l.floats = 16;
  l.samples = 100;
  for (std::size_t t = 0; t < tables; ++t)
    l.tables.push_back({"emb." + std::to_string(t), 1000, 8, 0.01f});
  return l;
}

TEST(script_spec, a_script_with_tables_runs_as_a_model_with_embeddings_does) {
  auto s = parse_job_spec(base + "sparse_optimizer: {type: lazy_adam, learning_rate: 0.01}\n",
                          "job.yaml");
  ASSERT_TRUE(s) << s.error().to_string();  // allowed before the tables are known
  EXPECT_EQ(s->slice_size, 16384u);
  ASSERT_TRUE(apply_script_tables(*s, layout_with_tables(2)));
  EXPECT_EQ(s->slice_size, sparse_slice_size);  // the rows spread over the shards
  auto explicit_slices = *parse_job_spec(base + "slice_size: 4096\n", "job.yaml");
  ASSERT_TRUE(apply_script_tables(explicit_slices, layout_with_tables(1)));
  EXPECT_EQ(explicit_slices.slice_size, 4096u);
  // Without tables nothing changes; sparse_optimizer then has nothing to train.
  auto plain = *parse_job_spec(base, "job.yaml");
  ASSERT_TRUE(apply_script_tables(plain, layout_with_tables(0)));
  EXPECT_EQ(plain.slice_size, 16384u);
  auto orphan = apply_script_tables(*s, layout_with_tables(0));
  ASSERT_FALSE(orphan);
  EXPECT_EQ(orphan.error().message,
            "field 'sparse_optimizer' is for a model with embedding tables, and the script "
            "declares none (coach.torch.Embedding)");
  // ssp and host_reduce: not with tables (so far), one line; function mode runs them.
  auto bounded = parse_job_spec(base + "function: {memory_mb: 700}\n", "job.yaml");
  ASSERT_TRUE(bounded) << bounded.error().to_string();
  EXPECT_TRUE(apply_script_tables(*bounded, layout_with_tables(2)));
  const std::pair<std::string, std::string> refused[] = {
      {"consistency: ssp:2\n",
       "field 'consistency' is ssp:2: a script with embedding tables ('emb.0' and 1 more) runs "
       "under consistency bsp, without host_reduce, so far"},
  };
  for (const auto& [extra, message] : refused) {
    auto spec = parse_job_spec(base + extra, "job.yaml");
    ASSERT_TRUE(spec) << extra << spec.error().to_string();  // a script without tables may
    auto r = apply_script_tables(*spec, layout_with_tables(2));
    ASSERT_FALSE(r) << extra;
    EXPECT_EQ(r.error().code, errc::unsupported);
    EXPECT_EQ(r.error().message, message);
  }
}

}  // namespace
}  // namespace coach::scheduler
