#pragma once
// What the studies of `coach experiment` (apps/coach_experiment.hpp) share: coach-nodes started
// on this machine for a study, the study's connection to the scheduler, and its output.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "actors/api_client.hpp"
#include "common/error.hpp"

namespace coach::apps::experiment {

namespace fs = std::filesystem;

/// A line of progress on stderr ("coach: experiment: ...").
void say(const std::string& line);

/// A free TCP port on 127.0.0.1 (bound once by the kernel's choice, then released).
int free_port();

/// coach-nodes started for the study on this machine, stopped when it ends.
class local_cluster {
 public:
  local_cluster() = default;
  local_cluster(const local_cluster&) = delete;
  local_cluster& operator=(const local_cluster&) = delete;
  ~local_cluster();

  /// Starts `n` nodes of `cpus` CPU slots each, the first the scheduler; logs in `dir`. With
  /// `key_file`, the nodes use it (else they read $COACH_KEY as any coach-node does).
  result<std::string> start(int n, int cpus, const fs::path& dir, const std::string& key_file,
                            const std::vector<std::string>& scheduler_args = {});

 private:
  std::vector<pid_t> pids_;
};

/// Whether job `st` has ended: false while it is queued, running or suspended, true once it
/// succeeded, an error naming it when it ended otherwise (a study needs every job).
result<bool> ended(const actors::job_status& st);

/// The study's connection to the scheduler.
class session {
 public:
  /// A session whose jobs' relative paths resolve against `spec_dir` (the --spec file's folder).
  static result<session> open(const std::string& at, actors::transport_security security,
                              std::string spec_dir);
  /// Waits (up to 60 s) until `n` nodes are alive.
  result<void> await_nodes(std::size_t n);
  result<std::uint64_t> submit(const std::string& yaml, const std::string& name);
  result<actors::job_status> status(std::uint64_t job);
  /// The CPUs programs that are not Coach's keep busy on the first node listed.
  result<double> cpus_external();
  result<void> set_policy(const std::string& name);
  /// Waits for every job of `jobs` to end; errors when one does not succeed.
  result<std::vector<actors::job_status>> wait_all(const std::vector<std::uint64_t>& jobs);
  /// Removes the jobs this session submitted from the cluster's list (forget_request), once
  /// the study is over, so that a cluster given with --at keeps no trace of them; a job that has
  /// not ended is left and named. Says how many it removed.
  void forget_jobs();

 private:
  std::unique_ptr<actors::api_client> client_;
  std::string at_;
  std::string spec_dir_;
  std::vector<std::uint64_t> submitted_;
};

/// Writes a study's table or chart to `p`, and says so.
void write(const fs::path& p, const std::string& text);

}  // namespace coach::apps::experiment
