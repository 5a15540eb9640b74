// scheduler::job_spec as a document: the documented examples parse to the values they say,
// defaults apply, every bad spec gets one line `SOURCE:LINE: field 'path' ...` with the right code
// (unknown fields, wrong types, values out of range, missing fields, malformed YAML), and a spec
// loads from a file named in its errors.

#include "spec/job_spec.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "tests/helpers/job_spec_text.hpp"

namespace coach::scheduler {
namespace {

using namespace spec_testing;

namespace fs = std::filesystem;

TEST(job_spec, full_example_parses) {
  auto r = parse_job_spec(full_example, "fashion.yaml");
  ASSERT_TRUE(r) << r.error().to_string();
  const job_spec& s = *r;
  EXPECT_EQ(s.name, "fashion-mlp");
  EXPECT_EQ(s.dataset.format, worker::dataset_format::idx);
  EXPECT_EQ(s.dataset.path, "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(s.dataset.train_limit, 0u);
  EXPECT_EQ(s.dataset.test_limit, 0u);
  EXPECT_EQ(s.model.type, "mlp");
  EXPECT_EQ(s.model.hidden, (std::vector<int>{256, 128}));
  EXPECT_EQ(s.model.act, worker::activation::relu);
  EXPECT_EQ(s.optimizer.kind, ps::optimizer_kind::momentum);
  EXPECT_FLOAT_EQ(s.optimizer.sgd.learning_rate, 0.05f);
  EXPECT_FLOAT_EQ(s.optimizer.sgd.momentum, 0.9f);
  EXPECT_FLOAT_EQ(s.optimizer.sgd.weight_decay, 0.0f);
  EXPECT_EQ(s.optimizer.state_per_param(), 1u);
  EXPECT_EQ(s.batch_size, 64);
  EXPECT_EQ(s.epochs, 5);
  EXPECT_EQ(s.consistency.kind, consistency_kind::bsp);
  EXPECT_EQ(to_string(s.consistency), "bsp");
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.workers.min, 1);
  EXPECT_EQ(s.workers.max, 4);
  EXPECT_EQ(s.workers.initial, 2);
  EXPECT_EQ(s.shards.min, 2);
  EXPECT_EQ(s.shards.max, 2);
  EXPECT_EQ(s.shards.initial, 2);
  EXPECT_EQ(s.gpus_per_worker, 0);
  EXPECT_EQ(s.backend, kernels::backend_kind::auto_select);
  EXPECT_EQ(s.slice_size, 16384u);
  ASSERT_TRUE(s.function.has_value());
  EXPECT_DOUBLE_EQ(s.function->deadline_s, 30.0);
  EXPECT_EQ(s.function->memory_mb, 512u);
}

TEST(job_spec, block_style_csv_and_adam) {
  constexpr std::string_view text = R"(
# digits, held out 25%
name: digits.adam_1
dataset:
  format: csv
  path: /tmp/digits.csv.gz
  test_fraction: 0.25
  train_limit: 1000
  test_limit: 100
model:
  type: mlp
  hidden:
    - 64
    - 32
    - 16
optimizer:
  type: adam
  learning_rate: 1e-3
  beta1: 0.8
  beta2: 0.99
  epsilon: 1.0e-7
  weight_decay: 0.0001
batch_size: 128
epochs: 3
seed: 18446744073709551615
backend: cpu
gpus_per_worker: 1
slice_size: 1
)";
  auto r = parse_job_spec(text, "digits.yaml");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->name, "digits.adam_1");
  EXPECT_EQ(r->dataset.format, worker::dataset_format::csv);
  EXPECT_DOUBLE_EQ(r->dataset.test_fraction, 0.25);
  EXPECT_EQ(r->dataset.train_limit, 1000u);
  EXPECT_EQ(r->dataset.test_limit, 100u);
  EXPECT_EQ(r->model.hidden, (std::vector<int>{64, 32, 16}));
  EXPECT_EQ(r->optimizer.kind, ps::optimizer_kind::adam);
  EXPECT_EQ(r->optimizer.state_per_param(), 2u);
  EXPECT_FLOAT_EQ(r->optimizer.adam.learning_rate, 1e-3f);
  EXPECT_FLOAT_EQ(r->optimizer.adam.beta1, 0.8f);
  EXPECT_FLOAT_EQ(r->optimizer.adam.beta2, 0.99f);
  EXPECT_FLOAT_EQ(r->optimizer.adam.epsilon, 1e-7f);
  EXPECT_FLOAT_EQ(r->optimizer.adam.weight_decay, 1e-4f);
  EXPECT_EQ(r->seed, 18446744073709551615u);
  EXPECT_EQ(r->backend, kernels::backend_kind::cpu);
  EXPECT_EQ(r->gpus_per_worker, 1);
  EXPECT_EQ(r->slice_size, 1u);
  EXPECT_FALSE(r->function.has_value());
}

TEST(job_spec, defaults) {
  auto r = parse_job_spec(minimal, "tiny.yaml");
  ASSERT_TRUE(r) << r.error().to_string();
  const job_spec& s = *r;
  EXPECT_EQ(s.name, "tiny");
  EXPECT_EQ(s.dataset.format, worker::dataset_format::idx);
  EXPECT_EQ(s.dataset.path, "/data/mnist");
  EXPECT_DOUBLE_EQ(s.dataset.test_fraction, 0.2);
  EXPECT_EQ(s.dataset.train_limit, 0u);
  EXPECT_EQ(s.model.type, "mlp");
  EXPECT_EQ(s.model.hidden, (std::vector<int>{128}));
  EXPECT_EQ(s.optimizer.kind, ps::optimizer_kind::sgd);
  EXPECT_FLOAT_EQ(s.optimizer.sgd.learning_rate, 0.01f);
  EXPECT_FLOAT_EQ(s.optimizer.sgd.momentum, 0.0f);
  EXPECT_EQ(s.optimizer.state_per_param(), 0u);
  EXPECT_EQ(s.batch_size, 32);
  EXPECT_EQ(s.epochs, 2);
  EXPECT_EQ(s.consistency.kind, consistency_kind::bsp);
  EXPECT_EQ(s.seed, 1u);
  EXPECT_EQ(s.workers.min, 1);
  EXPECT_EQ(s.workers.max, 1);
  EXPECT_EQ(s.workers.initial, 1);
  EXPECT_EQ(s.shards.initial, 1);
  EXPECT_EQ(s.gpus_per_worker, 0);
  EXPECT_EQ(s.backend, kernels::backend_kind::auto_select);
  EXPECT_EQ(s.slice_size, 16384u);
  EXPECT_FALSE(s.function.has_value());

  // Momentum defaults to 0.9 for type momentum; adam has its own learning rate.
  auto m = parse_job_spec(with("  type", "  type: momentum"), "m.yaml");
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_FLOAT_EQ(m->optimizer.sgd.momentum, 0.9f);
  auto a = parse_job_spec(with("  type", "  type: adam"), "a.yaml");
  ASSERT_TRUE(a) << a.error().to_string();
  EXPECT_FLOAT_EQ(a->optimizer.adam.learning_rate, 0.001f);
  // An empty hidden list is softmax regression; an empty function map means no limits.
  auto h = parse_job_spec(with("model", "model: {hidden: []}\nfunction: {}"), "h.yaml");
  ASSERT_TRUE(h) << h.error().to_string();
  EXPECT_TRUE(h->model.hidden.empty());
  ASSERT_TRUE(h->function.has_value());
  EXPECT_EQ(h->function->deadline_s, 0.0);
  EXPECT_EQ(h->function->memory_mb, 0u);
  EXPECT_EQ(h->function->chunks_per_invocation, 8u);
  auto c = parse_job_spec(with("function", "function: {chunks_per_invocation: 3}"), "c.yaml");
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->function->chunks_per_invocation, 3u);
}

TEST(job_spec, unknown_fields_suggest_the_close_one) {
  error e = parse_error_of(with("model", "model: {hiden: [10]}"));
  EXPECT_EQ(e.code, errc::invalid_argument);
  EXPECT_EQ(e.message, "job.yaml:4: unknown field 'model.hiden' (did you mean 'model.hidden'?)");

  e = parse_error_of(with("epochs", "epoch: 2"));
  EXPECT_EQ(e.code, errc::invalid_argument);
  EXPECT_EQ(e.message, "job.yaml:8: unknown field 'epoch' (did you mean 'epochs'?)");

  e = parse_error_of(with("  type", "  type: sgd\n  learnig_rate: 0.1"));
  EXPECT_EQ(e.message,
            "job.yaml:7: unknown field 'optimizer.learnig_rate' (did you mean "
            "'optimizer.learning_rate'?)");

  e = parse_error_of(with("shards", "shards: {min: 1, maximum: 3}"));
  EXPECT_EQ(e.message, "job.yaml:9: unknown field 'shards.maximum'");

  e = parse_error_of(with("colour", "colour: blue"));
  EXPECT_EQ(e.message, "job.yaml:9: unknown field 'colour'");

  e = parse_error_of(with("batch_size", "batch_size: 32\nbatch_size: 64"));
  EXPECT_EQ(e.code, errc::invalid_argument);
  EXPECT_EQ(e.message, "job.yaml:8: field 'batch_size' appears twice (first on line 7)");
}

TEST(job_spec, wrong_types) {
  struct bad_case {
    std::string_view key, replacement, message;
  };
  for (const bad_case& c : {
           bad_case{"batch_size", "batch_size: abc",
                    "job.yaml:7: field 'batch_size' must be an integer, got 'abc'"},
           bad_case{"batch_size", "batch_size: 3.5",
                    "job.yaml:7: field 'batch_size' must be an integer, got '3.5'"},
           bad_case{"batch_size", "batch_size:",
                    "job.yaml:7: field 'batch_size' must be an integer, got nothing"},
           bad_case{"epochs", "epochs: [1]",
                    "job.yaml:8: field 'epochs' must be an integer, got a list"},
           bad_case{"name", "name: {a: 1}", "job.yaml:1: field 'name' must be a string, got a map"},
           bad_case{"model", "model: {hidden: 128}",
                    "job.yaml:4: field 'model.hidden' must be a list of layer widths, got '128'"},
           bad_case{"model", "model: {hidden: [64, x]}",
                    "job.yaml:4: field 'model.hidden[1]' must be an integer, got 'x'"},
           bad_case{"  type", "  type: sgd\n  learning_rate: fast",
                    "job.yaml:7: field 'optimizer.learning_rate' must be a number, got 'fast'"},
           bad_case{"seed", "seed: -5",
                    "job.yaml:9: field 'seed' must be a non-negative integer, got '-5'"},
           bad_case{"workers", "workers: many",
                    "job.yaml:9: field 'workers' must be an integer, got 'many'"},
           bad_case{"workers", "workers: [1, 2]",
                    "job.yaml:9: field 'workers' must be an integer or a map {min, max, "
                    "initial}, got a list"},
           bad_case{"function", "function: 30",
                    "job.yaml:9: field 'function' must be a map, got '30'"},
           bad_case{"batch_size", "batch_size: 99999999999999999999",
                    "job.yaml:7: field 'batch_size' is out of range, got "
                    "'99999999999999999999'"},
       }) {
    SCOPED_TRACE(c.replacement);
    const error e = parse_error_of(with(c.key, c.replacement));
    EXPECT_EQ(e.code, errc::invalid_argument);
    EXPECT_EQ(e.message, c.message);
  }
  const error e = parse_error_of(
      "name: x\ndataset: /data\nmodel: {}\noptimizer: {type: sgd}\nbatch_size: 1\nepochs: 1\n");
  EXPECT_EQ(e.code, errc::invalid_argument);
  EXPECT_EQ(e.message, "job.yaml:2: field 'dataset' must be a map, got '/data'");
}

TEST(job_spec, out_of_range) {
  struct bad_case {
    std::string_view key, replacement, field, message;
  };
  for (const bad_case& c : {
           bad_case{"batch_size", "batch_size: 0", "job.yaml:7: field 'batch_size'",
                    "must be in [1, 1048576], got 0"},
           bad_case{"epochs", "epochs: 0", "job.yaml:8: field 'epochs'", "must be >= 1, got 0"},
           bad_case{"model", "model: {hidden: [256, 0]}", "job.yaml:4: field 'model.hidden[1]'",
                    "got 0"},
           bad_case{"  type", "  type: sgd\n  learning_rate: 0",
                    "job.yaml:7: field 'optimizer.learning_rate'", "must be > 0, got 0"},
           bad_case{"  type", "  type: sgd\n  learning_rate: -0.1",
                    "job.yaml:7: field 'optimizer.learning_rate'", "got -0.1"},
           bad_case{"  type", "  type: sgd\n  weight_decay: -1",
                    "job.yaml:7: field 'optimizer.weight_decay'", "must be >= 0"},
           bad_case{"  type", "  type: momentum\n  momentum: 1",
                    "job.yaml:7: field 'optimizer.momentum'", "must be in [0, 1), got 1"},
           bad_case{"  type", "  type: momentum\n  momentum: -0.5",
                    "job.yaml:7: field 'optimizer.momentum'", "must be in [0, 1)"},
           bad_case{"  type", "  type: adam\n  beta1: 1.0", "job.yaml:7: field 'optimizer.beta1'",
                    "must be in [0, 1)"},
           bad_case{"  type", "  type: adam\n  beta2: 2", "job.yaml:7: field 'optimizer.beta2'",
                    "must be in [0, 1)"},
           bad_case{"  type", "  type: adam\n  epsilon: 0", "job.yaml:7: field 'optimizer.epsilon'",
                    "must be > 0"},
           bad_case{"  type", "  type: sgd\n  momentum: 0.9",
                    "job.yaml:7: field 'optimizer.momentum'", "applies only to type momentum"},
           bad_case{"  type", "  type: momentum\n  beta1: 0.9",
                    "job.yaml:7: field 'optimizer.beta1'", "applies only to type adam"},
           bad_case{"workers", "workers: 0", "job.yaml:9: field 'workers'", "must be >= 1, got 0"},
           bad_case{"workers", "workers: {min: 0, max: 2}", "job.yaml:9: field 'workers.min'",
                    "must be >= 1, got 0"},
           bad_case{"workers", "workers: {min: 3, initial: 2, max: 4}",
                    "job.yaml:9: field 'workers'",
                    "needs min <= initial <= max, got min 3, initial 2, max 4"},
           bad_case{"shards", "shards: {min: 1, initial: 5, max: 4}", "job.yaml:9: field 'shards'",
                    "needs min <= initial <= max, got min 1, initial 5, max 4"},
           bad_case{"slice_size", "slice_size: 0", "job.yaml:9: field 'slice_size'",
                    "must be >= 1, got 0"},
           bad_case{"gpus_per_worker", "gpus_per_worker: -1", "job.yaml:9: field 'gpus_per_worker'",
                    "must be >= 0, got -1"},
           bad_case{"  path", "  path: /d.csv\n  format: csv\n  test_fraction: 1",
                    "job.yaml:5: field 'dataset.test_fraction'", "must be in (0, 1), got 1"},
           bad_case{"  path", "  path: /d.csv\n  format: csv\n  test_fraction: 0",
                    "job.yaml:5: field 'dataset.test_fraction'", "must be in (0, 1), got 0"},
           bad_case{"  path", "  path: /d\n  test_fraction: 0.3",
                    "job.yaml:4: field 'dataset.test_fraction'", "applies only to format csv"},
           bad_case{"  path", "  path: ''", "job.yaml:3: field 'dataset.path'",
                    "must not be empty"},
           bad_case{"  path", "  path: /d\n  train_limit: -3",
                    "job.yaml:4: field 'dataset.train_limit'", "must be a non-negative integer"},
           bad_case{"function", "function: {deadline_s: -1}",
                    "job.yaml:9: field 'function.deadline_s'", "must be >= 0, got -1"},
           bad_case{"function", "function: {chunks_per_invocation: 0}",
                    "job.yaml:9: field 'function.chunks_per_invocation'", "got 0"},
           bad_case{"name", "name: my job", "job.yaml:1: field 'name'",
                    "letters, digits, '.', '_' or '-', got 'my job'"},
           bad_case{"name", "name: ''", "job.yaml:1: field 'name'", "got ''"},
       }) {
    SCOPED_TRACE(c.replacement);
    const error e = parse_error_of(with(c.key, c.replacement));
    EXPECT_EQ(e.code, errc::invalid_argument);
    EXPECT_EQ(e.message.rfind(std::string(c.field) + " ", 0), 0u) << e.message;
    EXPECT_TRUE(has(e.message, c.message));
  }
}

TEST(job_spec, unknown_enum_values_list_the_allowed_ones) {
  struct bad_case {
    std::string_view key, replacement, message;
  };
  for (const bad_case& c : {
           bad_case{"  type", "  type: rmsprop",
                    "job.yaml:6: field 'optimizer.type' must be one of sgd, momentum, adam, "
                    "adamw, got 'rmsprop'"},
           bad_case{"backend", "backend: tpu",
                    "job.yaml:9: field 'backend' must be one of auto, cpu, cuda, got 'tpu'"},
           bad_case{"  path", "  path: /d\n  format: parquet",
                    "job.yaml:4: field 'dataset.format' must be one of idx, csv, npy, ctr, got "
                    "'parquet'"},
           bad_case{"model", "model: {type: cnn}",
                    "job.yaml:4: field 'model.type' must be one of mlp, layers, script, got 'cnn'"},
           bad_case{"model", "model: {activation: tanh}",
                    "job.yaml:4: field 'model.activation' must be one of relu, got 'tanh'"},
           bad_case{"host_reduce", "host_reduce: yes-please",
                    "job.yaml:9: field 'host_reduce' must be one of true, false, got "
                    "'yes-please'"},
       }) {
    SCOPED_TRACE(c.replacement);
    const error e = parse_error_of(with(c.key, c.replacement));
    EXPECT_EQ(e.code, errc::invalid_argument);
    EXPECT_EQ(e.message, c.message);
  }
}

TEST(job_spec, required_fields) {
  struct missing_case {
    std::string_view key, replacement, message;
  };
  for (const missing_case& c : {
           missing_case{"name", "", "job.yaml:2: field 'name' is required"},
           missing_case{"epochs", "", "job.yaml:1: field 'epochs' is required"},
           missing_case{"batch_size", "", "job.yaml:1: field 'batch_size' is required"},
           missing_case{"model", "", "job.yaml:1: field 'model' is required"},
           missing_case{"  type", "  learning_rate: 0.1",
                        "job.yaml:5: field 'optimizer.type' is required"},
           missing_case{"  path", "  format: idx", "job.yaml:2: field 'dataset.path' is required"},
       }) {
    SCOPED_TRACE(c.key);
    const error e = parse_error_of(with(c.key, c.replacement));
    EXPECT_EQ(e.code, errc::invalid_argument);
    EXPECT_EQ(e.message, c.message);
  }
  // Without dataset (and its path line) the optimizer block follows name.
  const error e = parse_error_of(
      "name: x\nmodel: {}\noptimizer: {type: sgd}\nbatch_size: 1\n"
      "epochs: 1\n");
  EXPECT_EQ(e.message, "job.yaml:1: field 'dataset' is required");
}

TEST(job_spec, a_tab_in_the_indentation_is_named_with_its_line_and_column) {
  // yaml-cpp says "illegal map value" here (issue 41): the tab is named instead.
  error e = parse_error_of("name: x\ndataset:\n\tpath: /data\nepochs: 1\n");
  EXPECT_EQ(e.code, errc::parse_error);
  EXPECT_EQ(e.message, "job.yaml:3:1: a tab indents this line: YAML indents with spaces");
  // After spaces, and with yaml-cpp's "illegal tab when looking for indentation".
  e = parse_error_of("name: x\ndataset:\n  path: /data\n  \ttest_fraction: 0.2\n");
  EXPECT_EQ(e.message, "job.yaml:4:3: a tab indents this line: YAML indents with spaces");
  e = parse_error_of("name: t\n\tepochs: 1\n");
  EXPECT_EQ(e.message, "job.yaml:2:1: a tab indents this line: YAML indents with spaces");
  // A line of blanks is indented too (yaml-cpp refuses the tab there as well).
  e = parse_error_of("name: x\n\t\nepochs: 1\n");
  EXPECT_EQ(e.message, "job.yaml:2:1: a tab indents this line: YAML indents with spaces");
  // A tab inside a value is no fault of indentation.
  e = parse_error_of("name: x\nmodel: {hidden: [1,\t2}\nepochs: 1\n");
  EXPECT_TRUE(has(e.message, "job.yaml:2: malformed YAML")) << e.message;
  // A saved model's section is read by the same rule.
  auto m = parse_model_yaml("type: mlp\nhidden:\n\t- 4\n", "m.safetensors");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().message,
            "m.safetensors:3:1: a tab indents this line: YAML indents with spaces");
}

TEST(job_spec, malformed_yaml_and_document_shape) {
  error e = parse_error_of("name: x\nmodel: {hidden: [1, 2}\nepochs: 1\n");
  EXPECT_EQ(e.code, errc::parse_error);
  EXPECT_TRUE(has(e.message, "job.yaml:2: malformed YAML")) << e.message;

  e = parse_error_of("name: x\n  epochs: 1\n");
  EXPECT_EQ(e.code, errc::parse_error);
  EXPECT_TRUE(has(e.message, "job.yaml:2: malformed YAML")) << e.message;

  e = parse_error_of(",\n");
  EXPECT_EQ(e.code, errc::parse_error);
  EXPECT_EQ(e.message, "job.yaml:1: malformed YAML: unexpected ','");

  e = parse_error_of("name: *anchor\n");
  EXPECT_EQ(e.code, errc::parse_error);
  EXPECT_TRUE(has(e.message, "job.yaml:1: malformed YAML")) << e.message;

  for (std::string_view empty : {"", "# nothing here\n", "\n\n   \n", "---\n...\n"}) {
    SCOPED_TRACE(empty);
    e = parse_error_of(empty);
    EXPECT_EQ(e.code, errc::invalid_argument);
    EXPECT_TRUE(has(e.message, "job.yaml:"));
    EXPECT_TRUE(has(e.message, "the document is empty"));
  }
  e = parse_error_of("- name: x\n- epochs: 2\n");
  EXPECT_EQ(e.code, errc::invalid_argument);
  EXPECT_EQ(e.message, "job.yaml:1: the top level must be a map of fields, got a list");
  e = parse_error_of("just words\n");
  EXPECT_EQ(e.code, errc::invalid_argument);
  EXPECT_EQ(e.message, "job.yaml:1: the top level must be a map of fields, got 'just words'");
  e = parse_error_of(std::string(minimal) + "---\nname: second\n");
  EXPECT_EQ(e.code, errc::invalid_argument);
  EXPECT_TRUE(has(e.message, "job.yaml:9: holds several YAML documents"));
  e = parse_error_of("? [a, b]\n: 1\n");
  EXPECT_EQ(e.code, errc::invalid_argument);
  EXPECT_TRUE(has(e.message, "job.yaml:1: field names"));
}

TEST(job_spec, hostile_input_never_throws) {
  const std::string deep_list(10000, '[');
  const std::string deep_map = [] {
    std::string s;
    for (int i = 0; i < 3000; ++i) s += "{a: ";
    return s;
  }();
  std::string binary;
  for (int i = 0; i < 512; ++i) binary.push_back(char(i * 37));
  const std::string laughs =
      "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
      "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nmodel: {hidden: [*c, *c]}\n";
  for (const std::string& text :
       {deep_list, deep_map, binary, laughs, std::string("\0\0", 2),
        std::string("name: \"\\x00\\xff\"\n"), std::string("{{{}}}"),
        std::string("%TAG ! !\n---\n"),
        // yaml-cpp 0.7's LoadAll loops forever allocating on these.
        std::string(","), std::string(",a: 1\n"), std::string("a: 1\n---\n,"), std::string("[:"),
        std::string("{: "), std::string("{# ke\ny{:"),
        // yaml-cpp's message quotes the bad escape character.
        std::string("name: \"\\\x01\"\n")}) {
    auto r = parse_job_spec(text, "fuzz");
    ASSERT_FALSE(r);
    EXPECT_TRUE(has(r.error().message, "fuzz")) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
  }
}

class job_spec_file : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("coach_job_spec_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(job_spec_file, loads_and_names_the_file) {
  const std::string path = (dir_ / "job.yaml").string();
  { std::ofstream(path) << full_example; }
  auto r = load_job_spec(path);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->name, "fashion-mlp");

  { std::ofstream(path) << "name: x\nbatch_size: zero\n"; }
  auto bad = load_job_spec(path);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message.rfind(path + ":", 0), 0u) << bad.error().message;

  const std::string missing = (dir_ / "none.yaml").string();
  auto m = load_job_spec(missing);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code, errc::not_found);
  EXPECT_TRUE(has(m.error().message, missing));

  auto d = load_job_spec(dir_.string());
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, errc::io_error);
  EXPECT_TRUE(has(d.error().message, dir_.string()));
}

}  // namespace
}  // namespace coach::scheduler
