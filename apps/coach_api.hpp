#pragma once
// apps/coach_api.hpp: the job API commands of the `coach` CLI. Each talks to the scheduler at
// `at` (coach-node --scheduler's address) and returns the process exit code: 0 success; 1 the
// job failed or the scheduler could not be reached; 2 bad input (spec, flags, unknown job);
// 3 not authorized (the node refused this client's key); 130 cancelled (or, for submit --wait,
// Ctrl-C: the job keeps running).

#include <cstdint>
#include <memory>
#include <string>

#include "actors/curve_keys.hpp"
#include "common/error.hpp"
#include "worker/script_job.hpp"

namespace coach::apps {

/// The exit code of a failure (docs/errors.md), after its one line on stderr ("coach: ...").
int report_error(const coach::error& e);

/// The key every later command authenticates with (actors/curve_keys.hpp, load_security).
void use_security(actors::transport_security security);

/// `at`, or the COACH_SCHEDULER environment variable when `at` is empty.
std::string resolve_at(const std::string& at);

/// Checks `at` ("tcp://HOST:PORT" or "HOST:PORT"), that its name resolves and that a node
/// accepts this client's connection there within 2 s (actors::api_client::reach). Returns 0
/// with `at` in its tcp:// form, or the exit code after one line on stderr: 2 a malformed
/// address or a name not found, 1 refused or no connection, 3 not authorized.
int reach_scheduler(std::string& at);

/// Closes the connection reach_scheduler opened if no command took it. Call before main
/// returns: the client's sockets and I/O thread must end before the process's static objects
/// do (left to static destruction, they crashed the process: `free(): corrupted unsorted
/// chunks` after a command that failed before its request, issue 37).
void release_scheduler() noexcept;

/// Checks what submit and rescale can check without the scheduler: the spec file readable,
/// a rescale's counts given. 0, or the exit code after one line on stderr.
int check_submit(const std::string& spec_path);
int check_rescale(std::uint32_t workers, std::uint32_t shards);

/// What `coach submit` sends: the spec as read, and a script's model registered here.
struct submit_input {
  std::string spec_yaml;
  std::string source_name;                               ///< the spec's path, as given
  std::string base_dir;                                  ///< the spec file's folder
  std::shared_ptr<const worker::script_payload> script;  ///< null: not a script's model
};

/// Reads the spec; for a script's model (model: {script: ...}), registers it here, before the
/// scheduler is asked anything (apps/coach_submit.cpp): the files of the script's folder packed
/// (at most worker::max_bundle_bytes), its first process run with `python` (empty: the
/// default), its layout and initial values taken, the process stopped. 0, or the exit code
/// after one line on stderr: 2 bad input (a folder over the limit), 1 the script failed (its
/// stderr lines logged before).
int prepare_submit(const std::string& spec_path, const std::string& python, submit_input& out);

int run_submit(const std::string& at, const submit_input& in, std::uint32_t workers,
               std::uint32_t shards, bool wait, bool json);
int run_status(const std::string& at, std::uint64_t job, bool json);
int run_nodes(const std::string& at, bool json);
int run_cancel(const std::string& at, std::uint64_t job, bool json);
/// Asks for `workers` workers and/or `shards` shards (0: unchanged) from the job's next step on;
/// the scheduler holds those counts against its policies until released. `release`: releases
/// them instead (no counts).
int run_rescale(const std::string& at, std::uint64_t job, std::uint32_t workers,
                std::uint32_t shards, bool release, bool json);
/// Asks to move every slice of shard `shard` to a new shard on node `node`, pinned there until
/// released; `release`: unpins shard `shard` instead (no node).
int run_migrate(const std::string& at, std::uint64_t job, std::uint32_t shard,
                const std::string& node, bool release, bool json);
/// coach logs JOB [-f]: the job's history (what the scheduler said of it, its epochs); with
/// `follow`, new lines as they come until the job ends (Ctrl-C: 130).
int run_logs(const std::string& at, std::uint64_t job, bool follow, bool json);
/// coach policy get (name empty) | coach policy set NAME: prints the policy in force.
int run_policy(const std::string& at, const std::string& set, bool json);

}  // namespace coach::apps
