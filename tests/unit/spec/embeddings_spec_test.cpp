// model.embeddings and sparse_optimizer in a job spec (issue 43): a ctr spec parses to the values
// and defaults it says, every bad entry gets one line naming its field (model.interaction's
// too), and a model with tables, with or without interaction dot, goes through model_yaml and
// back to the same network.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "spec/checkpoint_file.hpp"
#include "spec/job_spec.hpp"
#include "worker/model_file.hpp"
#include "worker/network.hpp"

namespace coach::scheduler {
namespace {

/// A ctr job whose model and sparse_optimizer sections are `model` and `extra`.
std::string ctr_spec(std::string_view model, std::string_view extra = "",
                     std::string_view dataset = "{format: ctr, path: /d/train.tsv, n_fields: 4}") {
  std::string s = "name: ctr\ndataset: " + std::string(dataset) + "\nmodel:\n" +
                  std::string(model) + "optimizer: {type: adam}\nbatch_size: 128\nepochs: 1\n" +
                  std::string(extra);
  return s;
}

constexpr std::string_view two_entries = R"(  hidden: [64]
  embeddings:
    - {rows: 100000, dim: 16}
    - {fields: [1, 3], rows: 500, dim: 4, pooling: mean, init_scale: 0.05, per_field: false}
)";

TEST(embeddings_spec, a_ctr_spec_parses_with_its_defaults) {
  auto s = parse_job_spec(ctr_spec(two_entries), "job.yaml");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->dataset.format, worker::dataset_format::ctr);
  EXPECT_EQ(s->dataset.n_dense, 13u);
  EXPECT_EQ(s->dataset.n_fields, 4u);
  EXPECT_EQ(s->dataset.normalize, worker::normalization::none) << "ctr's default";
  ASSERT_EQ(s->model.embeddings.size(), 2u);
  worker::embedding_config a;
  a.rows = 100000;
  a.dim = 16;
  EXPECT_EQ(s->model.embeddings[0], a) << "fields all, sum, 0.01, per_field";
  EXPECT_TRUE(s->model.embeddings[0].fields.empty());
  EXPECT_EQ(s->model.embeddings[0].pooling, sparse::pooling::sum);
  EXPECT_FLOAT_EQ(s->model.embeddings[0].init_scale, 0.01f);
  EXPECT_TRUE(s->model.embeddings[0].per_field);
  const auto& b = s->model.embeddings[1];
  EXPECT_EQ(b.fields, (std::vector<int>{1, 3}));
  EXPECT_EQ(b.rows, 500u);
  EXPECT_EQ(b.dim, 4u);
  EXPECT_EQ(b.pooling, sparse::pooling::mean);
  EXPECT_FLOAT_EQ(b.init_scale, 0.05f);
  EXPECT_FALSE(b.per_field);
  EXPECT_EQ(s->sparse_optimizer, sparse::row_optimizer_config{}) << "adagrad, 0.01";

  auto adam = parse_job_spec(
      ctr_spec(two_entries,
               "sparse_optimizer: {type: lazy_adam, learning_rate: 0.002, beta2: 0.99, "
               "weight_decay: 0.0001}\n",
               "{format: ctr, path: /d/t.tsv.gz, n_dense: 0, n_fields: 4, test_fraction: 0.1, "
               "normalize: max}"),
      "job.yaml");
  ASSERT_TRUE(adam) << adam.error().message;
  EXPECT_EQ(adam->dataset.n_dense, 0u);
  EXPECT_DOUBLE_EQ(adam->dataset.test_fraction, 0.1);
  EXPECT_EQ(adam->dataset.normalize, worker::normalization::max);
  const auto& o = adam->sparse_optimizer;
  EXPECT_EQ(o.kind, sparse::row_optimizer_kind::lazy_adam);
  EXPECT_FLOAT_EQ(o.learning_rate, 0.002f);
  EXPECT_FLOAT_EQ(o.beta1, 0.9f);
  EXPECT_FLOAT_EQ(o.beta2, 0.99f);
  EXPECT_FLOAT_EQ(o.epsilon, 1e-8f) << "lazy_adam's default epsilon";
  EXPECT_FLOAT_EQ(o.weight_decay, 0.0001f);
}

TEST(embeddings_spec, every_bad_entry_names_its_field) {
  const auto error_of = [](const std::string& yaml) {
    auto s = parse_job_spec(yaml, "job.yaml");
    return s ? std::string("no error") : s.error().message;
  };
  const std::string hidden = "  hidden: [8]\n  embeddings:\n";
  EXPECT_EQ(error_of(ctr_spec(hidden + "    - {rows: 10, dim: 4}\n    - {rows: 10, dim: 0}\n")),
            "job.yaml:7: field 'model.embeddings[1].dim' must be >= 1, got 0");
  EXPECT_EQ(error_of(ctr_spec(hidden + "    - {dim: 4}\n")),
            "job.yaml:5: field 'model.embeddings[0].rows' is required");
  EXPECT_EQ(error_of(ctr_spec(hidden + "    - {rows: 10, dim: 4, pooling: max}\n")),
            "job.yaml:6: field 'model.embeddings[0].pooling' must be one of sum, mean, got 'max'");
  EXPECT_EQ(error_of(ctr_spec(hidden + "    - {rows: 10, dim: 4, fields: []}\n")),
            "job.yaml:6: field 'model.embeddings[0].fields' must be all or a non-empty list of "
            "field indices, got a list");
  EXPECT_EQ(error_of(ctr_spec(hidden + "    - {rows: 10, dim: 4, fields: [0, 0]}\n")),
            "job.yaml:6: field 'model.embeddings[0].fields[1]' lists field 0 a second time");
  EXPECT_EQ(error_of(ctr_spec(hidden + "    - {rows: 10, dim: 4, dims: 3}\n")),
            "job.yaml:6: unknown field 'model.embeddings[0].dims' (did you mean "
            "'model.embeddings[0].dim'?)");
  EXPECT_EQ(error_of(ctr_spec(hidden + "    - {rows: 10, dim: 4, fields: [2, 4]}\n")),
            "job.yaml:6: field 'model.embeddings[0].fields[1]' must be < the data set's "
            "n_fields (4), got 4");
  EXPECT_EQ(
      error_of(ctr_spec(hidden + "    - {rows: 10, dim: 4}\n", "", "{format: csv, path: /d.csv}")),
      "job.yaml:6: field 'model.embeddings' needs a data set with categorical fields "
      "(dataset.format: ctr), got format csv");
  EXPECT_EQ(error_of(ctr_spec("  hidden: [8]\n", "sparse_optimizer: {type: sgd}\n")),
            "job.yaml:8: field 'sparse_optimizer' is for a model with embedding tables "
            "(model.embeddings), which this has not");
  const std::string one = hidden + "    - {rows: 10, dim: 4}\n";
  EXPECT_EQ(error_of(ctr_spec(one, "sparse_optimizer: {type: adam}\n")),
            "job.yaml:10: field 'sparse_optimizer.type' must be one of sgd, adagrad, lazy_adam, "
            "got 'adam'");
  EXPECT_EQ(error_of(ctr_spec(one, "sparse_optimizer: {beta1: 0.8}\n")),
            "job.yaml:10: field 'sparse_optimizer.beta1' applies only to type lazy_adam, not "
            "adagrad");
  EXPECT_EQ(error_of(ctr_spec(one, "sparse_optimizer: {learning_rate: 0}\n")),
            "job.yaml:10: field 'sparse_optimizer.learning_rate' must be > 0, got 0");
  EXPECT_EQ(error_of(ctr_spec(one, "", "{format: csv, path: /d.csv, n_fields: 3}")),
            "job.yaml:2: field 'dataset.n_fields' applies only to format ctr, not csv");
}

TEST(embeddings_spec, a_model_with_tables_round_trips_through_its_yaml) {
  auto s = parse_job_spec(ctr_spec(two_entries), "job.yaml");
  ASSERT_TRUE(s) << s.error().message;
  worker::dataset data;
  data.rows = 1;
  data.features = 13;
  data.classes = 2;
  data.fields = 4;
  auto net = worker::network::for_data(s->model, data);
  ASSERT_TRUE(net) << net.error().message;
  ASSERT_EQ(net->tables().size(), 5u);
  const std::string yaml = worker::model_yaml(*net);
  EXPECT_EQ(yaml,
            "{type: layers, input_shape: [1, 1, 81], embeddings: [{fields: [0], rows: 100000, "
            "dim: 16, pooling: sum, init_scale: 0.01, per_field: false}, {fields: [1], rows: "
            "100000, dim: 16, pooling: sum, init_scale: 0.01, per_field: false}, {fields: [2], "
            "rows: 100000, dim: 16, pooling: sum, init_scale: 0.01, per_field: false}, {fields: "
            "[3], rows: 100000, dim: 16, pooling: sum, init_scale: 0.01, per_field: false}, "
            "{fields: [1, 3], rows: 500, dim: 4, pooling: mean, init_scale: 0.05, per_field: "
            "false}], layers: [{type: dense, units: 64}, {type: relu}, {type: dense, units: 2}]}");
  auto again = parse_model_yaml(yaml, "m.yaml");
  ASSERT_TRUE(again) << again.error().message;
  auto net2 = worker::network::for_data(*again, data);
  ASSERT_TRUE(net2) << net2.error().message;
  EXPECT_EQ(net2->tables(), net->tables());
  EXPECT_EQ(net2->inputs(), 13 + 4 * 16 + 4);
  EXPECT_EQ(net2->num_params(), net->num_params());
  EXPECT_EQ(worker::model_yaml(*net2), yaml);
}

TEST(embeddings_spec, interaction_dot_needs_tables_of_one_dim) {
  const auto error_of = [](const std::string& yaml) {
    auto s = parse_job_spec(yaml, "job.yaml");
    return s ? std::string("no error") : s.error().message;
  };
  const std::string hidden = "  hidden: [8]\n  embeddings:\n";
  const std::string same = hidden +
                           "    - {rows: 10, dim: 4}\n    - {fields: [1, 2], rows: 10, "
                           "dim: 4, per_field: false}\n";
  auto none = parse_job_spec(ctr_spec(same), "job.yaml");
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_EQ(none->model.interaction, worker::interaction::none) << "the default";
  auto dot = parse_job_spec(ctr_spec(same + "  interaction: dot\n"), "job.yaml");
  ASSERT_TRUE(dot) << dot.error().message;
  EXPECT_EQ(dot->model.interaction, worker::interaction::dot);

  EXPECT_EQ(error_of(ctr_spec(hidden + "    - {rows: 10, dim: 4}\n    - {rows: 10, dim: 8}\n" +
                              "  interaction: dot\n")),
            "job.yaml:7: field 'model.embeddings[1].dim' must equal model.embeddings[0].dim (4) "
            "with interaction dot (the dot products pair every two tables), got 8");
  EXPECT_EQ(error_of(ctr_spec(same + "  interaction: cross\n")),
            "job.yaml:8: field 'model.interaction' must be one of none, dot, got 'cross'");
  EXPECT_EQ(error_of(ctr_spec("  hidden: [8]\n  interaction: dot\n")),
            "job.yaml:5: field 'model.interaction' is for a model with embedding tables "
            "(model.embeddings), which this has not");
  EXPECT_EQ(error_of(ctr_spec("  hidden: [8]\n  interaction: none\n")),
            "job.yaml:5: field 'model.interaction' is for a model with embedding tables "
            "(model.embeddings), which this has not");
  EXPECT_EQ(error_of("name: s\nmodel: {script: train.py, interaction: dot}\noptimizer: {type: "
                     "sgd}\nbatch_size: 8\nepochs: 1\n"),
            "job.yaml:2: field 'model.interaction' is for a model of layers; a script builds its "
            "own model");
}

TEST(embeddings_spec, a_dot_model_round_trips_through_its_yaml) {
  // model_yaml writes the interaction; a saved model's file is read back by
  // network_of_model_file (what coach eval loads), with coach.features and coach.fields as
  // write_model records them: the same tables, inputs and layers.
  auto s = parse_job_spec(ctr_spec("  hidden: [16]\n  embeddings:\n    - {rows: 1000, dim: 4}\n"
                                   "  interaction: dot\n"),
                          "job.yaml");
  ASSERT_TRUE(s) << s.error().message;
  worker::dataset data;
  data.rows = 1;
  data.features = 13;
  data.classes = 2;
  data.fields = 4;
  auto net = worker::network::for_data(s->model, data);
  ASSERT_TRUE(net) << net.error().message;
  EXPECT_EQ(net->interaction(), worker::interaction::dot);
  EXPECT_EQ(net->pair_inputs(), 6u);
  EXPECT_EQ(net->inputs(), 13 + 4 * 4 + 6);
  const std::string yaml = worker::model_yaml(*net);
  EXPECT_EQ(yaml,
            "{type: layers, input_shape: [1, 1, 35], embeddings: [{fields: [0], rows: 1000, "
            "dim: 4, pooling: sum, init_scale: 0.01, per_field: false}, {fields: [1], rows: "
            "1000, dim: 4, pooling: sum, init_scale: 0.01, per_field: false}, {fields: [2], "
            "rows: 1000, dim: 4, pooling: sum, init_scale: 0.01, per_field: false}, {fields: "
            "[3], rows: 1000, dim: 4, pooling: sum, init_scale: 0.01, per_field: false}], "
            "interaction: dot, layers: [{type: dense, units: 16}, {type: relu}, {type: dense, "
            "units: 2}]}");
  worker::safetensors_file file;
  file.metadata = {{"coach.model", yaml},
                   {"coach.classes", "2"},
                   {"coach.features", "13"},
                   {"coach.fields", "4"}};
  auto net2 = network_of_model_file(file, "m.safetensors");
  ASSERT_TRUE(net2) << net2.error().message;
  EXPECT_EQ(net2->tables(), net->tables());
  EXPECT_EQ(net2->interaction(), worker::interaction::dot);
  EXPECT_EQ(net2->inputs(), net->inputs());
  EXPECT_EQ(net2->num_params(), net->num_params());
  EXPECT_EQ(worker::model_yaml(*net2), yaml);
  file.metadata.erase("coach.fields");
  EXPECT_EQ(network_of_model_file(file, "m.safetensors").error().message,
            "m.safetensors: no 'coach.fields' in the file's metadata: not a model saved by coach "
            "train --save");
  // Without interaction the text says nothing of it, as before.
  s->model.interaction = worker::interaction::none;
  EXPECT_EQ(
      worker::model_yaml(worker::network::for_data(s->model, data).value()).find("interaction"),
      std::string::npos);
}

}  // namespace
}  // namespace coach::scheduler

namespace coach::scheduler {
namespace {

// examples/ctr.yaml, the example docs/sparse.md runs, says what its comments say.
TEST(embeddings_spec, the_ctr_example_parses_as_documented) {
  auto s = load_job_spec(std::string(COACH_SOURCE_DIR) + "/examples/ctr.yaml");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->dataset.format, worker::dataset_format::ctr);
  EXPECT_EQ(s->dataset.min_count, 2000u);
  ASSERT_EQ(s->model.embeddings.size(), 1u);
  EXPECT_EQ(s->model.embeddings[0].dim, 8u);
  EXPECT_EQ(s->model.interaction, worker::interaction::dot);
  EXPECT_EQ(s->sparse_optimizer.kind, sparse::row_optimizer_kind::adagrad);
  EXPECT_EQ(s->slice_size, sparse_slice_size) << "rows ride with keys: small slices";
  EXPECT_EQ(s->consistency.kind, consistency_kind::bsp);
}

}  // namespace
}  // namespace coach::scheduler
