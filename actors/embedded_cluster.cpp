#include "actors/embedded_cluster.hpp"
#include "common/log.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "actors/roles.hpp"
#include "common/format.hpp"
#include "worker/dataset.hpp"
#include "worker/external_pool.hpp"

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

/// The checkpoint's directory exists (else the first checkpoint would fail after an epoch).
result<void> check_checkpoint_path(const scheduler::checkpoint_config& c) {
  if (c.every_s < 0)
    return fail(errc::invalid_argument, "checkpoint every_s is {}; it must be >= 0", c.every_s);
  auto dir = std::filesystem::path(c.path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return fail(errc::invalid_argument, "checkpoint {}: no directory {}", c.path, dir.string());
  return {};
}

/// Decides which epochs are checkpointed, on the master's thread (master_options).
struct checkpoint_timing {
  scheduler::steady_clock_source clock;
  scheduler::checkpoint_schedule schedule;
  checkpoint_timing(double every_s, std::uint32_t epochs) : schedule(every_s, epochs, clock) {}
};

/// A script's model: its first process started and its layout registered (into spec.model),
/// and the data set as Coach sees it (the script's sizes). Other models: the spec's data set.
result<worker::dataset_pair> prepare_model(scheduler::job_spec& spec, const train_options& opt) {
  if (!spec.model.script) return worker::load_dataset(spec.dataset, spec.seed);
  // Each process of the script gets an equal share of the cores.
  const std::uint32_t workers =
      std::max<std::uint32_t>(1, opt.workers ? opt.workers : std::uint32_t(spec.workers.initial));
  const int threads = int(std::max(1u, std::thread::hardware_concurrency() / workers));
  auto so = worker::script_options_for(*spec.model.script, spec.seed, 1, opt.python, threads);
  if (!so) return std::unexpected(so.error());
  if (spec.function) so->memory_bytes = spec.function->memory_mb << 20;  // each process's cap
  auto model = worker::start_script_model(std::move(*so));
  if (!model) return std::unexpected(model.error());
  if (auto ok = scheduler::apply_script_tables(spec, (*model)->layout); !ok)
    return std::unexpected(ok.error());
  log::info("{}: {} tensors, {} parameters, {} training and {} test samples ({})",
            spec.model.script->path, (*model)->layout.tensors.size(), (*model)->layout.floats,
            (*model)->layout.samples, (*model)->layout.test_samples, (*model)->layout.framework);
  // The first workers' processes start now, side by side, while the job is set up; the
  // registering process evaluates.
  (*model)->pool->prestart(workers);
  (*model)->pool->keep_warm(std::size_t(spec.model.script->warm));
  spec.model.external = *model;
  return worker::script_dataset((*model)->layout);
}

}  // namespace

result<scheduler::job_result> train_embedded(const scheduler::job_spec& spec_in,
                                             const train_options& opt) {
  if (opt.checkpoint.enabled())
    if (auto ok = check_checkpoint_path(opt.checkpoint); !ok) return std::unexpected(ok.error());
  scheduler::job_spec spec = spec_in;
  auto data = prepare_model(spec, opt);
  if (!data) return std::unexpected(data.error());
  for (const auto& w : data->warnings) log::warn("{}", w);
  auto net = worker::network::for_data(spec.model, data->train);
  if (!net) return fail(net.error().code, "job '{}': {}", spec.name, net.error().message);

  // Resumed: the checkpoint must fit the spec; its counts are the defaults.
  std::optional<scheduler::loaded_checkpoint> resumed;
  std::uint32_t want_workers = opt.workers, want_shards = opt.shards;
  if (!opt.resume.empty()) {
    auto loaded = scheduler::load_checkpoint(opt.resume, spec, *net, data->train.rows);
    if (!loaded) return std::unexpected(loaded.error());
    resumed = std::move(*loaded);
    if (want_workers == 0) want_workers = resumed->info.workers;
    if (want_shards == 0) want_shards = resumed->info.shards;
    if (opt.on_resume) opt.on_resume(resumed->info);
  }
  auto workers = pick(want_workers, spec.workers, "workers");
  if (!workers) return std::unexpected(workers.error());
  const char* asked = opt.workers ? "--workers"
                      : resumed   ? "the checkpoint's workers"
                                  : "workers.initial";
  if (auto why = scheduler::too_many_workers(spec, data->train.rows, *workers, asked))
    return std::unexpected(*why);
  auto shards = pick(want_shards, spec.shards, "shards");
  if (!shards) return std::unexpected(shards.error());

  job_request req;
  req.spec = spec;
  if (opt.backend) req.spec.backend = *opt.backend;
  if (opt.precision) req.spec.precision = *opt.precision;
  req.workers = *workers;
  req.slowdown = opt.slowdown;
  req.on_step = opt.on_step;
  req.cancel_at_step = opt.cancel_at_step;
  req.shards = *shards;
  req.data = std::make_shared<const worker::dataset_pair>(std::move(*data));
  const auto kept = req.data;  // the class names and transform go with the result
  if (resumed) {
    req.first_epoch = resumed->info.epochs_completed;
    req.resume = std::make_shared<const ps::training_state>(std::move(resumed->state));
  }
  if (opt.checkpoint.enabled()) {
    auto timing =
        std::make_shared<checkpoint_timing>(opt.checkpoint.every_s, std::uint32_t(spec.epochs));
    req.checkpoint_due = [timing](std::uint32_t epoch) { return timing->schedule.due(epoch); };
  }
  const worker::model_labels labels{kept->train.class_names, kept->transform};
  // The checkpoints received, written once their epoch's report (which follows) is in.
  std::map<std::uint32_t, param_snapshot> checkpoints;
  auto write_pending = [&](const scheduler::epoch_report& e) {
    auto it = checkpoints.find(e.epoch);
    if (it == checkpoints.end() || !it->second.state) return;
    const auto& state = *it->second.state;
    checkpoint_written w{e.epoch + 1, state.version, opt.checkpoint.path, std::nullopt};
    const auto info = scheduler::describe_checkpoint(spec, state, e.epoch + 1, e.workers, e.shards,
                                                     kept->train.rows);
    const std::map<std::string, std::string> extra = {
        {"coach.test_accuracy", coach::format("{:.6f}", e.test_accuracy)}};
    if (auto ok = scheduler::write_checkpoint(opt.checkpoint.path, *net, state, info, spec.name,
                                              labels, extra);
        !ok)
      w.failure = ok.error();
    checkpoints.erase(it);
    if (opt.on_checkpoint) opt.on_checkpoint(w);
  };

  caf::actor_system_config cfg;
  // The sharing policy parks idle scheduler threads on a condition variable; work stealing would
  // poll and take CPU from the workers' compute threads on small hosts.
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", opt.caf_threads);
  cfg.set("logger.console", caf::atom("none"));
  caf::actor_system sys{cfg};
  auto sched = spawn_scheduler(sys, opt.wrap_transport ? opt.wrap_transport(make_inproc_transport())
                                                       : make_inproc_transport());
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
          [&](checkpoint_atom, param_snapshot& p) { checkpoints[p.epoch] = std::move(p); },
          [&](epoch_atom, scheduler::epoch_report& e) {
            if (opt.on_epoch) opt.on_epoch(e);
            write_pending(e);
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
  outcome->result.external = spec.model.external;
  outcome->result.features = kept->train.features;
  outcome->result.classes = kept->train.classes;
  outcome->result.fields = kept->train.fields;
  return std::move(outcome->result);
}

}  // namespace coach::actors
