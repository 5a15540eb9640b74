// scheduler/cluster_core_api.cpp: the cluster scheduler's job API (cluster_core.hpp): requests
// answered here, rescale and migrate forwarded to the job's master, the dashboard's actions, and
// what coach status and coach nodes show.
#include <charconv>

#include "common/format.hpp"
#include "scheduler/cluster_core.hpp"

namespace coach::scheduler {

// --- the job API ------------------------------------------------------------------------------

std::vector<link_traffic> job_traffic(std::uint64_t job,
                                      const std::map<std::uint32_t, node_heartbeat>& heartbeats) {
  std::vector<link_traffic> out;
  for (const auto& [host, hb] : heartbeats)
    for (const auto& l : hb.traffic)
      if (l.job == job && heartbeats.contains(l.src_host) && heartbeats.contains(l.dst_host))
        out.push_back(l);
  return out;
}

std::vector<node_status> cluster_core::node_statuses() const {
  // Free CPUs as the scheduler counts them, the figure why_waiting gives (not the heartbeat's
  // measured idle CPUs: under --cpu-accounting reserved Coach's own busy parts and the host's
  // other programs do not take CPUs from jobs); 0 on a node that takes no work.
  std::map<std::uint32_t, double> free;
  if (reg_)
    for (const auto& v : reg_->cluster().nodes) free[v.id] = free_cpus_shown(v.free.cpus);
  std::vector<node_status> known;
  for (const auto& [host, n] : nodes_.nodes()) {
    known.push_back({heartbeats_.at(host), nodes_.silent_for(host), n.alive});
    const auto f = free.find(host);
    known.back().last.resources.cpus_free = f == free.end() ? 0.0 : f->second;
  }
  return known;
}

job_status cluster_core::snapshot(const registered_job& job, bool with_model) {
  auto s = reg_->snapshot(job, with_model ? holder_->model().get() : nullptr, holder_->name());
  s.traffic = job_traffic(s.job, heartbeats_);
  s.traffic_final = job.over() && !final_traffic_.contains(s.job);
  return s;
}

std::string cluster_core::dashboard_action(const std::string& action, const std::string& arg) {
  api_reply r;
  if (action == "policy") {
    r = answer(policy_request{arg});
  } else if (action == "cancel") {
    std::uint64_t id = 0;
    const auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), id);
    if (ec != std::errc{} || end != arg.data() + arg.size())
      return coach::format("'{}' is no job id", arg);
    r = answer(cancel_request{id});
  } else {
    return coach::format("unknown action '{}'", action);
  }
  return r.failure ? r.failure->message : std::string{};
}

void cluster_core::request(const api_request& req, std::function<void(api_reply)> reply) {
  if (!forward(req, reply)) reply(answer(req));
}

/// Rescale and migrate: checked here, then asked of the job's master, which answers when it
/// has queued the change for the job's next step boundary. False for other requests.
bool cluster_core::forward(const api_request& req, const std::function<void(api_reply)>& reply) {
  auto failed = [reply](std::optional<coach::error> e) {
    api_reply r;
    r.failure = std::move(e);
    reply(std::move(r));
    return true;
  };
  // On success, `done` adjusts the registry's record of the job's allocation (what a change
  // frees is freed for good by layout() when it takes effect).
  // A refusal also takes back what the user's order was expected to do (user_orders.hpp).
  auto relay_or = [failed](std::function<void()> done,
                           std::function<void(const std::string&)> refused) -> change_answer {
    return [failed, done = std::move(done), refused = std::move(refused)](result<std::string> why) {
      if (!why || !why->empty()) refused(why ? *why : why.error().message);
      if (!why) {
        failed(why.error());
      } else if (!why->empty()) {
        failed(coach::error{errc::invalid_argument, *why});
      } else {
        done();
        failed(std::nullopt);
      }
    };
  };
  if (const auto* r = std::get_if<rescale_request>(&req)) {
    if (r->release) {
      if (r->workers || r->shards)
        return failed(coach::error{errc::invalid_argument,
                                   "rescale: --release takes no --workers or --shards"});
      auto ok = reg_->release_hold(r->job);
      if (ok) poke();  // the policy may size it again now
      return failed(ok ? std::nullopt : std::optional(ok.error()));
    }
    auto job = reg_->running_job(r->job);
    if (!job) return failed(job.error());
    const std::uint64_t id = r->job;
    const std::uint32_t w = r->workers, s = r->shards;
    const auto gen = (*job)->generation();
    reg_->user_rescale(**job, w, s);
    ports_.rescale(
        id, w, s,
        relay_or(
            [this, id, gen, w, s] {
              if (auto* j = reg_->current(id, gen)) reg_->rescaled(*j, w, s);
            },
            [this, id, gen](const std::string& why) { reg_->user_rescale_refused(id, gen, why); }));
    return true;
  }
  if (const auto* m = std::get_if<migrate_request>(&req)) {
    if (m->release) {
      if (!m->to_node.empty())
        return failed(
            coach::error{errc::invalid_argument, "migrate: --release takes no --to NODE"});
      auto ok = reg_->release_pin(m->job, m->shard);
      if (ok) poke();
      return failed(ok ? std::nullopt : std::optional(ok.error()));
    }
    auto job = reg_->running_job(m->job);
    if (!job) return failed(job.error());
    if (m->to_node.empty())
      return failed(coach::error{errc::invalid_argument, "--to NODE is empty"});
    auto host = nodes_.by_name(m->to_node);
    if (!host) return failed(host.error());
    const std::uint64_t id = m->job;
    const std::uint32_t shard = m->shard, to = *host;
    const auto gen = (*job)->generation();
    // Expected before the master answers: it may ask for the new shard first.
    reg_->user_migrate(**job, shard, to);
    ports_.migrate(id, shard, m->to_node,
                   relay_or([] {},
                            [this, id, gen, shard, to](const std::string& why) {
                              reg_->user_migrate_refused(id, gen, shard, to, why);
                            }));
    return true;
  }
  return false;
}

api_reply cluster_core::answer(const api_request& req) {
  api_reply reply;
  auto failed = [&](const coach::error& e) {
    reply.failure = e;
    return reply;
  };
  if (auto* sub = std::get_if<submit_request>(&req)) {
    auto id = submit(*sub);
    if (!id) return failed(id.error());
    reply.body = submit_reply{*id};
  } else if (auto* st = std::get_if<status_request>(&req)) {
    status_reply out;
    if (st->job != 0) {
      auto* job = reg_->find(st->job);
      if (!job) return failed({errc::not_found, coach::format("no job {}", st->job)});
      out.jobs.push_back(snapshot(*job, true));
    } else {
      for (const auto& [id, job] : reg_->jobs()) out.jobs.push_back(snapshot(job, false));
    }
    reply.body = std::move(out);
  } else if (std::get_if<nodes_request>(&req)) {
    reply.body = nodes_reply{node_statuses()};
  } else if (auto* c = std::get_if<cancel_request>(&req)) {
    auto job = reg_->cancel(c->job);
    if (!job) return failed(job.error());
    if ((*job)->running()) {
      ports_.cancel(c->job);
      ports_.cancel_due_in(c->job, (*job)->generation(), cancel_grace);
    } else  // waiting or still starting: nothing more will train
      end(**job, job_state::cancelled, coach::error{errc::cancelled, "cancelled by the user"});
    reply.body = ack_reply{};
  } else if (auto* p = std::get_if<policy_request>(&req)) {
    if (p->set) {
      // Between two decisions: running jobs keep what they have; the next is the new policy's.
      if (auto ok = holder_->set(*p->set); !ok) return failed(ok.error());
      if (auto ok = reg_->store()->set_setting("policy", holder_->name()); !ok)
        ports_.note("job store: cannot record the policy: " + ok.error().message);
      ports_.note("policy is now " + holder_->name());
      poke();
    }
    reply.body = policy_reply{holder_->name()};
  } else if (auto* f = std::get_if<forget_request>(&req)) {
    if (auto ok = reg_->forget(f->job); !ok) return failed(ok.error());
    final_traffic_.erase(f->job);
    rebal_.forget(f->job);
    ports_.note(coach::format("job {} forgotten", f->job));
    reply.body = ack_reply{};
  } else if (auto* l = std::get_if<logs_request>(&req)) {
    auto* job = reg_->find(l->job);
    if (!job) return failed({errc::not_found, coach::format("no job {}", l->job)});
    reply.body = logs_reply{reg_->events(*job, l->after), job->over()};
  }
  return reply;
}

}  // namespace coach::scheduler
