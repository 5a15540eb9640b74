#pragma once
// scheduler::job_store: the scheduler's durable memory, in SQLite (DESIGN.md "Scheduler"). It
// keeps every job (its spec and limits, state and allocation), the history of states and
// allocations, and every finished epoch with its measured and predicted time, so that a
// restarted scheduler finds every job it knew and its performance model relearns from the
// epochs of earlier jobs (replay_epochs). docs/scheduler.md shows the schema.
//
// Times are what the caller passes: the cluster scheduler uses wall_clock (Unix seconds), so
// they stay meaningful across restarts.
//
// Threads: one owner (the scheduler actor). SQLite is opened in its serialized mode, so a second
// thread would be safe but would wait; nothing here needs one. A file store uses SQLite's
// write-ahead log: each call is one transaction, durable once it returns.
//
// Sources: job_store.cpp opens the store (schema, upgrades) and keeps epochs, checkpoints and
// settings; job_store_jobs.cpp the jobs with their tokens, states, allocations and history;
// job_store_script.cpp a script job's model.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "ps/training_state.hpp"
#include "report/perf_model.hpp"
#include "scheduler/cluster_view.hpp"
#include "worker/script_job.hpp"

struct sqlite3;

namespace coach::scheduler {

/// A job as stored: what it is, and where it stands now.
struct job_record {
  std::uint64_t id = 0;  ///< 0 in add_job: take the next free id
  std::string name;
  std::string model;        ///< jobs of one model share a performance curve
  std::string spec_yaml;    ///< the spec as submitted
  std::string source_name;  ///< for messages (the spec's file name)
  std::string base_dir;     ///< the spec file's folder (its relative paths resolve there)
  double submitted = 0;
  bool elastic = true;
  int min_workers = 1, max_workers = 1, requested_workers = 1;
  int min_shards = 1, max_shards = 1, requested_shards = 1;
  int gpus_per_worker = 0;
  int epochs_total = 0;
  // Where it stands (changed by set_state, set_allocation, add_epoch).
  job_state state = job_state::queued;
  double state_since = 0;
  int workers = 0, shards = 0;
  std::vector<std::uint32_t> worker_nodes;  ///< by rank
  std::vector<std::uint32_t> shard_nodes;   ///< by shard id
  int epochs_done = 0;
  std::string message;  ///< why it failed or was cancelled; empty otherwise
  // Its history (set_history): the seconds of work each recovery lost, shard failovers, resumes.
  std::vector<double> recoveries_lost_s;
  int failovers = 0;
  int resumes = 0;
  std::uint64_t samples_per_epoch = 0;  ///< its data set's training rows (0: not known)
  friend bool operator==(const job_record&, const job_record&) = default;
};

/// One finished epoch of a job.
struct epoch_record {
  std::uint32_t epoch = 0;  ///< 0-based
  double at = 0;            ///< when it ended
  int workers = 0;
  int shards = 0;
  double seconds = 0;  ///< training time of the epoch
  std::uint64_t samples = 0;
  double train_loss = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  std::optional<double> predicted_seconds;  ///< the model's prediction when the epoch began
  friend bool operator==(const epoch_record&, const epoch_record&) = default;
};

/// One entry of a job's state history.
struct state_change {
  double at = 0;
  job_state state = job_state::queued;
  std::string message;
  friend bool operator==(const state_change&, const state_change&) = default;
};

/// One entry of a job's allocation history.
struct allocation_change {
  double at = 0;
  int workers = 0;
  int shards = 0;
  std::vector<std::uint32_t> worker_nodes;
  std::vector<std::uint32_t> shard_nodes;
  friend bool operator==(const allocation_change&, const allocation_change&) = default;
};

/// A job's training state at the end of an epoch: what a resumed job starts from.
struct checkpoint_record {
  std::uint32_t epoch = 0;  ///< the epoch it ends (0-based); the job resumes at epoch + 1
  double at = 0;
  /// Values, optimizer state and counters. A store of schema 1 kept the values only: read
  /// from one, the counters are 0 and the state is empty.
  ps::training_state state;
};

class job_store {
 public:
  /// Opens (creating if needed) the store at `path`; ":memory:" keeps it in memory. Errors:
  /// io_error naming the path when SQLite cannot open it or it is not a database,
  /// unsupported when it was written by a newer schema. A store of schema 1 is upgraded (its
  /// checkpoints gain the optimizer state's columns, empty).
  static result<job_store> open(const std::string& path);

  job_store(job_store&& other) noexcept;
  job_store& operator=(job_store&& other) noexcept;
  job_store(const job_store&) = delete;
  job_store& operator=(const job_store&) = delete;
  ~job_store();

  /// Stores a new job, with its state and allocation as given (recorded as the first entries of
  /// its histories). Returns its id: `job.id`, or the next free one when that is 0 (one more
  /// than the largest ever stored, so ids are not reused after a restart). Errors:
  /// invalid_argument when the id is taken.
  /// `token` (0: none): the submit's token (submit_request::token), kept with the job so that
  /// the same submit again finds it (job_by_token), also after a restart.
  result<std::uint64_t> add_job(const job_record& job, std::uint64_t token = 0);
  /// Deletes a job and everything kept of it (states, allocations, epochs, token, checkpoint,
  /// script); its id is never given again (add_job). Errors: not_found.
  result<void> forget_job(std::uint64_t job);
  /// The job stored with submit token `token` (non-zero), or nullopt.
  result<std::optional<std::uint64_t>> job_by_token(std::uint64_t token) const;
  /// Changes a job's state and appends it to the history. Errors: not_found for an unknown job.
  result<void> set_state(std::uint64_t job, job_state state, double at,
                         std::string_view message = {});
  /// Changes a job's allocation and appends it to the history. Errors: not_found.
  /// The job's history as it stands: the seconds of work each recovery from a lost node lost,
  /// its shard failovers and its resumes (shown by coach status after a restart too).
  result<void> set_history(std::uint64_t job, std::span<const double> recoveries_lost_s,
                           int failovers, int resumes);
  result<void> set_allocation(std::uint64_t job, double at, int workers, int shards,
                              std::span<const std::uint32_t> worker_nodes,
                              std::span<const std::uint32_t> shard_nodes);
  /// Records a finished epoch (replacing one with the same number) and sets epochs_done to
  /// epoch + 1 if that is more. Errors: not_found.
  result<void> add_epoch(std::uint64_t job, const epoch_record& e);

  /// Stores `state` as job's checkpoint after `epoch`, replacing the previous one (only the
  /// latest is kept: a resume needs no other). Errors: not_found.
  result<void> save_checkpoint(std::uint64_t job, std::uint32_t epoch, double at,
                               const ps::training_state& state);
  /// A job's latest checkpoint, or nullopt when it has none.
  result<std::optional<checkpoint_record>> checkpoint(std::uint64_t job) const;

  /// Keeps job's script (a script's model: its layout, initial values and files as `coach
  /// submit` registered them), replacing one kept before, so that a restarted scheduler can
  /// start the job (table job_scripts; job_store_script.cpp). Errors: not_found; io_error
  /// (SQLite's, e.g. a blob over its limit of 1 GB).
  result<void> save_script(std::uint64_t job, const worker::script_payload& script);
  /// A job's script, or nullopt when it has none.
  result<std::optional<worker::script_payload>> script(std::uint64_t job) const;
  /// Forgets a job's script (the job ended: its files are not needed again).
  result<void> drop_script(std::uint64_t job);

  /// Every job, by id.
  result<std::vector<job_record>> jobs() const;
  /// One job. Errors: not_found.
  result<job_record> job(std::uint64_t id) const;
  /// A job's epochs, by number.
  result<std::vector<epoch_record>> epochs(std::uint64_t job) const;
  /// A job's states, oldest first.
  result<std::vector<state_change>> states(std::uint64_t job) const;
  /// A job's allocations, oldest first.
  result<std::vector<allocation_change>> allocations(std::uint64_t job) const;

  /// A setting that survives restarts (e.g. "policy": the active scheduling policy).
  result<void> set_setting(std::string_view key, std::string_view value);
  /// The setting `key`, or nullopt when it was never set.
  result<std::optional<std::string>> setting(std::string_view key) const;

  /// Feeds every stored epoch to `model` (perf_model::observe), by job then epoch; returns how
  /// many. A restarted scheduler's model so starts from what the previous one had learned.
  result<std::size_t> replay_epochs(perf_model& model) const;

  /// The path the store was opened with.
  const std::string& path() const noexcept { return path_; }

 private:
  job_store(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace coach::scheduler
