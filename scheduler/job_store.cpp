#include "scheduler/job_store.hpp"

#include <sqlite3.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string_view>
#include <utility>

#include "common/format.hpp"
#include "scheduler/sqlite.hpp"

namespace coach::scheduler {
namespace {

using sqlite::sql_error;
using sqlite::sql_transaction;
using sqlite::statement;

/// The schema this build reads and writes; a store with another version is refused rather than
/// misread. docs/scheduler.md explains each table.
constexpr std::string_view schema_version = "3";
constexpr const char* schema_sql = R"sql(
CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  id                INTEGER PRIMARY KEY,
  name              TEXT NOT NULL,
  model             TEXT NOT NULL,
  spec              TEXT NOT NULL,
  source_name       TEXT NOT NULL,
  base_dir          TEXT NOT NULL,
  submitted         REAL NOT NULL,
  elastic           INTEGER NOT NULL,
  min_workers       INTEGER NOT NULL,
  max_workers       INTEGER NOT NULL,
  requested_workers INTEGER NOT NULL,
  min_shards        INTEGER NOT NULL,
  max_shards        INTEGER NOT NULL,
  requested_shards  INTEGER NOT NULL,
  gpus_per_worker   INTEGER NOT NULL,
  epochs_total      INTEGER NOT NULL,
  state             TEXT NOT NULL,
  state_since       REAL NOT NULL,
  workers           INTEGER NOT NULL,
  shards            INTEGER NOT NULL,
  worker_nodes      TEXT NOT NULL,
  shard_nodes       TEXT NOT NULL,
  epochs_done       INTEGER NOT NULL,
  message           TEXT NOT NULL,
  recoveries        TEXT NOT NULL DEFAULT '',
  failovers         INTEGER NOT NULL DEFAULT 0,
  resumes           INTEGER NOT NULL DEFAULT 0,
  samples_per_epoch INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS job_states (
  job     INTEGER NOT NULL REFERENCES jobs(id),
  at      REAL NOT NULL,
  state   TEXT NOT NULL,
  message TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS job_states_by_job ON job_states(job);
CREATE TABLE IF NOT EXISTS allocations (
  job          INTEGER NOT NULL REFERENCES jobs(id),
  at           REAL NOT NULL,
  workers      INTEGER NOT NULL,
  shards       INTEGER NOT NULL,
  worker_nodes TEXT NOT NULL,
  shard_nodes  TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS allocations_by_job ON allocations(job);
CREATE TABLE IF NOT EXISTS epochs (
  job               INTEGER NOT NULL REFERENCES jobs(id),
  epoch             INTEGER NOT NULL,
  at                REAL NOT NULL,
  workers           INTEGER NOT NULL,
  shards            INTEGER NOT NULL,
  seconds           REAL NOT NULL,
  samples           INTEGER NOT NULL,
  train_loss        REAL,
  test_loss         REAL,
  test_accuracy     REAL,
  predicted_seconds REAL,
  PRIMARY KEY (job, epoch));
CREATE TABLE IF NOT EXISTS submit_tokens (
  token INTEGER PRIMARY KEY,
  job   INTEGER NOT NULL REFERENCES jobs(id));
CREATE TABLE IF NOT EXISTS checkpoints (
  job             INTEGER PRIMARY KEY REFERENCES jobs(id),
  epoch           INTEGER NOT NULL,
  at              REAL NOT NULL,
  params          BLOB NOT NULL,
  version         INTEGER NOT NULL DEFAULT 0,
  updates         INTEGER NOT NULL DEFAULT 0,
  samples_applied INTEGER NOT NULL DEFAULT 0,
  state_a         BLOB,
  state_b         BLOB);
CREATE TABLE IF NOT EXISTS job_scripts (
  job     INTEGER PRIMARY KEY REFERENCES jobs(id),
  entry   TEXT NOT NULL,
  layout  TEXT NOT NULL,
  initial BLOB NOT NULL,
  bundle  BLOB NOT NULL);
)sql";

/// Schema 1 to 2: checkpoints keep the optimizer state and its counters.
constexpr const char* upgrade_1_sql = R"sql(
ALTER TABLE checkpoints ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE checkpoints ADD COLUMN updates INTEGER NOT NULL DEFAULT 0;
ALTER TABLE checkpoints ADD COLUMN samples_applied INTEGER NOT NULL DEFAULT 0;
ALTER TABLE checkpoints ADD COLUMN state_a BLOB;
ALTER TABLE checkpoints ADD COLUMN state_b BLOB;
)sql";

/// Schema 2 to 3: a job keeps its history (the seconds lost by each recovery, its failovers and
/// resumes) and its samples per epoch, which coach status shows after a scheduler restart too.
constexpr const char* upgrade_2_sql = R"sql(
ALTER TABLE jobs ADD COLUMN recoveries TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN failovers INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN samples_per_epoch INTEGER NOT NULL DEFAULT 0;
)sql";

}  // namespace

result<job_store> job_store::open(const std::string& path) {
  // A store this code made is never an empty file once open returned: it holds the schema (in
  // its write-ahead log until the first checkpoint). An empty file with no log beside it is
  // something else (a truncated store, a file touched by hand), and SQLite would take it as a
  // new, empty database: every job forgotten without a word (issue 37).
  if (path != ":memory:") {
    std::error_code ec, wal_ec;
    const auto size = std::filesystem::file_size(path, ec);
    const auto wal = std::filesystem::file_size(path + "-wal", wal_ec);
    if (!ec && size == 0 && (wal_ec || wal == 0))
      return fail(errc::parse_error,
                  "job store '{}' is an empty file: not a store Coach wrote (truncated?); move it "
                  "away to start an empty store, or give --store another path",
                  path);
  }
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  job_store store(db, path);  // closes db on every return below
  if (rc != SQLITE_OK) return sql_error(db, path, "cannot open");
  sqlite3_busy_timeout(db, 5000);
  sqlite3_extended_result_codes(db, 1);
  if (path != ":memory:" &&
      sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr) != SQLITE_OK)
    return sql_error(db, path, "cannot use it");
  if (sqlite3_exec(db, "PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL", nullptr, nullptr,
                   nullptr) != SQLITE_OK ||
      sqlite3_exec(db, schema_sql, nullptr, nullptr, nullptr) != SQLITE_OK)
    return sql_error(db, path, "cannot create its tables");
  auto version = store.setting("schema");
  if (!version) return std::unexpected(version.error());
  if (!*version) {
    if (auto set = store.set_setting("schema", schema_version); !set)
      return std::unexpected(set.error());
  } else if (**version == "1" || **version == "2") {
    if (**version == "1" && sqlite3_exec(db, upgrade_1_sql, nullptr, nullptr, nullptr) != SQLITE_OK)
      return sql_error(db, path, "cannot upgrade its schema from version 1");
    if (sqlite3_exec(db, upgrade_2_sql, nullptr, nullptr, nullptr) != SQLITE_OK)
      return sql_error(db, path,
                       coach::format("cannot upgrade its schema from version {}", **version));
    if (auto set = store.set_setting("schema", schema_version); !set)
      return std::unexpected(set.error());
  } else if (**version != schema_version) {
    return fail(errc::unsupported, "job store '{}' has schema version {}; this build reads {}",
                path, **version, schema_version);
  }
  return store;
}

job_store::job_store(job_store&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)) {}

job_store& job_store::operator=(job_store&& other) noexcept {
  if (this != &other) {
    if (db_) sqlite3_close(db_);
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

job_store::~job_store() {
  if (db_) sqlite3_close(db_);
}

result<void> job_store::add_epoch(std::uint64_t job, const epoch_record& e) {
  sql_transaction tx(db_);
  if (!tx.ok()) return sql_error(db_, path_, "cannot begin a transaction");
  statement up(db_, "UPDATE jobs SET epochs_done = MAX(epochs_done, ?) WHERE id = ?");
  up.bind(1, std::int64_t(e.epoch) + 1).bind(2, job);
  if (up.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot update a job");
  if (sqlite3_changes(db_) == 0)
    return fail(errc::not_found, "job store '{}': no job {}", path_, job);
  statement ins(db_,
                "INSERT OR REPLACE INTO epochs (job, epoch, at, workers, shards, seconds, samples, "
                "train_loss, test_loss, test_accuracy, predicted_seconds) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  ins.bind(1, job)
      .bind(2, std::int64_t(e.epoch))
      .bind(3, e.at)
      .bind(4, e.workers)
      .bind(5, e.shards)
      .bind(6, e.seconds)
      .bind(7, e.samples)
      .bind(8, e.train_loss)
      .bind(9, e.test_loss)
      .bind(10, e.test_accuracy)
      .bind(11, e.predicted_seconds);
  if (ins.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot add an epoch");
  if (!tx.commit()) return sql_error(db_, path_, "cannot commit");
  return {};
}

result<void> job_store::save_checkpoint(std::uint64_t job, std::uint32_t epoch, double at,
                                        const ps::training_state& s) {
  statement q(db_,
              "INSERT OR REPLACE INTO checkpoints (job, epoch, at, params, version, updates, "
              "samples_applied, state_a, state_b) SELECT id, ?, ?, ?, ?, ?, ?, ?, ? FROM jobs "
              "WHERE id = ?");
  auto floats = [&](int i, const std::vector<float>& v) {
    q.bind_blob(i, v.data(), v.size() * sizeof(float));
  };
  q.bind(1, std::int64_t(epoch)).bind(2, at);
  floats(3, s.values);
  q.bind(4, s.version).bind(5, s.updates).bind(6, std::int64_t(s.samples_applied));
  floats(7, s.state_a);
  floats(8, s.state_b);
  q.bind(9, job);
  if (q.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot store a checkpoint");
  if (sqlite3_changes(db_) == 0)
    return fail(errc::not_found, "job store '{}': no job {}", path_, job);
  return {};
}

result<std::optional<checkpoint_record>> job_store::checkpoint(std::uint64_t job) const {
  statement q(db_,
              "SELECT epoch, at, params, version, updates, samples_applied, state_a, state_b "
              "FROM checkpoints WHERE job = ?");
  q.bind(1, job);
  const int rc = q.step();
  if (rc == SQLITE_DONE) return std::optional<checkpoint_record>();
  if (rc != SQLITE_ROW) return sql_error(db_, path_, "cannot read a checkpoint");
  checkpoint_record c;
  c.epoch = std::uint32_t(q.integer(0));
  c.at = q.real(1);
  auto& s = c.state;
  s.version = q.integer(3);
  s.updates = q.integer(4);
  s.samples_applied = std::uint64_t(q.integer(5));
  const std::pair<int, std::vector<float>*> columns[] = {
      {2, &s.values}, {6, &s.state_a}, {7, &s.state_b}};
  for (auto [col, out] : columns) {
    const auto bytes = q.blob(col);
    if (bytes.size() % sizeof(float) != 0)
      return fail(errc::parse_error,
                  "job store '{}': job {}'s checkpoint has {} bytes of {}, not whole f32s", path_,
                  job, bytes.size(), col == 2 ? "values" : "optimizer state");
    out->resize(bytes.size() / sizeof(float));
    if (!bytes.empty()) std::memcpy(out->data(), bytes.data(), bytes.size());
  }
  return std::optional<checkpoint_record>(std::move(c));
}

result<std::vector<epoch_record>> job_store::epochs(std::uint64_t job) const {
  statement q(db_,
              "SELECT epoch, at, workers, shards, seconds, samples, train_loss, test_loss, "
              "test_accuracy, predicted_seconds FROM epochs WHERE job = ? ORDER BY epoch");
  q.bind(1, job);
  std::vector<epoch_record> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    epoch_record e;
    e.epoch = std::uint32_t(q.integer(0));
    e.at = q.real(1);
    e.workers = int(q.integer(2));
    e.shards = int(q.integer(3));
    e.seconds = q.real(4);
    e.samples = std::uint64_t(q.integer(5));
    e.train_loss = q.real(6);
    e.test_loss = q.real(7);
    e.test_accuracy = q.real(8);
    e.predicted_seconds = q.optional_real(9);
    out.push_back(e);
  }
  if (rc != SQLITE_DONE) return sql_error(db_, path_, "cannot read epochs");
  return out;
}

result<void> job_store::set_setting(std::string_view key, std::string_view value) {
  statement q(db_, "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)");
  q.bind(1, key).bind(2, value);
  if (q.step() != SQLITE_DONE) return sql_error(db_, path_, "cannot store a setting");
  return {};
}

result<std::optional<std::string>> job_store::setting(std::string_view key) const {
  statement q(db_, "SELECT value FROM meta WHERE key = ?");
  q.bind(1, key);
  const int rc = q.step();
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return sql_error(db_, path_, "cannot read a setting");
  return std::optional<std::string>(q.text(0));
}

result<std::size_t> job_store::replay_epochs(perf_model& model) const {
  statement q(db_,
              "SELECT e.job, j.model, e.workers, e.shards, e.seconds FROM epochs e JOIN jobs j "
              "ON j.id = e.job ORDER BY e.job, e.epoch");
  std::size_t n = 0;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    model.observe(std::uint64_t(q.integer(0)), q.text(1), int(q.integer(2)), int(q.integer(3)),
                  q.real(4));
    ++n;
  }
  if (rc != SQLITE_DONE) return sql_error(db_, path_, "cannot read epochs");
  return n;
}

}  // namespace coach::scheduler
