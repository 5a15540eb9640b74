// scheduler::job_store: what is stored comes back after the store is closed and reopened (a
// restarted scheduler): every job with its state and allocation, the histories, the epochs,
// the settings, fresh ids that do not reuse old ones, and a performance model relearned from
// the stored epochs. Bad paths and foreign files are errors, not crashes.

#include "scheduler/job_store.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <unistd.h>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace coach::scheduler {
namespace {

namespace fs = std::filesystem;

::testing::AssertionResult has(const std::string& text, std::string_view part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

/// A temporary directory, removed with everything in it at the end of the test.
class temp_dir {
 public:
  temp_dir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("coach_job_store_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

job_record sample_job(const std::string& name, const std::string& model) {
  job_record j;
  j.name = name;
  j.model = model;
  j.spec_yaml = "name: " + name + "\nepochs: 3\n";
  j.source_name = name + ".yaml";
  j.base_dir = "/home/user";
  j.submitted = 1.7e9 + 0.25;
  j.elastic = true;
  j.min_workers = 1;
  j.max_workers = 8;
  j.requested_workers = 2;
  j.min_shards = 1;
  j.max_shards = 4;
  j.requested_shards = 2;
  j.gpus_per_worker = 1;
  j.epochs_total = 3;
  j.samples_per_epoch = 60000;
  j.state_since = j.submitted;
  return j;
}

TEST(job_store, a_reopened_store_returns_every_job_it_knew) {
  temp_dir dir;
  const std::string path = dir.file("jobs.db");
  std::vector<job_record> expected;
  {
    auto store = job_store::open(path);
    ASSERT_TRUE(store) << store.error().message;
    auto a = sample_job("fashion", "mlp-256");
    auto b = sample_job("digits", "mlp-64");
    b.elastic = false;
    auto c = sample_job("cancelled-one", "mlp-64");
    for (auto* j : {&a, &b, &c}) {
      auto id = store->add_job(*j);
      ASSERT_TRUE(id) << id.error().message;
      j->id = *id;
    }
    EXPECT_EQ(a.id, 1u);
    EXPECT_EQ(b.id, 2u);
    EXPECT_EQ(c.id, 3u);

    // a: started, grew, ran two epochs. b: started, then failed. c: cancelled while queued.
    ASSERT_TRUE(store->set_state(a.id, job_state::running, 1.7e9 + 10));
    const std::vector<std::uint32_t> wn{7, 9}, sn{7};
    ASSERT_TRUE(store->set_allocation(a.id, 1.7e9 + 10, 2, 1, wn, sn));
    const std::vector<std::uint32_t> wn2{7, 9, 9, 11}, sn2{7, 11};
    ASSERT_TRUE(store->set_allocation(a.id, 1.7e9 + 50, 4, 2, wn2, sn2));
    epoch_record e0{0, 1.7e9 + 40, 2, 1, 30.0, 60000, 0.9, 0.8, 0.7, std::nullopt};
    epoch_record e1{1, 1.7e9 + 60, 4, 2, 16.0, 60000, 0.5, 0.45, 0.83, 15.5};
    ASSERT_TRUE(store->add_epoch(a.id, e0));
    ASSERT_TRUE(store->add_epoch(a.id, e1));
    ASSERT_TRUE(store->set_state(b.id, job_state::running, 1.7e9 + 11));
    ASSERT_TRUE(store->set_state(b.id, job_state::failed, 1.7e9 + 12, "worker died"));
    ASSERT_TRUE(store->set_state(c.id, job_state::cancelled, 1.7e9 + 13, "by the user"));
    ASSERT_TRUE(store->set_setting("policy", "coach"));

    a.state = job_state::running;
    a.state_since = 1.7e9 + 10;
    a.workers = 4;
    a.shards = 2;
    a.worker_nodes = wn2;
    a.shard_nodes = sn2;
    a.epochs_done = 2;
    b.state = job_state::failed;
    b.state_since = 1.7e9 + 12;
    b.message = "worker died";
    c.state = job_state::cancelled;
    c.state_since = 1.7e9 + 13;
    c.message = "by the user";
    expected = {a, b, c};
  }
  // A restarted scheduler.
  auto store = job_store::open(path);
  ASSERT_TRUE(store) << store.error().message;
  auto jobs = store->jobs();
  ASSERT_TRUE(jobs) << jobs.error().message;
  ASSERT_EQ(jobs->size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ((*jobs)[i], expected[i]) << "job " << i + 1;
  auto one = store->job(2);
  ASSERT_TRUE(one);
  EXPECT_EQ(*one, expected[1]);

  auto states = store->states(1);
  ASSERT_TRUE(states);
  ASSERT_EQ(states->size(), 2u);
  EXPECT_EQ((*states)[0], (state_change{1.7e9 + 0.25, job_state::queued, ""}));
  EXPECT_EQ((*states)[1], (state_change{1.7e9 + 10, job_state::running, ""}));
  auto failed = store->states(2);
  ASSERT_TRUE(failed);
  ASSERT_EQ(failed->size(), 3u);
  EXPECT_EQ(failed->back().message, "worker died");

  auto allocations = store->allocations(1);
  ASSERT_TRUE(allocations);
  ASSERT_EQ(allocations->size(), 3u);  // the initial (none), then 2 workers, then 4
  EXPECT_EQ((*allocations)[0].workers, 0);
  EXPECT_EQ((*allocations)[1], (allocation_change{1.7e9 + 10, 2, 1, {7, 9}, {7}}));
  EXPECT_EQ((*allocations)[2], (allocation_change{1.7e9 + 50, 4, 2, {7, 9, 9, 11}, {7, 11}}));

  auto epochs = store->epochs(1);
  ASSERT_TRUE(epochs);
  ASSERT_EQ(epochs->size(), 2u);
  EXPECT_EQ((*epochs)[0],
            (epoch_record{0, 1.7e9 + 40, 2, 1, 30.0, 60000, 0.9, 0.8, 0.7, std::nullopt}));
  EXPECT_EQ((*epochs)[1].predicted_seconds, 15.5);

  auto policy = store->setting("policy");
  ASSERT_TRUE(policy);
  EXPECT_EQ(*policy, std::optional<std::string>("coach"));
  auto missing = store->setting("nothing");
  ASSERT_TRUE(missing);
  EXPECT_FALSE(*missing);

  // New ids continue after the old ones.
  auto d = store->add_job(sample_job("next", "mlp-64"));
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, 4u);
}

TEST(job_store, a_submit_token_finds_its_job_after_a_reopen_and_is_not_used_twice) {
  temp_dir dir;
  const std::string path = dir.file("jobs.db");
  constexpr std::uint64_t token = 0xfedcba9876543210ull;  // above INT64_MAX: stored signed
  {
    auto store = job_store::open(path);
    ASSERT_TRUE(store) << store.error().message;
    ASSERT_TRUE(store->add_job(sample_job("plain", "mlp-64")));  // no token
    auto id = store->add_job(sample_job("tokened", "mlp-64"), token);
    ASSERT_TRUE(id) << id.error().message;
    EXPECT_EQ(*id, 2u);
    auto again = store->add_job(sample_job("twice", "mlp-64"), token);
    ASSERT_FALSE(again) << "a token names one job";
    EXPECT_NE(again.error().message.find("submit token"), std::string::npos)
        << again.error().message;
  }
  auto store = job_store::open(path);
  ASSERT_TRUE(store) << store.error().message;
  auto found = store->job_by_token(token);
  ASSERT_TRUE(found) << found.error().message;
  ASSERT_TRUE(*found);
  EXPECT_EQ(**found, 2u);
  auto none = store->job_by_token(12345);
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
  auto jobs = store->jobs();
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->size(), 2u) << "the refused second add stored nothing";
}

TEST(job_store, a_forgotten_job_is_gone_with_its_history_and_its_id_is_not_given_again) {
  temp_dir dir;
  const std::string path = dir.file("jobs.db");
  {
    auto store = job_store::open(path);
    ASSERT_TRUE(store) << store.error().message;
    const auto a = *store->add_job(sample_job("a", "m"));
    const auto b = *store->add_job(sample_job("b", "m"), 77);
    ASSERT_TRUE(store->set_state(b, job_state::succeeded, 5.0));
    ASSERT_TRUE(store->add_epoch(
        b, epoch_record{
               .epoch = 0, .at = 4.0, .workers = 1, .shards = 1, .seconds = 1.0, .samples = 10}));
    ASSERT_TRUE(store->forget_job(b));
    auto jobs = store->jobs();
    ASSERT_TRUE(jobs);
    ASSERT_EQ(jobs->size(), 1u);
    EXPECT_EQ(jobs->front().id, a);
    EXPECT_FALSE(store->job(b));
    EXPECT_TRUE(store->epochs(b)->empty());
    EXPECT_TRUE(store->states(b)->empty());
    EXPECT_FALSE(*store->job_by_token(77));
    auto again = store->forget_job(b);
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().code, errc::not_found);
  }
  // The newest job was forgotten: its id stays taken, after a reopen too.
  auto store = job_store::open(path);
  ASSERT_TRUE(store) << store.error().message;
  auto next = store->add_job(sample_job("c", "m"));
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_EQ(*next, 3u);
}

TEST(job_store, errors_name_the_job_and_keep_the_store_usable) {
  auto store = job_store::open(":memory:");
  ASSERT_TRUE(store) << store.error().message;
  auto j = sample_job("a", "m");
  j.id = 10;
  ASSERT_TRUE(store->add_job(j));
  auto again = store->add_job(j);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, errc::invalid_argument);
  EXPECT_TRUE(has(again.error().message, "job 10 exists already"));
  auto unknown = store->set_state(99, job_state::running, 1);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, errc::not_found);
  EXPECT_EQ(unknown.error().message, "job store ':memory:': no job 99");
  EXPECT_EQ(store->set_allocation(99, 1, 1, 1, {}, {}).error().code, errc::not_found);
  EXPECT_EQ(store->add_epoch(99, {}).error().code, errc::not_found);
  EXPECT_EQ(store->job(99).error().code, errc::not_found);
  // The failed calls left nothing behind: one job, its one state.
  EXPECT_EQ(store->jobs()->size(), 1u);
  EXPECT_EQ(store->states(10)->size(), 1u);
  auto next = store->add_job(sample_job("b", "m"));
  ASSERT_TRUE(next);
  EXPECT_EQ(*next, 11u);
}

TEST(job_store, an_epoch_recorded_twice_is_replaced_and_nan_losses_survive) {
  auto store = job_store::open(":memory:");
  ASSERT_TRUE(store);
  const auto id = *store->add_job(sample_job("a", "m"));
  epoch_record e{0, 5, 1, 1, 12, 100, NAN, NAN, 0.5, std::nullopt};
  ASSERT_TRUE(store->add_epoch(id, e));
  e.seconds = 11;
  ASSERT_TRUE(store->add_epoch(id, e));
  auto epochs = store->epochs(id);
  ASSERT_TRUE(epochs);
  ASSERT_EQ(epochs->size(), 1u);
  EXPECT_EQ((*epochs)[0].seconds, 11);
  EXPECT_TRUE(std::isnan((*epochs)[0].train_loss));
  EXPECT_EQ(store->job(id)->epochs_done, 1);
}

TEST(job_store, a_restarted_scheduler_relearns_its_model_from_stored_epochs) {
  const perf_theta truth{10, 600, 4, 1, 2};
  temp_dir dir;
  const std::string path = dir.file("jobs.db");
  {
    auto store = job_store::open(path);
    ASSERT_TRUE(store);
    for (int k = 0; k < 3; ++k) {
      const auto id = *store->add_job(sample_job("j" + std::to_string(k), "resnet"));
      std::uint32_t epoch = 0;
      for (int w : {1, 2, 4, 8})
        ASSERT_TRUE(store->add_epoch(id, {epoch++, 0, w, 2, epoch_seconds(truth, w, 2), 1000}));
    }
  }
  auto store = job_store::open(path);
  ASSERT_TRUE(store);
  perf_model model;
  auto n = store->replay_epochs(model);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(*n, 12u);
  auto t = model.predict(100, "resnet", 6, 2);
  ASSERT_TRUE(t);
  EXPECT_NEAR(*t / epoch_seconds(truth, 6, 2), 1, 0.05);
  const auto summary = model.summary();
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0].jobs, 3u);
}

TEST(job_store, bad_paths_and_foreign_files_are_errors) {
  temp_dir dir;
  auto missing_dir = job_store::open(dir.file("no/such/dir/jobs.db"));
  ASSERT_FALSE(missing_dir);
  EXPECT_EQ(missing_dir.error().code, errc::io_error);
  EXPECT_TRUE(has(missing_dir.error().message, "no/such/dir/jobs.db"));

  const std::string text = dir.file("notes.txt");
  std::ofstream(text) << "this is not a database, but long enough to have a header page......\n";
  auto foreign = job_store::open(text);
  ASSERT_FALSE(foreign);
  EXPECT_EQ(foreign.error().code, errc::io_error);
  EXPECT_TRUE(has(foreign.error().message, "notes.txt"));

  // A store written by a newer schema is refused, not misread.
  const std::string newer = dir.file("newer.db");
  ASSERT_TRUE(job_store::open(newer));
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(newer.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value = '4' WHERE key = 'schema'", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto refused = job_store::open(newer);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::unsupported);
  EXPECT_TRUE(has(refused.error().message, "schema version 4; this build reads 3"));
}

// Issue 37: a zero-length store file opened as a new, empty store (every job forgotten).
TEST(job_store, an_empty_file_is_refused_but_a_store_whose_pages_are_all_in_its_log_opens) {
  temp_dir dir;
  const std::string empty = dir.file("jobs.db");
  std::ofstream(empty).close();
  auto refused = job_store::open(empty);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::parse_error);
  EXPECT_EQ(refused.error().message,
            "job store '" + empty +
                "' is an empty file: not a store Coach wrote (truncated?); move it away to start "
                "an empty store, or give --store another path");
  EXPECT_EQ(fs::file_size(empty), 0u);  // left as it was
  // A path with nothing there is a new store, as before.
  EXPECT_TRUE(job_store::open(dir.file("new.db")));
  // A store copied while open: its main file may still be empty, its pages in the log. It
  // opens, with its job.
  const std::string live = dir.file("live.db");
  auto store = job_store::open(live);
  ASSERT_TRUE(store) << store.error().message;
  ASSERT_TRUE(store->add_job(sample_job("kept", "mlp-64")));
  const std::string copy = dir.file("copy.db");
  fs::copy_file(live, copy);
  if (fs::exists(live + "-wal")) fs::copy_file(live + "-wal", copy + "-wal");
  auto reopened = job_store::open(copy);
  ASSERT_TRUE(reopened) << reopened.error().message;
  auto jobs = reopened->jobs();
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->size(), 1u);
}

/// Makes the store at `path` what a build of schema `version` (1 or 2) wrote: the columns later
/// schemas added dropped, the version set.
void as_schema(const std::string& path, int version) {
  std::string sql =
      "ALTER TABLE jobs DROP COLUMN recoveries; ALTER TABLE jobs DROP COLUMN failovers; "
      "ALTER TABLE jobs DROP COLUMN resumes; ALTER TABLE jobs DROP COLUMN samples_per_epoch;";
  if (version < 2)
    for (const char* col : {"version", "updates", "samples_applied", "state_a", "state_b"})
      sql += std::string(" ALTER TABLE checkpoints DROP COLUMN ") + col + ";";
  sql += " UPDATE meta SET value = '" + std::to_string(version) + "' WHERE key = 'schema';";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
}

TEST(job_store, a_store_of_schema_1_is_upgraded_and_its_checkpoint_read_without_state) {
  temp_dir dir;
  const std::string path = dir.file("old.db");
  std::uint64_t id = 0;
  {
    auto store = job_store::open(path);
    ASSERT_TRUE(store) << store.error().message;
    id = *store->add_job(sample_job("a", "m"));
    ps::training_state s;
    s.values = {1.f, 2.f, 3.f};
    ASSERT_TRUE(store->save_checkpoint(id, 4, 10, s));
  }
  // What a store of schema 1 held: the values alone.
  as_schema(path, 1);
  auto store = job_store::open(path);
  ASSERT_TRUE(store) << store.error().message;
  EXPECT_EQ(**store->setting("schema"), "3");
  EXPECT_EQ(store->job(id)->resumes, 0);
  auto c = store->checkpoint(id);
  ASSERT_TRUE(c && *c) << (c ? "none" : c.error().message);
  EXPECT_EQ((*c)->epoch, 4u);
  EXPECT_EQ((*c)->state.values, (std::vector<float>{1.f, 2.f, 3.f}));
  EXPECT_EQ((*c)->state.version, 0);
  EXPECT_TRUE((*c)->state.state_a.empty());
}

TEST(job_store, a_jobs_history_survives_a_reopen_and_a_store_of_schema_2_is_upgraded) {
  // Issue 37: after a scheduler restart, ended jobs showed 0 recoveries, failovers and resumes.
  temp_dir dir;
  const std::string path = dir.file("history.db");
  std::uint64_t id = 0, old_id = 0;
  {
    auto store = job_store::open(path);
    ASSERT_TRUE(store) << store.error().message;
    id = *store->add_job(sample_job("a", "m"));
    old_id = *store->add_job(sample_job("b", "m"));
    const std::vector<double> lost{12.5, 0.1 + 0.2};
    ASSERT_TRUE(store->set_history(id, lost, 2, 3));
    EXPECT_EQ(store->set_history(99, lost, 0, 0).error().code, errc::not_found);
  }
  {
    auto store = job_store::open(path);
    ASSERT_TRUE(store) << store.error().message;
    const auto j = store->job(id);
    ASSERT_TRUE(j) << j.error().message;
    EXPECT_EQ(j->recoveries_lost_s, (std::vector<double>{12.5, 0.1 + 0.2})) << "bit for bit";
    EXPECT_EQ(j->failovers, 2);
    EXPECT_EQ(j->resumes, 3);
  }
  as_schema(path, 2);
  auto store = job_store::open(path);
  ASSERT_TRUE(store) << store.error().message;
  EXPECT_EQ(**store->setting("schema"), "3");
  EXPECT_EQ(store->job(old_id)->name, "b");
  EXPECT_TRUE(store->job(id)->recoveries_lost_s.empty()) << "what schema 2 did not keep";
  ASSERT_TRUE(store->set_history(id, std::vector<double>{1.0}, 1, 0));
  EXPECT_EQ(store->job(id)->failovers, 1);
}

}  // namespace
}  // namespace coach::scheduler

namespace coach::scheduler {
namespace {

TEST(job_store, the_latest_checkpoint_survives_a_reopen_bit_for_bit) {
  temp_dir dir;
  const std::string path = dir.file("jobs.db");
  std::vector<float> params(100003);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = float(i) * 0.5f - 7.25f;
  params[3] = -0.0f;
  std::uint64_t id = 0;
  {
    auto store = job_store::open(path);
    ASSERT_TRUE(store) << store.error().message;
    id = *store->add_job(sample_job("a", "m"));
    EXPECT_FALSE(store->checkpoint(id)->has_value());
    ps::training_state first;
    first.values.assign(5, 1.0f);
    ASSERT_TRUE(store->save_checkpoint(id, 0, 10, first));
    ps::training_state s;
    s.version = 1234;
    s.updates = 1200;
    s.samples_applied = 5'000'000'000ull;
    s.values = params;
    s.state_a.assign(params.size(), 0.125f);
    s.state_b.assign(params.size(), 3.0f);
    ASSERT_TRUE(store->save_checkpoint(id, 1, 20, s));  // replaces epoch 0's
    auto unknown = store->save_checkpoint(99, 0, 1, s);
    ASSERT_FALSE(unknown);
    EXPECT_EQ(unknown.error().message, "job store '" + path + "': no job 99");
  }
  auto store = job_store::open(path);
  ASSERT_TRUE(store) << store.error().message;
  auto c = store->checkpoint(id);
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_TRUE(c->has_value());
  EXPECT_EQ((*c)->epoch, 1u);
  EXPECT_EQ((*c)->at, 20);
  const auto& got = (*c)->state;
  ASSERT_EQ(got.values.size(), params.size());
  EXPECT_EQ(std::memcmp(got.values.data(), params.data(), params.size() * 4), 0);
  EXPECT_EQ(got.version, 1234);
  EXPECT_EQ(got.updates, 1200);
  EXPECT_EQ(got.samples_applied, 5'000'000'000ull);
  EXPECT_EQ(got.state_a, std::vector<float>(params.size(), 0.125f));
  EXPECT_EQ(got.state_b, std::vector<float>(params.size(), 3.0f));
  EXPECT_FALSE(store->checkpoint(99)->has_value());
}

TEST(job_store, a_script_jobs_model_survives_a_reopen_and_goes_when_dropped) {
  temp_dir dir;
  const std::string path = dir.file("jobs.db");
  worker::script_payload p;
  p.entry = "train.py";
  p.layout_json = R"({"op":"hello","samples":4,"tensors":[]})";
  p.initial = std::make_shared<const std::vector<float>>(std::vector<float>{1.5f, -0.0f, 3});
  std::vector<std::byte> bundle(5 << 20);
  for (std::size_t i = 0; i < bundle.size(); ++i) bundle[i] = std::byte(i * 7);
  p.bundle = std::make_shared<const std::vector<std::byte>>(bundle);
  std::uint64_t id = 0;
  {
    auto store = job_store::open(path);
    ASSERT_TRUE(store) << store.error().message;
    id = *store->add_job(sample_job("a", "m"));
    EXPECT_FALSE(store->script(id)->has_value());
    ASSERT_TRUE(store->save_script(id, p));
    auto unknown = store->save_script(99, p);
    ASSERT_FALSE(unknown);
    EXPECT_EQ(unknown.error().message, "job store '" + path + "': no job 99");
  }
  auto store = job_store::open(path);
  ASSERT_TRUE(store) << store.error().message;
  auto got = store->script(id);
  ASSERT_TRUE(got) << got.error().message;
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->entry, "train.py");
  EXPECT_EQ((*got)->layout_json, p.layout_json);
  ASSERT_TRUE((*got)->initial);
  ASSERT_EQ((*got)->initial->size(), 3u);
  EXPECT_EQ(std::memcmp((*got)->initial->data(), p.initial->data(), 12), 0);
  ASSERT_TRUE((*got)->bundle);
  EXPECT_TRUE(*(*got)->bundle == bundle);
  ASSERT_TRUE(store->drop_script(id));
  EXPECT_FALSE(store->script(id)->has_value());
  EXPECT_TRUE(store->drop_script(id)) << "dropping none is no error";
}

}  // namespace
}  // namespace coach::scheduler
