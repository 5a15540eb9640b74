#include "actors/embedded_cluster.hpp"

#include <caf/all.hpp>

#include <chrono>

#include "actors/roles.hpp"
#include "worker/dataset.hpp"

namespace coach::actors {
namespace {

result<std::uint32_t> pick(std::uint32_t requested, const scheduler::count_range& range,
                           const char* what) {
  if (requested == 0) return std::uint32_t(range.initial);
  if (int(requested) < range.min || int(requested) > range.max)
    return fail(errc::invalid_argument, "--{} {} is outside the job's {} range [{}, {}]", what,
                requested, what, range.min, range.max);
  return requested;
}

}  // namespace

result<scheduler::job_result> train_embedded(const scheduler::job_spec& spec,
                                             const train_options& opt) {
  auto workers = pick(opt.workers, spec.workers, "workers");
  if (!workers) return std::unexpected(workers.error());
  auto shards = pick(opt.shards, spec.shards, "shards");
  if (!shards) return std::unexpected(shards.error());
  auto data = worker::load_dataset(spec.dataset, spec.seed);
  if (!data) return std::unexpected(data.error());
  for (const auto& w : data->warnings) std::fprintf(stderr, "coach: warning: %s\n", w.c_str());

  job_request req;
  req.spec = spec;
  if (opt.backend) req.spec.backend = *opt.backend;
  req.workers = *workers;
  if (opt.kill_worker)
    req.kill = job_request::kill_point{opt.kill_worker->first, opt.kill_worker->second};
  req.slowdown = opt.slowdown;
  req.shards = *shards;
  req.data = std::make_shared<const worker::dataset_pair>(std::move(*data));
  const auto kept = req.data;  // the class names and transform go with the result

  caf::actor_system_config cfg;
  // The sharing policy parks idle scheduler threads on a condition variable; work stealing would
  // poll and take CPU from the workers' compute threads on small hosts.
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", opt.caf_threads);
  cfg.set("logger.console", caf::atom("none"));
  caf::actor_system sys{cfg};
  auto sched = spawn_scheduler(sys);
  std::optional<job_outcome> outcome;
  {
    caf::scoped_actor client{sys};
    std::uint64_t job = 0;
    client
        ->request(sched, caf::infinite, submit_atom::value, std::move(req),
                  caf::actor_cast<caf::actor>(client))
        .receive([&](std::uint64_t id) { job = id; }, [&](caf::error&) {});
    bool cancel_sent = false;
    while (!outcome) {
      client->receive(
          [&](progress_atom, scheduler::progress_event& p) {
            if (opt.on_progress) opt.on_progress(p);
          },
          [&](epoch_atom, scheduler::epoch_report& e) {
            if (opt.on_epoch) opt.on_epoch(e);
          },
          [&](done_atom, job_outcome& o) { outcome = std::move(o); },
          caf::after(std::chrono::milliseconds(100)) >> [] {});
      // Checked after every message as well as every 100 ms of silence.
      if (!outcome && !cancel_sent && job != 0 && opt.stop && opt.stop->load()) {
        client->send(sched, cancel_atom::value, job);
        cancel_sent = true;
      }
    }
    client->send_exit(sched, caf::exit_reason::user_shutdown);
  }
  if (outcome->failure) return std::unexpected(*outcome->failure);
  outcome->result.class_names = kept->train.class_names;
  outcome->result.transform = kept->transform;
  outcome->result.sample_shape = kept->train.shape;
  outcome->result.features = kept->train.features;
  outcome->result.classes = kept->train.classes;
  return std::move(outcome->result);
}

}  // namespace coach::actors
