// The job API commands of `coach`: submit, status, nodes, cancel, rescale, migrate, policy
// (apps/coach_api.hpp).

#include "coach_api.hpp"

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "actors/address.hpp"
#include "actors/api_client.hpp"
#include "common/json.hpp"
#include "report/job_report.hpp"

namespace coach::apps {
namespace {

using actors::job_state;

std::atomic<bool> g_stop_wait{false};
/// The CLI's key, if any (use_security): one per process, set before any command runs.
actors::transport_security g_security;
extern "C" void on_wait_signal(int) {
  if (g_stop_wait.exchange(true)) std::_Exit(130);
}

int exit_code_of(const coach::error& e) {
  switch (e.code) {
    case errc::invalid_argument:
    case errc::parse_error:
    case errc::not_found:
      return 2;
    case errc::cancelled:
      return 130;
    case errc::not_authorized:
      return 3;
    default:
      return 1;
  }
}

}  // namespace

int report_error(const coach::error& e) {
  std::fprintf(stderr, "coach: %s\n", e.message.c_str());
  return exit_code_of(e);
}

namespace {

std::uint64_t cross_host_bytes(const actors::job_status& s) {
  std::uint64_t n = 0;
  for (const auto& l : s.traffic)
    if (l.src_host != l.dst_host) n += l.bytes;
  return n;
}

json to_json(const actors::job_status& s) {
  json out{{"job", s.job},
           {"name", s.name},
           {"state", to_string(s.state)},
           {"epochs_done", s.epochs_done},
           {"epochs_total", s.epochs_total},
           {"test_accuracy", json_figure(s.test_accuracy)},
           {"samples_per_s", json_figure(s.samples_per_second)},
           {"loss", json_figure(s.loss)},
           {"samples_done", s.samples_done},
           {"samples_per_epoch", s.samples_epoch},
           {"workers", s.workers},
           {"shards", s.shards},
           {"worker_nodes", s.worker_nodes},
           {"shard_nodes", s.shard_nodes},
           {"shard_ids", s.shard_ids},
           {"orders", s.orders},
           {"epoch_samples", s.epoch_samples}};
  json secs = json::array();
  for (double x : s.epoch_seconds) secs.push_back(json_figure(x));
  out["epoch_seconds"] = std::move(secs);
  json acc = json::array();
  for (double x : s.epoch_accuracy) acc.push_back(json_figure(x));
  out["epoch_accuracy"] = std::move(acc);
  json changes = json::array();
  for (const auto& c : s.changes) changes.push_back(scheduler::to_json_value(c));
  out["changes"] = std::move(changes);
  out["seconds"] = json_figure(s.seconds);
  out["error"] = s.error;
  out["error_code"] = s.error_code;
  out["resumes"] = s.resumes;
  out["changes_done"] = s.changes_done;
  out["placement"] = s.placement;
  out["aggregation_degree"] = json_figure(s.aggregation_degree);
  out["recoveries"] = s.recoveries_lost_s.size();
  json lost = json::array();
  for (double x : s.recoveries_lost_s) lost.push_back(json_figure(x));
  out["recoveries_lost_s"] = std::move(lost);
  out["failovers"] = s.failovers;
  if (s.invocations) out["invocations"] = scheduler::to_json_value(*s.invocations);
  // The scheduler sends its model's figures for one job's status as JSON text.
  if (!s.model_json.empty()) {
    auto model = json::parse(s.model_json, nullptr, false);
    if (!model.is_discarded()) out["model"] = std::move(model);
  }
  out["waiting"] = s.waiting;
  out["traffic_final"] = s.traffic_final;
  out["cross_host_bytes"] = cross_host_bytes(s);
  json traffic = json::array();
  for (const auto& l : s.traffic)
    traffic.push_back(json{{"src_host", l.src_host},
                           {"dst_host", l.dst_host},
                           {"messages", l.messages},
                           {"bytes", l.bytes}});
  out["traffic"] = std::move(traffic);
  return out;
}

json to_json(const actors::node_status& n) {
  const auto& hb = n.last;
  const auto& r = hb.resources;
  json held = json::array();
  for (const auto& g : r.gpus_held)
    held.push_back(json{{"job", g.job}, {"rank", g.rank}, {"gpu", g.device}, {"own", g.own}});
  return json{{"name", hb.name},
              {"host", hb.host},
              {"address", hb.address},
              {"alive", n.alive},
              {"draining", hb.draining},
              {"seconds_since_heartbeat", json_figure(n.seconds_since)},
              {"cpus_total", r.cpus_total},
              {"cpus_free", json_figure(r.cpus_free)},
              {"cpus_external", json_figure(r.cpus_external)},
              {"memory_total", r.memory_total},
              {"memory_free", r.memory_free},
              {"gpus_total", r.gpus_total},
              {"gpus_free", r.gpus_free},
              {"gpus_held", std::move(held)},
              {"load1", json_figure(r.load1)},
              {"actors_running", hb.actors_running}};
}

/// One JSON document on its own line of stdout.
void print_json(const json& j) {
  std::printf("%s\n", j.dump().c_str());
}

std::string human_bytes(std::uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

void print_status_table(const std::vector<actors::job_status>& jobs) {
  std::printf("%-5s %-20s %-10s %-7s %-9s %-11s %-8s %-7s %-10s %s\n", "JOB", "NAME", "STATE",
              "EPOCH", "ACCURACY", "SAMPLES/S", "WORKERS", "SHARDS", "PLACEMENT", "CROSS-HOST");
  for (const auto& s : jobs) {
    const std::string acc =
        std::isnan(s.test_accuracy) ? "-" : coach::format("{:.4f}", s.test_accuracy);
    std::printf("%-5llu %-20s %-10s %3u/%-3u %-9s %-11.0f %-8u %-7u %-10s %s\n",
                static_cast<unsigned long long>(s.job), s.name.c_str(),
                std::string(to_string(s.state)).c_str(), s.epochs_done, s.epochs_total, acc.c_str(),
                s.samples_per_second, s.workers, s.shards,
                s.placement.empty() ? "-" : s.placement.c_str(),
                human_bytes(cross_host_bytes(s)).c_str());
    if (const auto& i = s.invocations)
      std::printf(
          "      invocations: %llu started, %llu completed, %llu timed out, %llu out of "
          "memory, %llu failed; peak %s\n",
          static_cast<unsigned long long>(i->started),
          static_cast<unsigned long long>(i->completed),
          static_cast<unsigned long long>(i->timed_out),
          static_cast<unsigned long long>(i->out_of_memory),
          static_cast<unsigned long long>(i->failed), human_bytes(i->peak_memory_bytes).c_str());
    if (!s.recoveries_lost_s.empty()) {
      std::string each;
      for (std::size_t i = 0; i < s.recoveries_lost_s.size(); ++i)
        each += coach::format("{}{:.1f} s", i ? ", " : "", s.recoveries_lost_s[i]);
      std::printf("      recoveries: %zu after lost nodes (work lost: %s)\n",
                  s.recoveries_lost_s.size(), each.c_str());
    }
    if (!s.waiting.empty()) std::printf("      waiting: %s\n", s.waiting.c_str());
    if (s.failovers > 0)
      std::printf("      failovers: %u shard(s) taken over by their backups, no work lost\n",
                  s.failovers);
    if (!s.error.empty()) std::printf("      error: %s\n", s.error.c_str());
  }
}

/// The client reach_scheduler connected, kept for the command's request (one connection and
/// one handshake a command).
std::unique_ptr<actors::api_client> g_client;
std::string g_client_at;

/// A client of the scheduler at `at`: the one reach_scheduler opened, else a new one.
result<std::unique_ptr<actors::api_client>> client_for(const std::string& at) {
  if (g_client && g_client_at == at) return std::move(g_client);
  return actors::api_client::open(at, g_security);
}

result<actors::api_reply> call(const std::string& at, const actors::api_request& req) {
  auto client = client_for(at);
  if (!client) return std::unexpected(client.error());
  return (*client)->call(req);
}

bool terminal(job_state s) {
  return s == job_state::succeeded || s == job_state::failed || s == job_state::cancelled;
}

int wait_for(actors::api_client& client, std::uint64_t job, bool json) {
  const bool tty = isatty(STDERR_FILENO);
  std::signal(SIGINT, on_wait_signal);
  std::signal(SIGTERM, on_wait_signal);
  std::uint32_t last_epoch = 0;
  // While the job waits: why, a line each time the reason changes, at most every 5 s (free
  // CPUs measured on a busy host change with every heartbeat).
  const auto since = std::chrono::steady_clock::now();
  std::string said;
  std::optional<std::chrono::steady_clock::time_point> said_at;
  int misses = 0;
  int unsettled = 0;  // polls of an ended job whose nodes have not all reported its last bytes
  for (;;) {
    if (g_stop_wait.load()) {
      if (tty) std::fprintf(stderr, "\r\033[K");
      std::fprintf(stderr,
                   "coach: stopped waiting; job %llu keeps running (coach cancel %llu stops it)\n",
                   static_cast<unsigned long long>(job), static_cast<unsigned long long>(job));
      return 130;
    }
    auto reply = client.call(actors::status_request{job}, std::chrono::seconds(5));
    if (!reply || reply->failure) {
      // The scheduler may be busy (loading a data set): give it a few tries.
      if (!reply && reply.error().code == errc::not_authorized) return report_error(reply.error());
      if (++misses >= 6) return report_error(reply ? *reply->failure : reply.error());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    misses = 0;
    const auto* st = std::get_if<actors::status_reply>(&reply->body);
    if (!st || st->jobs.size() != 1)
      return report_error({errc::protocol_error, "the scheduler's status reply has no job"});
    const auto& s = st->jobs.front();
    if (s.epochs_done > last_epoch && !std::isnan(s.test_accuracy)) {
      if (tty) std::fprintf(stderr, "\r\033[K");
      std::fprintf(stderr, "epoch %u/%u  test accuracy %.4f  %.0f samples/s\n", s.epochs_done,
                   s.epochs_total, s.test_accuracy, s.samples_per_second);
      last_epoch = s.epochs_done;
    }
    // Ended: its figures once every node has reported the job's last bytes (within
    // milliseconds of the end; a node lost meanwhile never does: 5 s at most).
    if (terminal(s.state) && !s.traffic_final && ++unsettled <= 50) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (terminal(s.state)) {
      if (tty) std::fprintf(stderr, "\r\033[K");
      if (json) print_json(to_json(s));
      if (s.state == job_state::succeeded) {
        std::fprintf(stderr,
                     "coach: job %llu '%s' succeeded: test accuracy %.4f after %u epoch(s) in "
                     "%.1f s, %s between hosts\n",
                     static_cast<unsigned long long>(s.job), s.name.c_str(), s.test_accuracy,
                     s.epochs_done, s.seconds, human_bytes(cross_host_bytes(s)).c_str());
        return 0;
      }
      std::fprintf(stderr, "coach: job %llu '%s' %s: %s\n", static_cast<unsigned long long>(s.job),
                   s.name.c_str(), std::string(to_string(s.state)).c_str(), s.error.c_str());
      return s.state == job_state::cancelled ? 130 : 1;
    }
    if (!s.waiting.empty() && s.waiting != said &&
        (!said_at || std::chrono::steady_clock::now() - *said_at >= std::chrono::seconds(5))) {
      if (tty) std::fprintf(stderr, "\r\033[K");
      const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - since;
      std::fprintf(stderr, "coach: job %llu %s for %.0f s: %s\n",
                   static_cast<unsigned long long>(s.job), std::string(to_string(s.state)).c_str(),
                   waited.count(), s.waiting.c_str());
      said = s.waiting;
      said_at = std::chrono::steady_clock::now();
    }
    if (tty) {
      const double frac = s.samples_epoch ? double(s.samples_done) / double(s.samples_epoch) : 0.0;
      std::fprintf(stderr, "\rjob %llu %s  epoch %u/%u  %3.0f%%  %8.0f samples/s  loss %.4f",
                   static_cast<unsigned long long>(s.job), std::string(to_string(s.state)).c_str(),
                   std::min(s.epochs_done + 1, s.epochs_total), s.epochs_total, frac * 100.0,
                   s.samples_per_second, s.loss);
      std::fflush(stderr);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace

void use_security(actors::transport_security security) {
  g_security = std::move(security);
}

int reach_scheduler(std::string& at) {
  auto address = actors::tcp_address(at);
  if (!address) return report_error(address.error());
  if (auto ok = actors::resolve_address(*address); !ok) return report_error(ok.error());
  auto client = actors::api_client::open(*address, g_security);
  if (!client) return report_error(client.error());
  // A scheduler's host under load (hundreds of clients at once) may take seconds to complete a
  // connection's handshake: waited for, said after 2 s on a terminal.
  auto slow = [&] {
    if (::isatty(STDERR_FILENO))
      std::fprintf(stderr, "coach: waiting for a connection to %s (a busy scheduler host?)...\n",
                   address->c_str());
  };
  if (auto ok = (*client)->reach(std::chrono::seconds(20), slow); !ok)
    return report_error(ok.error());
  g_client = std::move(*client);
  g_client_at = *address;
  at = std::move(*address);
  return 0;
}

void release_scheduler() noexcept {
  g_client.reset();
  g_client_at.clear();
}

int check_submit(const std::string& spec_path) {
  std::ifstream in(spec_path);
  if (!in) return report_error({errc::not_found, spec_path + ": job spec file not found"});
  // A request is one control message, at most 16 MiB with its header: a larger spec would be
  // dropped by the scheduler unread, and the command would wait for an answer (issue 37).
  constexpr std::uintmax_t most = (std::uintmax_t{16} << 20) - (std::uintmax_t{64} << 10);
  std::error_code ec;
  const auto size = std::filesystem::file_size(spec_path, ec);
  if (!ec && size > most)
    return report_error(
        {errc::invalid_argument,
         coach::format("{}: the spec is {:.1f} MiB; a scheduler takes specs of at most {:.1f} "
                       "MiB (a data set goes in a file the spec names, not in the spec)",
                       spec_path, double(size) / (1 << 20), double(most) / (1 << 20))});
  return 0;
}

int check_rescale(std::uint32_t workers, std::uint32_t shards) {
  if (workers != 0 || shards != 0) return 0;
  return report_error({errc::invalid_argument, "rescale: give --workers N and/or --shards M"});
}

std::string resolve_at(const std::string& at) {
  if (!at.empty()) return at;
  const char* env = std::getenv("COACH_SCHEDULER");
  return env ? env : "";
}

int run_submit(const std::string& at, const submit_input& in, std::uint32_t workers,
               std::uint32_t shards, bool wait, bool json) {
  actors::submit_request req;
  req.spec_yaml = in.spec_yaml;
  req.source_name = in.source_name;
  req.base_dir = in.base_dir;
  req.script = in.script;
  req.workers = workers;
  req.shards = shards;
  // The token makes the request safe to send again: a scheduler that stored the job and
  // restarted before answering answers the repeat with that job's id.
  do req.token = std::random_device{}() * 0x100000000ull + std::random_device{}();
  while (req.token == 0);
  auto client = client_for(at);
  if (!client) return report_error(client.error());
  // Submitting loads the data set on the scheduler: allow it time. Sent again every 2 s without
  // an answer (a scheduler restarting drops what comes while it starts).
  auto reply = (*client)->call(req, std::chrono::seconds(120), std::chrono::seconds(2));
  if (!reply && reply.error().code == errc::io_error) {
    // A scheduler that never came back within the timeout may still have stored the job.
    auto e = reply.error();
    e.message += coach::format(
        "; the job may have been submitted all the same: `coach status --at {}` lists every "
        "job (look before submitting again)",
        at);
    return report_error(e);
  }
  if (!reply) return report_error(reply.error());
  if (reply->failure) return report_error(*reply->failure);
  const auto* sub = std::get_if<actors::submit_reply>(&reply->body);
  if (!sub) return report_error({errc::protocol_error, "the scheduler's reply has no job id"});
  if (!wait) {
    if (json)
      print_json({{"job", sub->job}});
    else
      std::printf("%llu\n", static_cast<unsigned long long>(sub->job));
    return 0;
  }
  std::fprintf(stderr, "coach: job %llu submitted to %s\n",
               static_cast<unsigned long long>(sub->job), at.c_str());
  return wait_for(**client, sub->job, json);
}

int run_status(const std::string& at, std::uint64_t job, bool json) {
  auto reply = call(at, actors::status_request{job});
  if (!reply) return report_error(reply.error());
  if (reply->failure) return report_error(*reply->failure);
  const auto* st = std::get_if<actors::status_reply>(&reply->body);
  if (!st) return report_error({errc::protocol_error, "the scheduler's reply is not a status"});
  if (json) {
    coach::json jobs = coach::json::array();
    for (const auto& s : st->jobs) jobs.push_back(to_json(s));
    print_json({{"jobs", std::move(jobs)}});
  } else {
    print_status_table(st->jobs);
    // The user's orders that hold until released (coach migrate, coach rescale).
    for (const auto& s : st->jobs)
      for (const auto& o : s.orders)
        std::printf("job %llu: %s\n", static_cast<unsigned long long>(s.job), o.c_str());
  }
  return 0;
}

int run_nodes(const std::string& at, bool json) {
  auto reply = call(at, actors::nodes_request{});
  if (!reply) return report_error(reply.error());
  if (reply->failure) return report_error(*reply->failure);
  const auto* nodes = std::get_if<actors::nodes_reply>(&reply->body);
  if (!nodes) return report_error({errc::protocol_error, "the scheduler's reply is not a list"});
  if (json) {
    coach::json all = coach::json::array();
    for (const auto& n : nodes->nodes) all.push_back(to_json(n));
    print_json({{"nodes", std::move(all)}});
    return 0;
  }
  std::printf("%-16s %-26s %-9s %-11s %-7s %-19s %-6s %-7s %s\n", "NAME", "ADDRESS", "STATE",
              "CPUS FREE", "OTHERS", "MEMORY FREE", "GPUS", "ACTORS", "SEEN");
  for (const auto& n : nodes->nodes) {
    const auto& r = n.last.resources;
    const char* state = !n.alive ? "dead" : n.last.draining ? "draining" : "alive";
    std::printf("%-16s %-26s %-9s %4.1f/%-6u %-7.1f %8s/%-10s %zu/%-4zu %-7u %.1f s ago\n",
                n.last.name.c_str(), n.last.address.c_str(), state, r.cpus_free, r.cpus_total,
                r.cpus_external, human_bytes(r.memory_free).c_str(),
                human_bytes(r.memory_total).c_str(), r.gpus_free.size(), r.gpus_total.size(),
                n.last.actors_running, n.seconds_since);
  }
  return 0;
}

int run_cancel(const std::string& at, std::uint64_t job, bool json) {
  auto reply = call(at, actors::cancel_request{job});
  if (!reply) return report_error(reply.error());
  if (reply->failure) return report_error(*reply->failure);
  if (json)
    print_json({{"job", job}, {"cancelling", true}});
  else
    std::fprintf(stderr, "coach: job %llu is being cancelled\n",
                 static_cast<unsigned long long>(job));
  return 0;
}

int run_rescale(const std::string& at, std::uint64_t job, std::uint32_t workers,
                std::uint32_t shards, bool release, bool json) {
  if (release) {
    auto reply = call(at, actors::rescale_request{job, 0, 0, true});
    if (!reply) return report_error(reply.error());
    if (reply->failure) return report_error(*reply->failure);
    if (json)
      print_json({{"job", job}, {"released", true}});
    else
      std::fprintf(stderr, "coach: job %llu: its counts are released; the policies size it again\n",
                   static_cast<unsigned long long>(job));
    return 0;
  }
  if (workers == 0 && shards == 0)
    return report_error({errc::invalid_argument, "rescale: give --workers N and/or --shards M"});
  auto reply = call(at, actors::rescale_request{job, workers, shards});
  if (!reply) return report_error(reply.error());
  if (reply->failure) return report_error(*reply->failure);
  if (json) {
    print_json({{"job", job}, {"workers", workers}, {"shards", shards}, {"accepted", true}});
  } else {
    std::string what;
    if (workers) what += coach::format("{} worker(s)", workers);
    if (shards) what += coach::format("{}{} shard(s)", what.empty() ? "" : " and ", shards);
    std::fprintf(stderr,
                 "coach: job %llu goes to %s at its next step; held until `coach rescale %llu "
                 "--release`\n",
                 static_cast<unsigned long long>(job), what.c_str(),
                 static_cast<unsigned long long>(job));
  }
  return 0;
}

int run_migrate(const std::string& at, std::uint64_t job, std::uint32_t shard,
                const std::string& node, bool release, bool json) {
  auto reply = call(at, actors::migrate_request{job, shard, release ? "" : node, release});
  if (!reply) return report_error(reply.error());
  if (reply->failure) return report_error(*reply->failure);
  if (release) {
    if (json)
      print_json({{"job", job}, {"shard", shard}, {"released", true}});
    else
      std::fprintf(stderr, "coach: job %llu: shard %u is unpinned; the rebalancer may move it\n",
                   static_cast<unsigned long long>(job), shard);
    return 0;
  }
  if (json)
    print_json({{"job", job}, {"shard", shard}, {"to", node}, {"accepted", true}});
  else
    std::fprintf(stderr,
                 "coach: job %llu: shard %u moves to node '%s' at the next step; pinned there "
                 "until `coach migrate %llu --shard ID --release` (coach status %llu lists it)\n",
                 static_cast<unsigned long long>(job), shard, node.c_str(),
                 static_cast<unsigned long long>(job), static_cast<unsigned long long>(job));
  return 0;
}

int run_logs(const std::string& at, std::uint64_t job, bool follow, bool json) {
  auto client = client_for(at);
  if (!client) return report_error(client.error());
  std::signal(SIGINT, on_wait_signal);
  std::signal(SIGTERM, on_wait_signal);
  std::uint64_t after = 0;
  int misses = 0;
  for (;;) {
    auto reply = (*client)->call(actors::logs_request{job, after}, std::chrono::seconds(5));
    if (!reply) {
      // The scheduler may be restarting: a follower tries a few times.
      if (!follow || reply.error().code == errc::not_authorized || ++misses >= 6)
        return report_error(reply.error());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    misses = 0;
    if (reply->failure) return report_error(*reply->failure);
    const auto* l = std::get_if<actors::logs_reply>(&reply->body);
    if (!l) return report_error({errc::protocol_error, "the scheduler's reply is not a log"});
    for (const auto& e : l->events) {
      if (json) {
        // The time in full: Unix seconds need more than a figure's 6 digits.
        print_json({{"seq", e.seq}, {"time", e.time}, {"text", e.text}});
      } else {
        const std::time_t t = std::time_t(e.time);
        std::tm local{};
        localtime_r(&t, &local);
        char when[32];
        std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &local);
        std::printf("%s  %s\n", when, e.text.c_str());
      }
      after = e.seq;
    }
    std::fflush(stdout);
    if (!follow || l->over) return 0;
    for (int i = 0; i < 10 && !g_stop_wait.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_stop_wait.load()) return 130;
  }
}

int run_policy(const std::string& at, const std::string& set, bool json) {
  actors::policy_request req;
  if (!set.empty()) req.set = set;
  auto reply = call(at, req);
  if (!reply) return report_error(reply.error());
  if (reply->failure) return report_error(*reply->failure);
  const auto* p = std::get_if<actors::policy_reply>(&reply->body);
  if (!p) return report_error({errc::protocol_error, "the scheduler's reply is not a policy"});
  if (json)
    print_json({{"policy", p->active}});
  else
    std::printf("%s\n", p->active.c_str());
  if (!set.empty() && !json)
    std::fprintf(stderr, "coach: the scheduler's policy is now %s (running jobs keep running)\n",
                 p->active.c_str());
  return 0;
}

}  // namespace coach::apps
