// scheduler::job_spec: the documented examples parse to the values they say, defaults apply, and
// every bad spec gets one line `SOURCE:LINE: field 'path' ...` with the right code.

#include "spec/job_spec.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace coach::scheduler {
namespace {

namespace fs = std::filesystem;

::testing::AssertionResult has(const std::string& text, std::string_view part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

/// 'text', as messages quote values.
std::string quoted(std::string_view text) {
  std::string q = "'";
  q.append(text);
  q.push_back('\'');
  return q;
}

/// The full example of job_spec.hpp.
constexpr std::string_view full_example = R"(name: fashion-mlp
dataset: {format: idx, path: /usr/share/datasets/fashion-mnist, train_limit: 0, test_limit: 0}
model: {type: mlp, hidden: [256, 128], activation: relu}
optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.9, weight_decay: 0}
batch_size: 64
epochs: 5
consistency: bsp        # bsp | ssp:S | asp | averaging:K
seed: 42
workers: {min: 1, max: 4, initial: 2}   # or a plain integer N meaning min=max=initial=N
shards: 2                                # same forms
gpus_per_worker: 0
backend: auto          # auto | cpu | cuda
slice_size: 16384
function: {deadline_s: 30, memory_mb: 512}   # optional
)";

/// The smallest valid spec: only the required fields.
constexpr std::string_view minimal = R"(name: tiny
dataset:
  path: /data/mnist
model: {}
optimizer:
  type: sgd
batch_size: 32
epochs: 2
)";

/// Parses `text`, expecting an error; returns it.
error parse_error_of(std::string_view text) {
  auto r = parse_job_spec(text, "job.yaml");
  EXPECT_FALSE(r) << "parsed although it should not:\n" << text;
  if (r) return {};
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << "not one line";
  return r.error();
}

/// `minimal` with the line that starts with `key:` replaced by `replacement` (appended when no
/// line matches). Line numbers of minimal: name 1, dataset 2, path 3, model 4, optimizer 5,
/// type 6, batch_size 7, epochs 8.
std::string with(std::string_view key, std::string_view replacement) {
  std::string out;
  bool replaced = false;
  std::size_t pos = 0;
  const std::string text(minimal);
  while (pos < text.size()) {
    const std::size_t eol = text.find('\n', pos);
    const std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!replaced && line.rfind(std::string(key) + ":", 0) == 0) {
      out += std::string(replacement) + "\n";
      replaced = true;
    } else {
      out += line + "\n";
    }
  }
  if (!replaced) out += std::string(replacement) + "\n";
  return out;
}

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

TEST(job_spec, count_shorthand_and_partial_maps) {
  auto r = parse_job_spec(with("workers", "workers: 3"), "w.yaml");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->workers.min, 3);
  EXPECT_EQ(r->workers.max, 3);
  EXPECT_EQ(r->workers.initial, 3);

  r = parse_job_spec(with("workers", "workers: {max: 4}\nshards: {min: 2}"), "w.yaml");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->workers.min, 1);
  EXPECT_EQ(r->workers.initial, 1);
  EXPECT_EQ(r->workers.max, 4);
  EXPECT_EQ(r->shards.min, 2);
  EXPECT_EQ(r->shards.initial, 2);
  EXPECT_EQ(r->shards.max, 2);

  r = parse_job_spec(with("workers", "workers: {initial: 3}"), "w.yaml");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->workers.min, 1);
  EXPECT_EQ(r->workers.initial, 3);
  EXPECT_EQ(r->workers.max, 3);
}

TEST(job_spec, relative_dataset_path_is_made_absolute_against_the_working_directory) {
  auto r = parse_job_spec(with("  path", "  path: data/digits.csv.gz"), "rel.yaml");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(fs::path(r->dataset.path), (fs::current_path() / "data/digits.csv.gz"));
  r = parse_job_spec(with("  path", "  path: ./a/../b"), "rel.yaml");
  ASSERT_TRUE(r);
  EXPECT_EQ(fs::path(r->dataset.path), (fs::current_path() / "b"));
}

TEST(job_spec, consistency_forms) {
  struct form {
    std::string_view text;
    consistency_kind kind;
    int staleness, local_steps;
  };
  for (const form& f :
       {form{"ssp:3", consistency_kind::ssp, 3, 0}, form{"ssp:0", consistency_kind::ssp, 0, 0}}) {
    SCOPED_TRACE(f.text);
    auto r = parse_job_spec(with("consistency", "consistency: " + std::string(f.text)), "job.yaml");
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->consistency.kind, f.kind);
    EXPECT_EQ(r->consistency.staleness, f.staleness);
    EXPECT_EQ(shard_optimizer(*r).kind, r->optimizer.kind);  // the shards run the optimizer
  }
  auto asp = parse_job_spec(with("consistency", "consistency: asp"), "job.yaml");
  ASSERT_TRUE(asp) << asp.error().to_string();
  EXPECT_EQ(asp->consistency.kind, consistency_kind::asp);
  auto b = parse_job_spec(with("consistency", "consistency: bsp"), "job.yaml");
  ASSERT_TRUE(b) << b.error().to_string();
  EXPECT_EQ(b->consistency.kind, consistency_kind::bsp);
  EXPECT_EQ(shard_optimizer(*b).kind, b->optimizer.kind);
  EXPECT_EQ(shard_optimizer(*b).sgd.learning_rate, b->optimizer.sgd.learning_rate);
  // averaging:K: the workers run the spec's optimizer, the shards average (SGD with rate 1).
  auto a = parse_job_spec(with("consistency", "consistency: averaging:4"), "job.yaml");
  ASSERT_TRUE(a) << a.error().to_string();
  EXPECT_EQ(a->consistency.kind, consistency_kind::averaging);
  EXPECT_EQ(a->consistency.local_steps, 4);
  EXPECT_EQ(a->optimizer.kind, ps::optimizer_kind::sgd);
  EXPECT_EQ(a->optimizer.sgd.learning_rate, 0.01f);
  const auto avg = shard_optimizer(*a);
  EXPECT_EQ(avg.kind, ps::optimizer_kind::sgd);
  EXPECT_EQ(avg.sgd.learning_rate, 1.0f);
  EXPECT_EQ(avg.sgd.momentum, 0.0f);
  EXPECT_EQ(avg.sgd.weight_decay, 0.0f);
  EXPECT_EQ(avg.state_per_param(), 0u);
  std::string text = with("consistency", "consistency: averaging:2");
  text.replace(text.find("type: sgd"), 9, "type: adam");
  const error adam = parse_error_of(text);
  EXPECT_EQ(adam.code, errc::invalid_argument);
  EXPECT_EQ(adam.message,
            "job.yaml:9: field 'consistency': averaging trains each worker with sgd or momentum "
            "from the pulled parameters; optimizer adam is not supported with it");
  EXPECT_EQ(to_string(consistency_config{consistency_kind::ssp, 3, 0}), "ssp:3");
  EXPECT_EQ(to_string(consistency_config{consistency_kind::averaging, 0, 4}), "averaging:4");

  for (std::string_view bad :
       {"ssp:x", "ssp", "ssp:-1", "averaging:0", "averaging", "foo", "BSP", "bsp:2"}) {
    SCOPED_TRACE(bad);
    const error e = parse_error_of(with("consistency", "consistency: " + std::string(bad)));
    EXPECT_EQ(e.code, errc::invalid_argument);
    EXPECT_TRUE(has(e.message, "job.yaml:9: field 'consistency'"));
    EXPECT_TRUE(has(e.message, quoted(bad)));
  }
  const error list = parse_error_of(with("consistency", "consistency: [bsp]"));
  EXPECT_TRUE(has(list.message, "must be one of bsp, ssp:S, asp, averaging:K, got a list"));

  // Unsupported is reported only after every other field has passed.
  const error later =
      parse_error_of(with("consistency", "consistency: asp") + "gpus_per_worker: -1\n");
  EXPECT_EQ(later.code, errc::invalid_argument);
  EXPECT_TRUE(has(later.message, "field 'gpus_per_worker'"));
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

TEST(job_spec, placement_names_one_of_the_four_or_is_left_to_the_scheduler) {
  auto none = parse_job_spec(full_example, "job.yaml");
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_EQ(none->placement, "");
  for (std::string name : {"spread", "best-fit", "random", "dltap"}) {
    auto spec = parse_job_spec(std::string(full_example) + "placement: " + name + "\n", "job.yaml");
    ASSERT_TRUE(spec) << spec.error().message;
    EXPECT_EQ(spec->placement, name);
  }
  const error e = parse_error_of(std::string(full_example) + "placement: nearest\n");
  EXPECT_EQ(e.code, errc::invalid_argument);
  EXPECT_TRUE(has(e.message,
                  "field 'placement' must be one of spread, best-fit, random, dltap, "
                  "got 'nearest'"));
}

TEST(job_spec, replicas_are_one_unless_asked_for_and_need_bsp) {
  auto none = parse_job_spec(full_example, "job.yaml");
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_EQ(none->replicas, 1u);
  auto two = parse_job_spec(std::string(full_example) + "replicas: 2\n", "job.yaml");
  ASSERT_TRUE(two) << two.error().message;
  EXPECT_EQ(two->replicas, 2u);
  for (const auto& [value, message] : std::vector<std::pair<std::string, std::string>>{
           {"0", "field 'replicas' must be in [1, 4], got 0"},
           {"5", "field 'replicas' must be in [1, 4], got 5"},
           {"two", "field 'replicas' must be an integer"},
       }) {
    SCOPED_TRACE(value);
    const error e = parse_error_of(std::string(full_example) + "replicas: " + value + "\n");
    EXPECT_EQ(e.code, errc::invalid_argument);
    EXPECT_TRUE(has(e.message, message)) << e.message;
  }
  const error ssp = parse_error_of(with("consistency", "consistency: ssp:2") + "replicas: 2\n");
  EXPECT_TRUE(has(ssp.message,
                  "field 'replicas' must be 1 with consistency ssp:2 (backups "
                  "need bsp), got 2"))
      << ssp.message;
  auto asp_alone =
      parse_job_spec(with("consistency", "consistency: asp") + "replicas: 1\n", "job.yaml");
  EXPECT_TRUE(asp_alone) << "one copy needs nothing";
}

TEST(job_spec, host_reduce_is_off_unless_asked_for) {
  auto off = parse_job_spec(minimal, "job.yaml");
  ASSERT_TRUE(off) << off.error().to_string();
  EXPECT_FALSE(off->host_reduce);
  auto on = parse_job_spec(with("host_reduce", "host_reduce: true"), "job.yaml");
  ASSERT_TRUE(on) << on.error().to_string();
  EXPECT_TRUE(on->host_reduce);
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

TEST(optimizer_kind_names, round_trip) {
  for (auto k : {ps::optimizer_kind::sgd, ps::optimizer_kind::momentum, ps::optimizer_kind::adam}) {
    auto p = ps::parse_optimizer_kind(ps::to_string(k));
    ASSERT_TRUE(p);
    EXPECT_EQ(*p, k);
  }
  auto bad = ps::parse_optimizer_kind("rmsprop");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, errc::invalid_argument);
  EXPECT_TRUE(has(bad.error().message, "'rmsprop'"));
  ps::optimizer_config cfg;
  EXPECT_EQ(cfg.state_per_param(), 0u);
  cfg.kind = ps::optimizer_kind::momentum;
  EXPECT_EQ(cfg.state_per_param(), 1u);
  cfg.kind = ps::optimizer_kind::adam;
  EXPECT_EQ(cfg.state_per_param(), 2u);
}

}  // namespace
}  // namespace coach::scheduler

namespace coach::scheduler {
namespace {

TEST(job_spec_schedule, parses_changes_in_step_order) {
  const std::string text = std::string(minimal) +
                           "workers: {min: 1, max: 4, initial: 2}\n"
                           "shards: {min: 1, max: 3, initial: 1}\n"
                           "schedule:\n"
                           "  - {at_step: 20, workers: 3}\n"
                           "  - {at_step: 40, shards: 3}\n"
                           "  - {at_step: 60, migrate: 0}\n";
  auto s = parse_job_spec(text, "job.yaml");
  ASSERT_TRUE(s) << s.error().message;
  using k = schedule_action::kind_type;
  EXPECT_EQ(s->schedule, (std::vector<schedule_action>{
                             {20, k::workers, 3}, {40, k::shards, 3}, {60, k::migrate, 0}}));
  auto none = parse_job_spec(minimal, "job.yaml");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->schedule.empty());
}

TEST(job_spec_schedule, bad_changes_name_the_entry_and_line) {
  const std::string head = std::string(minimal) + "workers: {min: 1, max: 4}\nschedule:\n";
  // Lines: minimal is 8 lines, workers 9, schedule 10, the first entry 11.
  struct bad_case {
    const char* entries;
    const char* expected;
  } cases[] = {
      {"  - {at_step: 5, workers: 9}\n",
       "job.yaml:11: field 'schedule[0].workers' must be in [1, 4], got 9"},
      {"  - {at_step: 5}\n",
       "job.yaml:11: field 'schedule[0]' needs one change: workers, shards or migrate"},
      {"  - {workers: 2}\n", "job.yaml:11: field 'schedule[0].at_step' is required"},
      {"  - {at_step: 5, workers: 2}\n  - {at_step: 5, workers: 3}\n",
       "job.yaml:12: field 'schedule[1].at_step' must be greater than the previous change's (5), "
       "got 5"},
      {"  - {at_step: 5, workers: 2, shards: 1}\n", "is a second change in one entry"},
      {"  - {at_step: 0, workers: 2}\n",
       "field 'schedule[0].at_step' must be in [1, 1000000000000], got 0"},
      {"  - {at_step: 5, worker: 2}\n",
       "job.yaml:11: unknown field 'schedule[0].worker' (did you mean 'schedule[0].workers'?)"},
  };
  for (const auto& c : cases) {
    const error e = parse_error_of(head + c.entries);
    EXPECT_EQ(e.code, errc::invalid_argument);
    EXPECT_TRUE(has(e.message, c.expected)) << c.entries;
  }
  const error not_list = parse_error_of(std::string(minimal) + "schedule: {at_step: 1}\n");
  EXPECT_TRUE(has(not_list.message, "job.yaml:9: field 'schedule' must be a list of changes"));
}

TEST(job_spec_optimizer_extras, schedules_adamw_and_clip_norm_parse_with_their_defaults) {
  auto s = parse_job_spec(with("  type",
                               "  type: adamw\n  clip_norm: 1.5\n"
                               "  schedule: {type: step, every_epochs: 2}"),
                          "job.yaml");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->optimizer.kind, ps::optimizer_kind::adam);
  EXPECT_TRUE(s->optimizer.adam.decoupled);
  EXPECT_EQ(s->optimizer.type_name(), "adamw");
  EXPECT_FLOAT_EQ(s->optimizer.adam.weight_decay, 0.01f);  // AdamW's default
  EXPECT_FLOAT_EQ(s->optimizer.adam.learning_rate, 0.001f);
  EXPECT_FLOAT_EQ(s->optimizer.clip_norm, 1.5f);
  EXPECT_EQ(s->optimizer.schedule.kind, ps::schedule_kind::step);
  EXPECT_EQ(s->optimizer.schedule.every_epochs, 2.0);
  EXPECT_EQ(s->optimizer.schedule.gamma, 0.1);
  EXPECT_EQ(s->optimizer.schedule.warmup_epochs, 0.0);

  auto c = parse_job_spec(with("  type",
                               "  type: momentum\n  learning_rate: 0.1\n"
                               "  schedule: {type: cosine, min_lr: 0.001, "
                               "warmup_epochs: 0.5}"),
                          "job.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_FALSE(c->optimizer.adam.decoupled);
  EXPECT_EQ(c->optimizer.schedule.kind, ps::schedule_kind::cosine);
  EXPECT_EQ(c->optimizer.schedule.min_lr, 0.001);
  EXPECT_EQ(c->optimizer.schedule.warmup_epochs, 0.5);

  // A schedule map without a type is constant (with its warm-up); no schedule at all too.
  auto w = parse_job_spec(with("  type",
                               "  type: adam\n  weight_decay: 0.2\n"
                               "  schedule: {warmup_epochs: 1}"),
                          "job.yaml");
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ(w->optimizer.schedule.kind, ps::schedule_kind::constant);
  EXPECT_EQ(w->optimizer.schedule.warmup_epochs, 1.0);
  EXPECT_FLOAT_EQ(w->optimizer.adam.weight_decay, 0.2f);
  auto m = parse_job_spec(minimal, "job.yaml");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->optimizer.schedule, ps::lr_schedule{});
  EXPECT_FALSE(m->optimizer.scheduled());
  EXPECT_EQ(m->optimizer.clip_norm, 0.0f);
  EXPECT_FALSE(m->optimizer.adam.decoupled);
}

TEST(job_spec_optimizer_extras, bad_schedules_and_options_name_the_field_and_line) {
  struct bad_case {
    std::string_view replacement, message;
  };
  // The replacement takes line 6 (the optimizer's type): its second line is line 7.
  for (const bad_case& c : {
           bad_case{"  type: sgd\n  schedule: {type: linear}",
                    "job.yaml:7: field 'optimizer.schedule.type' must be one of constant, step, "
                    "cosine, got 'linear'"},
           bad_case{"  type: sgd\n  schedule: cosine",
                    "job.yaml:7: field 'optimizer.schedule' must be a map, got 'cosine'"},
           bad_case{"  type: sgd\n  schedule: {type: step}",
                    "job.yaml:7: field 'optimizer.schedule.every_epochs' is required with type "
                    "step"},
           bad_case{"  type: sgd\n  schedule: {type: step, every_epochs: 0}",
                    "job.yaml:7: field 'optimizer.schedule.every_epochs' must be > 0, got 0"},
           bad_case{"  type: sgd\n  schedule: {type: step, every_epochs: 1, gamma: 1.5}",
                    "job.yaml:7: field 'optimizer.schedule.gamma' must be in (0, 1], got 1.5"},
           bad_case{"  type: sgd\n  schedule: {type: step, every_epochs: 1, gamma: 0}",
                    "job.yaml:7: field 'optimizer.schedule.gamma' must be in (0, 1], got 0"},
           bad_case{"  type: sgd\n  schedule: {type: cosine, every_epochs: 2}",
                    "job.yaml:7: field 'optimizer.schedule.every_epochs' applies only to type "
                    "step, not cosine"},
           bad_case{"  type: sgd\n  schedule: {type: cosine, gamma: 0.5}",
                    "job.yaml:7: field 'optimizer.schedule.gamma' applies only to type step, not "
                    "cosine"},
           bad_case{"  type: sgd\n  schedule: {type: step, every_epochs: 1, min_lr: 0}",
                    "job.yaml:7: field 'optimizer.schedule.min_lr' applies only to type cosine, "
                    "not step"},
           bad_case{"  type: sgd\n  schedule: {every_epochs: 1}",
                    "job.yaml:7: field 'optimizer.schedule.every_epochs' applies only to type "
                    "step, not constant"},
           bad_case{"  type: sgd\n  schedule: {type: cosine, min_lr: 0.5}",
                    "job.yaml:7: field 'optimizer.schedule.min_lr' must be < the learning_rate "
                    "(0.01), got '0.5'"},
           bad_case{"  type: sgd\n  learning_rate: 0.1\n  schedule: {type: cosine, min_lr: 0.1}",
                    "job.yaml:8: field 'optimizer.schedule.min_lr' must be < the learning_rate "
                    "(0.1), got '0.1'"},
           bad_case{"  type: sgd\n  schedule: {type: cosine, min_lr: -0.001}",
                    "job.yaml:7: field 'optimizer.schedule.min_lr' must be >= 0, got -0.001"},
           bad_case{"  type: sgd\n  schedule: {warmup_epochs: -1}",
                    "job.yaml:7: field 'optimizer.schedule.warmup_epochs' must be >= 0, got -1"},
           bad_case{"  type: sgd\n  schedule: {type: step, every_epoch: 1}",
                    "job.yaml:7: unknown field 'optimizer.schedule.every_epoch' (did you mean "
                    "'optimizer.schedule.every_epochs'?)"},
           bad_case{"  type: sgd\n  clip_norm: 0",
                    "job.yaml:7: field 'optimizer.clip_norm' must be > 0, got 0"},
           bad_case{"  type: sgd\n  clip_norm: [1]",
                    "job.yaml:7: field 'optimizer.clip_norm' must be a number, got a list"},
           bad_case{"  type: adamw\n  momentum: 0.9",
                    "job.yaml:7: field 'optimizer.momentum' applies only to type momentum, not "
                    "adamw"},
           bad_case{"  type: sgd\n  beta2: 0.9",
                    "job.yaml:7: field 'optimizer.beta2' applies only to type adam or adamw, not "
                    "sgd"},
           bad_case{"  type: adamw\n  weight_decay: -0.01",
                    "job.yaml:7: field 'optimizer.weight_decay' must be >= 0, got -0.01"},
       }) {
    SCOPED_TRACE(c.replacement);
    const error e = parse_error_of(with("  type", c.replacement));
    EXPECT_EQ(e.code, errc::invalid_argument);
    EXPECT_TRUE(has(e.message, c.message));
  }
  // Model averaging trains on the workers at the constant rate: no schedule there.
  const error sched = parse_error_of(with("  type", "  type: sgd\n  schedule: {type: cosine}") +
                                     "consistency: averaging:2\n");
  EXPECT_TRUE(has(sched.message,
                  "job.yaml:7: field 'optimizer.schedule' is not supported with "
                  "consistency averaging:2"));
  auto constant = parse_job_spec(
      with("  type", "  type: sgd\n  schedule: {type: constant}") + "consistency: averaging:2\n",
      "job.yaml");
  EXPECT_TRUE(constant) << constant.error().message;
  // Model averaging runs the optimizer on the workers, without state across rounds: adamw
  // is refused with it as adam is.
  const error avg = parse_error_of(with("  type", "  type: adamw") + "consistency: averaging:2\n");
  EXPECT_EQ(avg.code, errc::invalid_argument);
  EXPECT_TRUE(has(avg.message, "field 'consistency': averaging"));
}

TEST(job_spec_dataset, csv_options_and_npy_parse_with_their_defaults) {
  auto d = parse_job_spec(with("  path", "  path: /d.csv\n  format: csv"), "job.yaml");
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_FALSE(d->dataset.header);
  EXPECT_EQ(d->dataset.label_column, (worker::column_ref{-1, {}}));
  EXPECT_EQ(d->dataset.delimiter, ',');
  EXPECT_EQ(d->dataset.normalize, worker::normalization::max);

  auto r = parse_job_spec(with("  path",
                               "  path: /d.csv\n  format: csv\n  header: true\n"
                               "  label_column: species\n  delimiter: ;\n"
                               "  normalize: standardize"),
                          "job.yaml");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->dataset.header);
  EXPECT_EQ(r->dataset.label_column, (worker::column_ref{-1, "species"}));
  EXPECT_EQ(r->dataset.delimiter, ';');
  EXPECT_EQ(r->dataset.normalize, worker::normalization::standardize);

  struct column_case {
    std::string_view yaml;
    worker::column_ref want;
  };
  for (const column_case& c :
       {column_case{"0", {0, {}}}, column_case{"-2", {-2, {}}}, column_case{"+3", {3, {}}},
        column_case{"'3'", {-1, "3"}}, column_case{"\"-1\"", {-1, "-1"}},
        column_case{"sepal length", {-1, "sepal length"}}}) {
    SCOPED_TRACE(c.yaml);
    auto v = parse_job_spec(with("  path",
                                 "  path: /d.csv\n  format: csv\n  header: true\n"
                                 "  label_column: " +
                                     std::string(c.yaml)),
                            "job.yaml");
    ASSERT_TRUE(v) << v.error().message;
    EXPECT_EQ(v->dataset.label_column, c.want);
  }
  for (const auto& [yaml, want] : std::vector<std::pair<std::string, char>>{
           {"\"\\t\"", '\t'}, {"'\\t'", '\t'}, {"tab", '\t'}, {"\"|\"", '|'}, {"' '", ' '}}) {
    SCOPED_TRACE(yaml);
    auto v = parse_job_spec(with("  path", "  path: /d.csv\n  format: csv\n  delimiter: " + yaml),
                            "job.yaml");
    ASSERT_TRUE(v) << v.error().message;
    EXPECT_EQ(v->dataset.delimiter, want);
  }

  auto npy = parse_job_spec(
      with("  path",
           "  path: /data/arrays\n  format: npy\n  test_fraction: 0.1\n  normalize: none"),
      "job.yaml");
  ASSERT_TRUE(npy) << npy.error().message;
  EXPECT_EQ(npy->dataset.format, worker::dataset_format::npy);
  EXPECT_EQ(npy->dataset.path, "/data/arrays");
  EXPECT_DOUBLE_EQ(npy->dataset.test_fraction, 0.1);
  EXPECT_EQ(npy->dataset.normalize, worker::normalization::none);
  auto idx = parse_job_spec(with("  path", "  path: /d\n  normalize: standardize"), "job.yaml");
  ASSERT_TRUE(idx) << idx.error().message;
  EXPECT_EQ(idx->dataset.normalize, worker::normalization::standardize);
}

TEST(job_spec_dataset, bad_csv_options_name_the_field_and_line) {
  struct bad_case {
    std::string_view replacement, message;
  };
  for (const bad_case& c : {
           bad_case{"  path: /d\n  header: true",
                    "job.yaml:4: field 'dataset.header' applies only to format csv, not idx"},
           bad_case{"  path: /d\n  format: npy\n  label_column: 0",
                    "job.yaml:5: field 'dataset.label_column' applies only to format csv, not npy"},
           bad_case{"  path: /d\n  delimiter: ;",
                    "job.yaml:4: field 'dataset.delimiter' applies only to format csv, not idx"},
           bad_case{"  path: /d.csv\n  format: csv\n  header: yes",
                    "job.yaml:5: field 'dataset.header' must be one of true, false, got 'yes'"},
           bad_case{"  path: /d.csv\n  format: csv\n  label_column: species",
                    "job.yaml:5: field 'dataset.label_column' names a column ('species'), which "
                    "needs header: true (or give its 0-based index)"},
           bad_case{"  path: /d.csv\n  format: csv\n  label_column: [1]",
                    "job.yaml:5: field 'dataset.label_column' must be a column index or a column "
                    "name, got a list"},
           bad_case{"  path: /d.csv\n  format: csv\n  label_column: 99999999",
                    "job.yaml:5: field 'dataset.label_column' must be in [-1048576, 1048576], got "
                    "99999999"},
           bad_case{"  path: /d.csv\n  format: csv\n  delimiter: ab",
                    "job.yaml:5: field 'dataset.delimiter' must be one character such as ',', "
                    "';', '|' or tab (not a letter, digit, '.', '+', '-', a quote or a control "
                    "character), got 'ab'"},
           bad_case{"  path: /d.csv\n  format: csv\n  delimiter: '.'",
                    "job.yaml:5: field 'dataset.delimiter' must be one character such as"},
           bad_case{"  path: /d.csv\n  format: csv\n  normalize: zscore",
                    "job.yaml:5: field 'dataset.normalize' must be one of none, max, "
                    "standardize, got 'zscore'"},
           bad_case{"  path: /d\n  format: npy\n  test_fraction: 1.5",
                    "job.yaml:5: field 'dataset.test_fraction' must be in (0, 1), got 1.5"},
           bad_case{
               "  path: /d\n  test_fraction: 0.3",
               "job.yaml:4: field 'dataset.test_fraction' applies only to format csv, npy or ctr "
               "(format idx has its own test files)"},
           bad_case{"  path: /d.csv\n  format: csv\n  label_colum: 1",
                    "job.yaml:5: unknown field 'dataset.label_colum' (did you mean "
                    "'dataset.label_column'?)"},
       }) {
    SCOPED_TRACE(c.replacement);
    const error e = parse_error_of(with("  path", c.replacement));
    EXPECT_EQ(e.code, errc::invalid_argument);
    EXPECT_TRUE(has(e.message, c.message)) << e.message;
  }
}

// --- checkpoint and output --------------------------------------------------------------------

TEST(job_spec_outputs, checkpoint_and_output_paths_are_absolute_and_every_s_defaults_to_0) {
  auto r = parse_job_spec(minimal, "job.yaml");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_FALSE(r->checkpoint.enabled());
  EXPECT_TRUE(r->output.empty());
  r = parse_job_spec(with("checkpoint", "checkpoint: {path: run/ck.safetensors}\noutput: m.st"),
                     "job.yaml", "/srv/jobs");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->checkpoint.path, "/srv/jobs/run/ck.safetensors");
  EXPECT_EQ(r->checkpoint.every_s, 0.0);
  EXPECT_EQ(r->output, "/srv/jobs/m.st");
  r = parse_job_spec(with("checkpoint", "checkpoint: {path: /tmp/ck.st, every_s: 90.5}"),
                     "job.yaml");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->checkpoint.path, "/tmp/ck.st");
  EXPECT_EQ(r->checkpoint.every_s, 90.5);
  EXPECT_EQ(r->checkpoint.store_every_s(), 90.5);
  // Without every_s a cluster's store takes one every 60 s; every_s alone (no file) sets that.
  r = parse_job_spec(minimal, "job.yaml");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->checkpoint.store_every_s(), 60.0);
  r = parse_job_spec(with("checkpoint", "checkpoint: {every_s: 0}"), "job.yaml");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_FALSE(r->checkpoint.enabled());
  EXPECT_EQ(r->checkpoint.store_every_s(), 0.0);
}

TEST(job_spec_outputs, bad_checkpoint_and_output_name_the_field) {
  struct bad_case {
    std::string_view replacement, message;
  };
  for (const bad_case& c : {
           bad_case{"checkpoint: {}", "field 'checkpoint.path' is required"},
           bad_case{"checkpoint: {path: ''}", "field 'checkpoint.path' must not be empty"},
           bad_case{"checkpoint: {path: a, every_s: -1}",
                    "field 'checkpoint.every_s' must be >= 0, got -1"},
           bad_case{"checkpoint: {path: a, every: 5}", "'checkpoint.every'"},
           bad_case{"checkpoint: a.st", "field 'checkpoint' must be a map"},
           bad_case{"output: ''", "field 'output' must not be empty"},
           bad_case{"output: [a, b]", "field 'output' must be a string"},
       }) {
    SCOPED_TRACE(c.replacement);
    auto r = parse_job_spec(with(std::string(c.replacement.substr(0, c.replacement.find(':'))),
                                 std::string(c.replacement)),
                            "job.yaml");
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, errc::invalid_argument);
    EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace coach::scheduler

namespace coach::scheduler {
namespace {

TEST(job_spec_batch, batch_size_fixes_the_global_batch_at_the_initial_workers_under_bsp_and_ssp) {
  auto s = parse_job_spec(
      with("batch_size", "batch_size: 32\nworkers: {min: 1, max: 4, initial: 3}"), "job.yaml");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->batch, batch_kind::global);
  EXPECT_EQ(s->batch_size, 32);
  EXPECT_EQ(s->global_batch, 96);
  s = parse_job_spec(with("batch_size", "batch_size: 32\nconsistency: ssp:2"), "job.yaml");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->global_batch, 32);
  // asp and averaging have no common step: each worker's batch, as given.
  for (const char* c : {"asp", "averaging:4"}) {
    s = parse_job_spec(with("batch_size", std::string("batch_size: 32\nconsistency: ") + c),
                       "job.yaml");
    ASSERT_TRUE(s) << s.error().to_string();
    EXPECT_EQ(s->batch, batch_kind::per_worker) << c;
    EXPECT_EQ(s->global_batch, 0) << c;
  }
}

TEST(job_spec_batch, batch_global_and_per_worker) {
  auto s = parse_job_spec(
      with("batch_size", "batch: {global: 100}\nworkers: {min: 1, max: 8, initial: 3}"),
      "job.yaml");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->batch, batch_kind::global);
  EXPECT_EQ(s->global_batch, 100);
  EXPECT_EQ(s->batch_size, 33) << "what each initial worker gets, rounded down";
  s = parse_job_spec(with("batch_size", "batch: {per_worker: 16}"), "job.yaml");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->batch, batch_kind::per_worker);
  EXPECT_EQ(s->batch_size, 16);
  EXPECT_EQ(s->global_batch, 0);
  EXPECT_EQ(s->optimizer.lr_scaling, ps::lr_scaling_kind::none);
  s = parse_job_spec(
      with("batch_size",
           "batch: {per_worker: 16, lr_scaling: sqrt}\nworkers: {min: 1, max: 4, initial: 2}"),
      "job.yaml");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->optimizer.lr_scaling, ps::lr_scaling_kind::sqrt);
  EXPECT_EQ(s->optimizer.reference_batch, 32u) << "the rate as configured at 2 workers of 16";
  EXPECT_EQ(shard_optimizer(*s).lr_scaling, ps::lr_scaling_kind::sqrt) << "the shards scale it";
  s = parse_job_spec(with("batch_size", "batch: {per_worker: 16, lr_scaling: adascale}"),
                     "job.yaml");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(shard_optimizer(*s).lr_scaling, ps::lr_scaling_kind::adascale);
  EXPECT_EQ(s->optimizer.reference_batch, 16u);
}

TEST(job_spec_batch, bad_batches_are_refused_with_the_line) {
  EXPECT_EQ(parse_error_of(with("batch_size", "batch_size: 32\nbatch: {global: 64}")).message,
            "job.yaml:8: field 'batch' give batch_size or batch, not both");
  EXPECT_EQ(parse_error_of(with("batch_size", "batch: {global: 64, per_worker: 8}")).message,
            "job.yaml:7: field 'batch' give one of global: N, per_worker: N");
  EXPECT_EQ(parse_error_of(with("batch_size", "batch: {}")).message,
            "job.yaml:7: field 'batch' give one of global: N, per_worker: N");
  EXPECT_EQ(parse_error_of(with("batch_size", "batch: {local: 64}")).message,
            "job.yaml:7: unknown field 'batch.local' (did you mean 'batch.global'?)");
  EXPECT_EQ(parse_error_of(with("batch_size", "batch: {global: 0}")).message,
            "job.yaml:7: field 'batch.global' must be in [1, 1048576], got 0");
  EXPECT_EQ(
      parse_error_of(with("batch_size", "batch: {global: 64}\nconsistency: asp")).message,
      "job.yaml:7: field 'batch' global: N needs consistency bsp or ssp (asp and averaging:K have "
      "no common step); give per_worker: N");
  EXPECT_EQ(parse_error_of(with("batch_size", "batch: {global: 64, lr_scaling: linear}")).message,
            "job.yaml:7: field 'batch.lr_scaling' applies to per_worker: N (a global batch does "
            "not change)");
  EXPECT_EQ(parse_error_of(with("batch_size", "batch: {per_worker: 8, lr_scaling: cubic}")).message,
            "job.yaml:7: field 'batch.lr_scaling' must be one of none, linear, sqrt, adascale, got "
            "'cubic'");
  EXPECT_EQ(parse_error_of(
                with("batch_size", "batch: {per_worker: 8, lr_scaling: linear}\nconsistency: asp"))
                .message,
            "job.yaml:7: field 'batch.lr_scaling' needs consistency bsp or ssp (a step of asp or "
            "averaging:K is one worker's)");
  EXPECT_EQ(parse_error_of(with("batch_size", "batch_size: 600000\nworkers: 2")).message,
            "job.yaml:7: field 'batch_size' times the initial workers (2) must be at most 1048576");
  // Neither: batch_size is missing (the message names it).
  auto none = with("batch_size", "");
  EXPECT_NE(parse_error_of(none).message.find("'batch_size' is required"), std::string::npos);
}

// Issue 37: `workers: 1000` grew memory until the kernel killed the process.
TEST(job_spec, workers_beyond_what_the_data_keeps_busy_are_refused_with_the_limit) {
  auto spec = parse_job_spec(minimal, "job.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  spec->batch = batch_kind::per_worker;
  spec->batch_size = 64;
  EXPECT_EQ(max_useful_workers(*spec, 1438), 23u);  // 22 whole batches and a partial one
  EXPECT_EQ(max_useful_workers(*spec, 1408), 22u);
  EXPECT_EQ(max_useful_workers(*spec, 10), 1u);
  EXPECT_EQ(max_useful_workers(*spec, 0), 1u);
  EXPECT_FALSE(too_many_workers(*spec, 1438, 23, "--workers"));
  auto why = too_many_workers(*spec, 1438, 1000, "--workers");
  ASSERT_TRUE(why);
  EXPECT_EQ(why->code, errc::invalid_argument);
  EXPECT_EQ(why->message,
            "--workers 1000: an epoch of 1438 rows holds 23 batches of 64: more workers would "
            "have nothing to train (at most 23)");
  // A fixed global batch: one sample a worker a step.
  spec->batch = batch_kind::global;
  spec->global_batch = 256;
  ASSERT_TRUE(spec->fixed_global_batch());
  EXPECT_EQ(max_useful_workers(*spec, 60000), 256u);
  EXPECT_EQ(max_useful_workers(*spec, 100), 100u);
  why = too_many_workers(*spec, 60000, 300, "workers.initial");
  ASSERT_TRUE(why);
  EXPECT_EQ(why->message,
            "workers.initial 300: a step of the global batch of 256 gives each of at most 256 "
            "workers a sample: more workers would have nothing to train (at most 256)");
}

}  // namespace
}  // namespace coach::scheduler
