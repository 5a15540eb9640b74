// The job spec's fields for how a job runs: workers and shards (their forms, the schedule of
// changes, the limit the data sets), consistency, placement, replicas, host_reduce and the batch;
// each parses to its values and a bad one gets its one-line error.

#include "spec/job_spec.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "tests/helpers/job_spec_text.hpp"

namespace coach::scheduler {
namespace {

using namespace spec_testing;

/// 'text', as messages quote values.
std::string quoted(std::string_view text) {
  std::string q = "'";
  q.append(text);
  q.push_back('\'');
  return q;
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
