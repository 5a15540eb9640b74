#pragma once
// worker::external_process: one process of a user's script that computes a worker's steps (or
// evaluates the epochs), and Coach's side of its channel (docs/wire.md "External compute
// processes"): a Unix socket pair for one-line JSON messages, a shared-memory file holding the
// parameters and the gradient, and a pipe from the process's stderr, whose lines are logged and
// the last of which name a process that failed.
//
// start() runs the script and returns at once (several processes import their framework in
// parallel); handshake() waits for its `hello` and registers the layout (the job's first
// process: its initial values come back) or checks it against the registered one. step() and
// evaluate() hand the parameters over through the shared file and wait for the answer; a
// process that dies meanwhile (its socket closes) is an error naming its exit status and the
// last lines of its stderr, at once. Junk on the channel ends the process.
//
// Not thread-safe: one owner at a time (a worker, the evaluator, or the pool that keeps it).
//
// The process and its channel are in external_process.cpp; the exchanges on it (handshake,
// step, evaluate) in external_messages.cpp; the rows of a script with tables in
// external_rows.cpp.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "worker/bounded_process.hpp"
#include "worker/external_layout.hpp"
#include "worker/external_rows.hpp"

namespace coach::worker {

/// A step's answer and where its time went.
struct external_step {
  double loss_sum = 0;
  std::uint64_t samples = 0;
  double copy_in_s = 0;   ///< parameters into the shared file
  double compute_s = 0;   ///< from the `step` message sent to its `done`
  double handoff_s = 0;   ///< of compute_s: the script's own copies (`done`'s handoff_s)
  double copy_out_s = 0;  ///< the gradient out of the shared file
};

/// A process's steps so far, summed: where the handoff's time goes.
struct external_totals {
  std::uint64_t steps = 0;
  double copy_in_s = 0;
  double compute_s = 0;  ///< the round trips, the script's handoff included
  double handoff_s = 0;
  double copy_out_s = 0;
  external_totals& operator+=(const external_totals& o) {
    steps += o.steps;
    copy_in_s += o.copy_in_s;
    compute_s += o.compute_s;
    handoff_s += o.handoff_s;
    copy_out_s += o.copy_out_s;
    return *this;
  }
  /// "938 steps: parameters in 0.052 ms, the script's copies 0.410 ms, its compute 4.101 ms,
  /// gradient out 0.041 ms a step"
  std::string summary() const;
};

/// An evaluation's answer.
struct external_eval {
  std::uint32_t epoch = 0;
  std::uint64_t samples = 0;
  std::uint64_t correct = 0;
  double loss_sum = 0;
  /// A two-class script's test AUC and log loss, when its evaluation gives them; NaN otherwise.
  double auc = std::numeric_limits<double>::quiet_NaN();
  double log_loss = std::numeric_limits<double>::quiet_NaN();
};

/// A step's rows, for a script with embedding tables: the values of each table's rows (rows x
/// dim, the rows as lookup() named them) handed to the process, and where their gradients (of
/// the sum of the samples' losses) come back: grads[t] resized to rows x dim.
struct external_step_rows {
  std::vector<std::span<const float>> values;
  std::vector<std::vector<float>>* grads = nullptr;
};

/// An evaluation's rows: table t's rows `ids` into `out` (ids x dim floats); a shard's read or
/// the evaluator's merged rows.
using external_row_source = std::function<result<void>(
    std::uint32_t t, std::span<const std::uint64_t> ids, std::span<float> out)>;

/// Function mode: when the invocation a step belongs to must have answered it.
struct invocation_deadline {
  std::chrono::steady_clock::time_point at;
  double seconds = 0;  ///< function.deadline_s, for the message
};

class external_process {
 public:
  /// Starts the script (`who` names it in messages and logs: "worker 1"). Errors: io_error
  /// when it cannot be started (the interpreter missing, no socket), naming the interpreter.
  static result<std::unique_ptr<external_process>> start(const script_options& opt,
                                                         std::string who);
  /// Kills and reaps a process still running; unmaps and removes the shared file.
  ~external_process();
  external_process(const external_process&) = delete;
  external_process& operator=(const external_process&) = delete;

  /// Waits for the process's `hello` (at most opt.start_timeout_s) and answers it. With
  /// `registered` null this is the job's first process: its layout is taken and its initial
  /// values are written into `initial`. Otherwise the layout must equal `registered`: a
  /// difference is refused (the process exits) and is the error (invalid_argument, one line).
  /// Errors: io_error when the process ended first (its exit status and last stderr lines) or
  /// did not say hello in time (naming the timeout); protocol_error for junk.
  result<external_layout> handshake(const external_layout* registered, std::vector<float>* initial);

  /// Step `step` of worker `rank` on the samples `indices`: `params` (layout.floats) handed
  /// over, the gradient of the sum of the samples' losses (and each buffer's value times the
  /// samples) written into `grad`. Errors as handshake's, and invalid_argument when the
  /// process said it failed (its message) or answered with other samples than asked;
  /// resource_exhausted when it ran out of memory (the script said so) or `deadline` passed
  /// first (the process is killed). How it ended: ended_as().
  /// With `rows` (a script with tables) the step's rows go in and their gradients come out
  /// through the rows region (external_rows.hpp).
  result<external_step> step(std::int64_t step, std::uint32_t rank, const float* params,
                             std::span<const std::uint32_t> indices, float* grad,
                             const invocation_deadline* deadline = nullptr,
                             const external_step_rows* rows = nullptr);

  /// A script with tables: the rows step `step`'s samples `indices` look up, per table,
  /// ascending and each once (`lookup`, answered by `ids`). Errors as step's, and
  /// invalid_argument for ids that are not ascending and unique or lie outside a table. With
  /// `deadline` (function mode) as step's.
  result<std::vector<std::vector<std::uint64_t>>> lookup(
      std::int64_t step, std::span<const std::uint32_t> indices,
      const invocation_deadline* deadline = nullptr);

  /// Runs the script's evaluation on `params`; the rows it asks for (`pull`) read from `rows`
  /// (none: a `pull` is an error). Errors as step's; unsupported when the script did not
  /// register an evaluation (test_samples 0).
  result<external_eval> evaluate(std::uint32_t epoch, const float* params,
                                 const external_row_source* rows = nullptr);

  /// Sends `stop`, waits up to `grace` for the process to end, then kills it.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(10)) noexcept;
  /// stop() in two halves, so that several processes end side by side: send `stop` ...
  void request_stop() noexcept;
  /// ... and wait until `until` for the process to end, then kill it.
  void finish_stop(std::chrono::steady_clock::time_point until) noexcept;
  /// SIGKILL now (a test's failing machine); the next call sees it dead.
  void kill() noexcept;

  pid_t pid() const noexcept { return pid_; }
  const std::string& who() const noexcept { return who_; }
  /// Names it anew (a warm process taken by worker 3).
  void rename(std::string who) { who_ = std::move(who); }
  const external_totals& totals() const noexcept { return totals_; }
  /// Whether handshake() succeeded and the process has not failed since.
  bool ready() const noexcept { return ready_; }
  /// How a process that failed ended (completed while it has not): timed_out (its deadline),
  /// out_of_memory (the script's MemoryError, exit code exit_out_of_memory, or the cgroup's OOM
  /// killer), killed (another signal) or failed.
  process_end ended_as() const noexcept { return end_; }
  /// Its largest memory use so far (memory_cap::peak_bytes).
  std::uint64_t peak_memory_bytes() const { return cap_.peak_bytes(); }

 private:
  external_process() = default;
  result<void> send(const std::string& line);
  /// The next line from the process; `deadline` bounds the wait (none: wait while it lives):
  /// when it passes the process is killed and the error's message is empty (timed_out_ set;
  /// the caller names the limit).
  result<std::string> receive(std::optional<std::chrono::steady_clock::time_point> deadline,
                              std::string_view during);
  /// Drains what stderr has, logging complete lines; false at its end.
  bool drain_stderr();
  /// The process ended (its socket closed) `during` something: reaps it and says how.
  error ended(std::string_view during);
  /// The error of a process that did not call init within its start timeout.
  error start_timed_out() const;
  /// Ends the process for `why` and returns it as the error.
  error refuse(error why);
  /// The error of `what` ("step 4", "step 4's lookup") not answered by `deadline` (the process
  /// was killed): resource_exhausted, so that function mode gives it to a fresh process.
  error missed(std::string_view what, const invocation_deadline* deadline) const;
  /// The script's `error` answer to `what`: resource_exhausted when its kind is "memory" (the
  /// process then counts as out of memory), else invalid_argument; the process is ended.
  error script_error(std::string_view kind, std::string_view message, std::string_view what);
  result<void> map_shared(std::size_t floats);
  /// The refusal of a line that is not what was due (`due`: "step 3's done").
  error junk(std::string_view line, std::string_view due);
  /// The step's rows written into the rows region; the JSON fields that tell the process where
  /// (",\"rows\":[...],..."). external_rows.cpp.
  result<std::string> put_step_rows(const external_step_rows& rows);
  /// The gradients of the step's rows out of the rows region.
  void take_row_grads(const external_step_rows& rows);
  /// Answers an evaluation's `pull` (JSON text) from `rows`. external_rows.cpp.
  result<void> answer_pull(std::string_view line, std::uint32_t epoch,
                           const external_row_source* rows);

  std::string who_;
  std::string script_name_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int sock_ = -1;
  int err_ = -1;
  std::string in_;  ///< bytes from the socket not yet returned as lines
  std::string err_buf_;
  std::deque<std::string> tail_;  ///< the last lines of its stderr
  std::chrono::milliseconds start_timeout_{120000};
  std::string shm_path_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  std::size_t floats_ = 0;
  std::uint64_t test_samples_ = 0;
  std::vector<external_table> tables_;  ///< the script's embedding tables
  shared_rows rows_;                    ///< their rows' region (external_rows.hpp)
  rows_placement placed_;               ///< where the step in progress put its rows
  bool ready_ = false;
  bool timed_out_ = false;  ///< a deadline of receive() passed
  process_end end_ = process_end::completed;
  memory_cap cap_;
  std::uint64_t memory_bytes_ = 0;  ///< its cap (0: none)
  external_totals totals_;
};

/// Where the `coach` Python package is: $COACH_PYTHON_PACKAGE when set; else python/ found
/// beside or above this program (a source tree's build) or share/coach/python of its prefix.
/// Errors: not_found naming the places looked at.
result<std::string> find_python_package();

/// The interpreter for scripts when none is named: $COACH_PYTHON, else /opt/coach-venv's
/// python where it exists, else python3.
std::string default_python();

}  // namespace coach::worker
