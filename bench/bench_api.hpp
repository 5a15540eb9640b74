#pragma once
// The job API as the benches use it: one request whose refusal is an error, a job's status, and
// a whole file read (the nodes' logs). Header-only; each bench is one program.

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "actors/api_client.hpp"
#include "common/error.hpp"

namespace coach::bench {

/// Sends `r` and waits up to `timeout`; the scheduler's refusal (api_reply::failure) comes back
/// as the error, as does no answer.
inline result<actors::api_reply> api_call(
    actors::api_client& api, const actors::api_request& r,
    std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto reply = api.call(r, timeout);
  if (!reply) return reply;
  if (reply->failure) return std::unexpected(*reply->failure);
  return reply;
}

/// What `coach status JOB` shows of `job`. Errors: as api_call; not_found when it is not listed.
inline result<actors::job_status> job_status_of(actors::api_client& api, std::uint64_t job) {
  auto r = api_call(api, actors::status_request{job});
  if (!r) return std::unexpected(r.error());
  const auto* st = std::get_if<actors::status_reply>(&r->body);
  if (!st || st->jobs.empty()) return fail(errc::not_found, "no job {}", job);
  return st->jobs.front();
}

/// The whole file (empty when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace coach::bench
