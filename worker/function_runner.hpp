#pragma once
// worker::function_runner: a function-mode worker's side of its invocations (invocation.hpp).
// It runs each step's task in the current coach-invocation child, starting one under the
// deadline and memory cap when none runs; a child that ends without answering (its deadline
// passed, it ran out of memory, it crashed) is counted, and the task goes to a fresh child. A
// child that answered its chunks_per_invocation tasks exits by itself and is counted completed.
// Nothing answered is lost, nothing is answered twice.
//
// A task that `max_attempts` invocations in a row fail (a cap too small for one step, a deadline
// shorter than one step) is an error naming the cause, instead of a loop without end.
//
// Not thread-safe: one per worker, called from its compute thread.

#include <cstdint>
#include <optional>
#include <string>

#include "worker/bounded_process.hpp"
#include "worker/invocation.hpp"
#include "worker/invocation_counts.hpp"

namespace coach::worker {

/// Where coach-invocation is: $COACH_INVOCATION when set, else beside this program, else in
/// ../apps from it (a build tree's tests). Errors: not_found naming the places looked at.
result<std::string> find_invocation_program();

/// Counts an invocation that ended as `e` (killed counts as failed); the peak and tasks aside.
void count_end(invocation_counts& c, process_end e) noexcept;

class function_runner {
 public:
  /// `program`: the coach-invocation binary; `tasks_per_invocation` >= 1.
  function_runner(std::string program, invocation_setup setup, process_limits limits,
                  std::uint32_t tasks_per_invocation, std::uint32_t max_attempts = 5);
  /// Lets the running child end (closes its input) and reaps it.
  ~function_runner();
  function_runner(const function_runner&) = delete;
  function_runner& operator=(const function_runner&) = delete;

  /// The answer to `task`. Errors: resource_exhausted when max_attempts invocations in a row
  /// ended without answering it (the message names how they ended and the limits); io_error
  /// when no child can be started.
  result<invocation_result> run(const invocation_task& task);

  const invocation_counts& counts() const noexcept { return counts_; }
  /// Test hook: kills the running child (as a failing machine would); the next run() notices.
  void kill_current() noexcept;

 private:
  result<void> start();
  /// Reaps the current child and counts how it ended.
  process_end finish();

  std::string program_;
  invocation_setup setup_;
  process_limits limits_;
  std::uint32_t per_invocation_;
  std::uint32_t max_attempts_;
  std::optional<bounded_process> child_;
  std::uint32_t answered_ = 0;  ///< by the current child
  invocation_counts counts_;
};

}  // namespace coach::worker
