#pragma once
// worker::external_pool: the processes of one job's script in this process. The first one
// registers the job's layout and initial values (register_first); every later one is checked
// against them. take() hands out a process that finished its handshake: one kept warm when
// there is one (its interpreter and framework loaded, its model built), else one started then.
// keep_warm(n) starts processes ahead, in the background, so that a worker joining mid-epoch
// pays a step, not an import.
//
// Thread-safe: workers and the evaluator take processes from their own threads.

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "worker/external_layout.hpp"
#include "worker/external_process.hpp"
#include "worker/model_config.hpp"
#include "worker/script_bundle.hpp"

namespace coach::worker {

class external_pool {
 public:
  explicit external_pool(script_options opt);
  /// Stops the processes kept, and waits for those being started.
  ~external_pool();
  external_pool(const external_pool&) = delete;
  external_pool& operator=(const external_pool&) = delete;

  /// Starts the job's first process and takes its layout and initial values (blocking); the
  /// process is kept for the first take(). Errors: the handshake's.
  result<void> register_first();
  /// Registers a layout and initial values known already (a job resumed, or started elsewhere).
  void register_known(external_layout layout, std::shared_ptr<const std::vector<float>> initial);
  const external_layout& layout() const noexcept { return layout_; }
  std::shared_ptr<const std::vector<float>> initial() const noexcept { return initial_; }
  const script_options& options() const noexcept { return opt_; }
  /// Keeps `folder` (the script's files on this host: a submitted job's) until the pool ends,
  /// after the processes it keeps are stopped.
  void keep(std::shared_ptr<const script_folder> folder) { folder_ = std::move(folder); }

  /// A process ready for steps, named `who`: a warm one, else one being started, else one
  /// started now; the registering process only where the script does not evaluate (it is kept
  /// for take_for_evaluation). Errors: the start's or the handshake's (a later process whose
  /// layout differs: one line naming the tensor).
  result<std::unique_ptr<external_process>> take(std::string who);
  /// As take(), but the registering process first: it is loaded already and idle while the
  /// workers' processes start.
  result<std::unique_ptr<external_process>> take_for_evaluation(std::string who);
  /// Starts `n` processes now, in the background (a job's first workers: in parallel).
  void prestart(std::size_t n);
  /// Keeps `n` processes started ahead from now on (started in the background), so that a
  /// worker that joins takes one that is ready.
  void keep_warm(std::size_t n);
  /// Processes kept ready now (tests, logs).
  std::size_t warm() const;
  /// Ends `p` in the background: sends `stop` (its steps() end) and waits for it to exit,
  /// killing it after 10 s. A function-mode invocation that answered its steps.
  void retire(std::unique_ptr<external_process> p);

 private:
  /// Starts processes until `warm_target_` are kept or starting (lock held).
  void top_up(std::unique_lock<std::mutex>& lock);
  /// Starts one process in the background, kept when ready (lock held).
  void start_in_background();
  /// Runs `fn` on a thread of its own, joined by the destructor or, once it ended, by the next
  /// call (lock held).
  void in_background(std::function<void()> fn);
  result<std::unique_ptr<external_process>> start_one(std::string who);

  std::shared_ptr<const script_folder> folder_;  ///< first: it goes after everything else
  script_options opt_;
  external_layout layout_;
  std::shared_ptr<const std::vector<float>> initial_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::unique_ptr<external_process> first_;  ///< the registering process, until taken
  std::vector<std::unique_ptr<external_process>> kept_;
  std::size_t starting_ = 0;
  std::set<pid_t> starting_pids_;  ///< started, their handshake not done
  std::size_t warm_target_ = 0;
  std::size_t promised_ = 0;  ///< prestarted processes whose takers have not come yet
  std::size_t started_ = 0;   ///< processes started so far (names them)
  bool stopping_ = false;
  std::vector<std::thread> threads_;
  std::vector<std::thread::id> finished_;  ///< threads_ that ended, to be joined
};

/// A script's model ready to run: a pool for `opt` whose first process registered the layout
/// and initial values (kept for the first take()). Errors: the first process's.
result<std::shared_ptr<const external_model>> start_script_model(script_options opt);

/// The options a job's script runs with: its path, arguments and timeout from the spec, the
/// job's seed, `python` (empty: default_python()), and `threads` for each process's framework
/// (0: not set). Errors: not_found when the script or the `coach` package cannot be found,
/// invalid_argument when the script is a directory.
result<script_options> script_options_for(const script_config& script, std::uint64_t seed,
                                          std::uint64_t job, std::string python, int threads);

}  // namespace coach::worker
