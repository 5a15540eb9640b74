// The job spec's fields for what a job trains and writes: the optimizer (its kinds, schedules,
// adamw and clip_norm), the dataset (paths, csv options, npy) and the checkpoint and output
// files; each parses to its values and defaults, and a bad one gets its one-line error.

#include "spec/job_spec.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "tests/helpers/job_spec_text.hpp"

namespace coach::scheduler {
namespace {

using namespace spec_testing;

namespace fs = std::filesystem;

TEST(job_spec, relative_dataset_path_is_made_absolute_against_the_working_directory) {
  auto r = parse_job_spec(with("  path", "  path: data/digits.csv.gz"), "rel.yaml");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(fs::path(r->dataset.path), (fs::current_path() / "data/digits.csv.gz"));
  r = parse_job_spec(with("  path", "  path: ./a/../b"), "rel.yaml");
  ASSERT_TRUE(r);
  EXPECT_EQ(fs::path(r->dataset.path), (fs::current_path() / "b"));
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
