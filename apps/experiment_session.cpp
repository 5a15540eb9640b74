// What the studies of `coach experiment` share (apps/experiment_session.hpp).
#include "apps/experiment_session.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>
#include <variant>

#include "common/format.hpp"

extern char** environ;

namespace coach::apps::experiment {

using namespace std::chrono_literals;

void say(const std::string& line) {
  std::fprintf(stderr, "coach: experiment: %s\n", line.c_str());
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

local_cluster::~local_cluster() {
  for (pid_t p : pids_) ::kill(p, SIGTERM);
  for (pid_t p : pids_) ::waitpid(p, nullptr, 0);
}

result<std::string> local_cluster::start(int n, int cpus, const fs::path& dir,
                                         const std::string& key_file,
                                         const std::vector<std::string>& scheduler_args) {
  std::error_code ec;
  const auto self = fs::read_symlink("/proc/self/exe", ec);
  const auto node = self.parent_path() / "coach-node";
  if (ec || !fs::exists(node))
    return fail(
        errc::not_found,
        "cannot find coach-node beside this program ({}): ./scripts/setup.sh --all builds it",
        node.string());
  const std::string at = coach::format("127.0.0.1:{}", free_port());
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> args{
        node.string(), "--exit-with-parent",
        "--listen",    i == 0 ? "tcp://" + at : coach::format("tcp://127.0.0.1:{}", free_port()),
        "--name",      coach::format("exp-{}", i + 1),
        "--cpus",      std::to_string(cpus),
        "--heartbeat", "0.25",
        "--log-file",  (dir / coach::format("node-{}.log", i + 1)).string()};
    if (!key_file.empty()) {
      args.push_back("--key");
      args.push_back(key_file);
    }
    if (i == 0) {
      for (const char* a : {"--scheduler", "--store", "", "--policy", "fifo"}) args.push_back(a);
      args.insert(args.end(), scheduler_args.begin(), scheduler_args.end());
    } else {
      args.push_back("--join");
      args.push_back(at);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0)
      return fail(errc::io_error, "cannot start {}", node.string());
    pids_.push_back(pid);
  }
  return at;
}

result<bool> ended(const actors::job_status& st) {
  using scheduler::job_state;
  if (st.state == job_state::running || st.state == job_state::queued ||
      st.state == job_state::suspended)
    return false;
  if (st.state != job_state::succeeded)
    return fail(errc::io_error, "job {} '{}' {}: {}", st.job, st.name, to_string(st.state),
                st.error);
  return true;
}

result<session> session::open(const std::string& at, actors::transport_security security,
                              std::string spec_dir) {
  auto c = actors::api_client::open(at, std::move(security));
  if (!c) return std::unexpected(c.error());
  session s;
  s.client_ = std::move(*c);
  s.at_ = at;
  s.spec_dir_ = std::move(spec_dir);
  return s;
}

result<void> session::await_nodes(std::size_t n) {
  for (int i = 0; i < 240; ++i) {
    auto r = client_->call(actors::nodes_request{}, 2s);
    if (r && !r->failure)
      if (const auto* nodes = std::get_if<actors::nodes_reply>(&r->body)) {
        std::size_t alive = 0;
        for (const auto& node : nodes->nodes) alive += node.alive;
        if (alive >= n) return {};
      }
    std::this_thread::sleep_for(250ms);
  }
  return fail(errc::io_error, "{} node(s) did not come up at {} within 60 s", n, at_);
}

result<std::uint64_t> session::submit(const std::string& yaml, const std::string& name) {
  actors::submit_request req;
  req.spec_yaml = yaml;
  req.source_name = name + ".yaml";
  req.base_dir = spec_dir_;  // as coach submit sends it: the spec's folder
  req.token = std::random_device{}() * 0x100000000ull + std::random_device{}() + 1;
  auto r = client_->call(req, 120s, 2s);
  if (!r) return std::unexpected(r.error());
  if (r->failure) return std::unexpected(*r->failure);
  const auto* sub = std::get_if<actors::submit_reply>(&r->body);
  if (!sub) return fail(errc::protocol_error, "the scheduler's reply has no job id");
  submitted_.push_back(sub->job);
  return sub->job;
}

result<actors::job_status> session::status(std::uint64_t job) {
  auto r = client_->call(actors::status_request{job}, 10s, 2s);
  if (!r) return std::unexpected(r.error());
  if (r->failure) return std::unexpected(*r->failure);
  const auto* st = std::get_if<actors::status_reply>(&r->body);
  if (!st || st->jobs.size() != 1) return fail(errc::protocol_error, "no status of job {}", job);
  return st->jobs.front();
}

result<double> session::cpus_external() {
  auto r = client_->call(actors::nodes_request{}, 5s);
  if (!r) return std::unexpected(r.error());
  if (r->failure) return std::unexpected(*r->failure);
  const auto* nodes = std::get_if<actors::nodes_reply>(&r->body);
  if (!nodes || nodes->nodes.empty()) return fail(errc::protocol_error, "no node listed");
  return nodes->nodes.front().last.resources.cpus_external;
}

result<void> session::set_policy(const std::string& name) {
  actors::policy_request req;
  req.set = name;
  auto r = client_->call(req, 10s);
  if (!r) return std::unexpected(r.error());
  if (r->failure) return std::unexpected(*r->failure);
  return {};
}

result<std::vector<actors::job_status>> session::wait_all(const std::vector<std::uint64_t>& jobs) {
  std::vector<actors::job_status> out(jobs.size());
  std::vector<bool> done(jobs.size(), false);
  for (std::size_t left = jobs.size(); left > 0;) {
    std::this_thread::sleep_for(250ms);
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      if (done[i]) continue;
      auto st = status(jobs[i]);
      if (!st) return std::unexpected(st.error());
      auto over = ended(*st);
      if (!over) return std::unexpected(over.error());
      if (!*over) continue;
      out[i] = std::move(*st);
      done[i] = true;
      --left;
    }
  }
  return out;
}

void session::forget_jobs() {
  std::size_t removed = 0;
  for (const std::uint64_t job : submitted_) {
    // A job that has not ended (a study that failed on another) stays, said.
    if (auto st = status(job); st && !ended(*st).value_or(true)) {
      say(coach::format("job {} left in the cluster's list: it is {}", job, to_string(st->state)));
      continue;
    }
    // Refused while its parts still stop (a job suspended, then ended): asked again a while.
    result<void> done = fail(errc::invalid_argument, "not tried");
    for (int i = 0; i < 40; ++i) {
      auto r = client_->call(actors::forget_request{job}, 5s);
      if (!r) {
        done = std::unexpected(r.error());
        break;
      }
      if (!r->failure) {
        done = {};
        break;
      }
      done = std::unexpected(*r->failure);
      if (r->failure->code != errc::invalid_argument) break;
      std::this_thread::sleep_for(250ms);
    }
    if (done)
      ++removed;
    else
      say(coach::format("job {} left in the cluster's list: {}", job, done.error().message));
  }
  if (!submitted_.empty())
    say(coach::format("{} of its {} job(s) removed from the cluster's list", removed,
                      submitted_.size()));
  submitted_.clear();
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
  say("wrote " + p.string());
}

}  // namespace coach::apps::experiment
