#include <caf/all.hpp>

#include <map>
#include <memory>
#include <optional>

#include "actors/roles.hpp"
#include "common/clock.hpp"
#include "common/log.hpp"
#include "master/job_master.hpp"
#include "worker/external_pool.hpp"
#include "worker/sparse_batch.hpp"

namespace coach::actors {
namespace {

/// The job master actor: CAF messages into calls on master::job_master, its ports into sends
/// (the transport, the observer, the evaluator) and into the actors it starts, links and
/// watches.
struct master_state {
  scheduler::steady_clock_source clock;
  std::optional<master::job_master> master;
  std::map<caf::actor_addr, std::uint32_t> watched;  ///< worker actors, to their ranks
  /// Worker actors, stopped when the master stops (shared with the master's exit functor).
  std::shared_ptr<std::vector<caf::actor>> worker_actors =
      std::make_shared<std::vector<caf::actor>>();
  static inline const char* name = "coach.job_master";
};

master::job_master_setup setup_of(const job_context& ctx) {
  master::job_master_setup s;
  s.job = ctx.job;
  s.spec = ctx.spec;
  s.num_params = ctx.model.num_params();
  s.train_rows = ctx.data->train.rows;
  s.backend = std::string(kernels::to_string(ctx.backend));
  s.initial = ctx.initial_config();
  s.shards = std::uint32_t(ctx.shards.size());
  s.master = ctx.master;
  // The context outlives the master (held by the ports below).
  s.shard_ep = [c = &ctx](std::uint32_t k) { return c->shard_ep(k); };
  s.worker_ep = [c = &ctx](std::uint32_t r) { return c->worker_ep(r); };
  s.replica_ep = [c = &ctx](std::uint32_t k, std::uint32_t i) { return c->replica_ep(k, i); };
  s.on_step = ctx.on_step;
  s.sparse_rows = !ctx.model.tables().empty();
  return s;
}

caf::behavior master_actor(caf::stateful_actor<master_state>* self,
                           std::shared_ptr<const job_context> ctx, caf::actor observer,
                           caf::actor evaluator, elastic_hooks hooks, master_options options) {
  auto& st = self->state;
  auto watch = [self](std::uint32_t rank, const caf::actor& w) {
    self->state.watched[w.address()] = rank;
    self->state.worker_actors->push_back(w);
    self->monitor(w);
  };
  master::job_master_ports ports;
  ports.send = [ctx](wire_message m) { ctx->net->send(std::move(m)); };
  ports.evaluate = [self, evaluator](param_snapshot p) {
    self->send(evaluator, eval_atom::value, std::move(p), caf::actor_cast<caf::actor>(self));
  };
  ports.progress = [observer](const scheduler::progress_event& p) {
    caf::anon_send(observer, progress_atom::value, p);
  };
  ports.epoch = [observer](const scheduler::epoch_report& r) {
    caf::anon_send(observer, epoch_atom::value, r);
  };
  ports.checkpoint = [observer](param_snapshot p) {
    caf::anon_send(observer, checkpoint_atom::value, std::move(p));
  };
  ports.done = [observer, ctx](job_outcome o) {
    if (!o.failure) o.result.bytes_moved = ctx->net->traffic().total_bytes();
    caf::anon_send(observer, done_atom::value, std::move(o));
  };
  // A part started in this process is linked (a shard: the job's parts stop together) or
  // watched (a worker: its death drops it from the job); one started elsewhere is ready later.
  if (hooks.add_worker)
    ports.add_worker = [add = hooks.add_worker, watch](
                           std::uint32_t r, const ps::job_config& c, std::int64_t first,
                           const std::string& node) -> result<master::part_start> {
      auto a = add(r, c, first, node);
      if (!a) return std::unexpected(a.error());
      if (!*a) return master::part_start::elsewhere;
      watch(r, *a);
      return master::part_start::here;
    };
  if (hooks.add_shard)
    ports.add_shard = [add = hooks.add_shard, self](
                          std::uint32_t k, const ps::job_config& c, const std::string& node,
                          std::uint64_t keys) -> result<master::part_start> {
      auto a = add(k, c, node, keys);
      if (!a) return std::unexpected(a.error());
      if (!*a) return master::part_start::elsewhere;
      self->link_to(*a);
      return master::part_start::here;
    };
  ports.changed = hooks.changed;
  ports.take_over = [ctx](std::uint32_t k, const endpoint& ep) { ctx->added->take_over(k, ep); };
  st.master.emplace(setup_of(*ctx), std::move(options), std::move(ports), st.clock);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& s = self->state;
    auto it = s.watched.find(dm.source);
    if (it == s.watched.end()) return;
    const auto rank = it->second;
    s.watched.erase(it);
    if (dm.reason != caf::exit_reason::normal) {
      // A worker that failed says why in one line (its message), not CAF's rendering of it.
      const auto& why = dm.reason.context();
      s.master->workers_lost({rank}, why.size() == 1 && why.match_element<std::string>(0)
                                         ? why.get_as<std::string>(0)
                                         : caf::to_string(dm.reason));
    }
  });
  self->attach_functor([workers = st.worker_actors] {
    for (auto& w : *workers) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  });
  return {
      [self](wire_message& m) { self->state.master->on_message(m); },
      [self](eval_atom, eval_result& r) { self->state.master->evaluated(r); },
      [watch](watch_atom, std::uint32_t rank, caf::actor& w) { watch(rank, w); },
      [self](lost_atom, std::vector<std::uint32_t>& ranks) {
        self->state.master->workers_lost(ranks);
      },
      [self](take_over_atom, std::vector<std::uint32_t>& heads, std::vector<std::uint32_t>& cut) {
        self->state.master->replicas_lost(heads, cut);
      },
      [self](ready_atom, bool worker, std::uint32_t id, std::string& why) {
        self->state.master->part_ready(worker, id, why);
      },
      [self](rescale_atom, std::uint32_t workers, std::uint32_t shards) {
        return self->state.master->rescale(workers, shards);
      },
      [self](migrate_atom, std::uint32_t shard, std::string& node) {
        return self->state.master->migrate(shard, node);
      },
      [self](cancel_atom) { self->state.master->cancel(); },
  };
}

struct evaluator_state {
  std::unique_ptr<kernels::backend> be;
  std::unique_ptr<worker::network_runner> runner;
  float* params = nullptr;
  /// A script's model: the process of the script that evaluates (taken at the first epoch).
  std::unique_ptr<worker::external_process> process;
  /// A model with sparse tables: the rows the test set looks up, per table (ascending), made at
  /// the first evaluation: the only rows an evaluation takes of the shards' snapshots.
  std::vector<std::vector<std::uint64_t>> test_rows;
  static inline const char* name = "coach.evaluator";
  ~evaluator_state() {
    if (be) be->free(params);
  }
};

/// The epoch's rows of a model with sparse tables (every shard's, param_snapshot::rows) merged
/// into one store that holds every bucket (a row no step touched reads as its initial value, as a
/// shard would create it): with `keep` (one ascending list per table), only those rows; empty,
/// every row (a script's evaluation, whose lookups Coach does not know ahead).
result<sparse::row_store> merged_rows(const job_context& ctx, const param_snapshot& snap,
                                      std::span<const std::vector<std::uint64_t>> keep = {}) {
  std::vector<sparse::table_config> tables;
  for (const auto& t : ctx.model.tables()) tables.push_back(t.config);
  const sparse::bucket_range all[] = {{0, sparse::bucket_count}};
  auto store =
      sparse::row_store::create(ctx.spec.seed, std::move(tables), ctx.spec.sparse_optimizer, all);
  if (!store) return std::unexpected(store.error());
  if (snap.rows)
    for (const auto& blob : *snap.rows)
      if (auto ok = keep.empty() ? store->merge(blob) : store->merge(blob, keep); !ok)
        return std::unexpected(ok.error());
  return store;
}

/// A script's model: epoch `snap.epoch`'s parameters evaluated by a process of the script (the
/// rows it pulls read from the epoch's merged rows). A failure is logged and counts nothing
/// (total 0).
eval_result evaluate_external(evaluator_state& st, const job_context& ctx,
                              const param_snapshot& snap) {
  eval_result r{snap.epoch, 0, 0, 0};
  const auto& model = *ctx.model.external();
  if (model.layout.test_samples == 0) return r;
  std::optional<sparse::row_store> store;
  worker::external_row_source source;
  if (!ctx.model.tables().empty()) {
    auto merged = merged_rows(ctx, snap);
    if (!merged) {
      log::error("job {}: cannot evaluate epoch {}: {}", ctx.job, snap.epoch,
                 merged.error().message);
      return r;
    }
    store.emplace(std::move(*merged));
    source = [&](std::uint32_t t, std::span<const std::uint64_t> ids, std::span<float> out) {
      return store->read(t, ids, out);
    };
  }
  if (!st.process) {
    auto p = model.pool->take_for_evaluation(coach::format("job {} evaluator", ctx.job));
    if (!p) {
      log::error("job {}: cannot evaluate epoch {}: {}", ctx.job, snap.epoch, p.error().message);
      return r;
    }
    st.process = std::move(*p);
  }
  auto ev = st.process->evaluate(snap.epoch, snap.values->data(), source ? &source : nullptr);
  if (!ev) {
    log::error("job {}: cannot evaluate epoch {}: {}", ctx.job, snap.epoch, ev.error().message);
    st.process.reset();  // a fresh one for the next epoch
    return r;
  }
  r = eval_result{snap.epoch, std::int64_t(ev->correct), std::int64_t(ev->samples), ev->loss_sum};
  r.auc = ev->auc;  // a two-class script's, when it gives them
  r.log_loss = ev->log_loss;
  return r;
}

/// A model with sparse tables: the test set's lookups read from the epoch's rows, of which only
/// those the test set looks up are merged (a table of 10^8 rows is not copied).
eval_result evaluate_rows(evaluator_state& st, const job_context& ctx, const param_snapshot& snap) {
  eval_result r{snap.epoch, 0, 0, 0};
  if (st.test_rows.empty()) {
    const auto& test = ctx.data->test;
    std::vector<std::uint32_t> all(test.rows);
    for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = i;
    for (auto& b : worker::sparse_batch(ctx.model, test, all))
      st.test_rows.push_back(std::move(b.rows.rows));
  }
  auto store = merged_rows(ctx, snap, st.test_rows);
  if (!store) {
    log::error("job {}: cannot evaluate epoch {}: {}", ctx.job, snap.epoch, store.error().message);
    return r;
  }
  const auto ev =
      st.runner->evaluate(st.params, ctx.data->test,
                          [&](std::uint32_t t, std::span<const std::uint64_t> ids,
                              std::span<float> out) { return store->read(t, ids, out); });
  if (!ev) {
    log::error("job {}: cannot evaluate epoch {}: {}", ctx.job, snap.epoch, ev.error().message);
    return r;
  }
  r = eval_result{snap.epoch, ev->correct, ev->total, ev->loss_sum};
  if (ev->auc) r.auc = *ev->auc;
  if (ev->log_loss) r.log_loss = *ev->log_loss;
  return r;
}

caf::behavior evaluator_actor(caf::stateful_actor<evaluator_state>* self,
                              std::shared_ptr<const job_context> ctx) {
  auto& st = self->state;
  if (ctx->model.external()) {
    return {
        [self, ctx](eval_atom, param_snapshot& snap, caf::actor& reply_to) {
          self->send(reply_to, eval_atom::value, evaluate_external(self->state, *ctx, snap));
        },
    };
  }
  // A cuda job's test set is evaluated on a GPU, shared with the workers (at real sizes the cpu
  // would take longer than an epoch), in fp32: the first device this process's workers may use,
  // or, where none run here (a cluster's master), device 0 when the process sees one.
  std::optional<int> device;
  if (ctx->devices)
    device = ctx->devices->first();
  else if (kernels::device_count() > 0)
    device = 0;
  if (ctx->backend == kernels::backend_kind::cuda && device) {
    if (auto be = kernels::make_backend(kernels::backend_kind::cuda, *device))
      st.be = std::move(*be);
    else
      log::warn("job {}: evaluating on the cpu: {}", ctx->job, be.error().message);
  }
  if (!st.be) st.be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  st.runner = std::make_unique<worker::network_runner>(ctx->model, *st.be, 1000);
  st.params = st.be->alloc(ctx->model.num_params());
  return {
      [self, ctx](eval_atom, param_snapshot& snap, caf::actor& reply_to) {
        auto& s = self->state;
        s.be->upload(s.params, snap.values->data(), snap.values->size());
        if (!ctx->model.tables().empty()) {
          auto r = evaluate_rows(s, *ctx, snap);
          self->send(reply_to, eval_atom::value, r);
          return;
        }
        const auto ev = s.runner->evaluate(s.params, ctx->data->test);
        eval_result r{snap.epoch, ev.correct, ev.total, ev.loss_sum};
        self->send(reply_to, eval_atom::value, r);
      },
  };
}

}  // namespace

caf::actor spawn_master(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                        caf::actor observer, caf::actor evaluator, elastic_hooks hooks,
                        master_options options) {
  auto ep = ctx->master;
  auto net = ctx->net;
  auto a = sys.spawn(master_actor, std::move(ctx), std::move(observer), std::move(evaluator),
                     std::move(hooks), options);
  bind_while_alive(net, ep, a);
  return a;
}

caf::actor spawn_evaluator(caf::actor_system& sys, std::shared_ptr<const job_context> ctx) {
  return sys.spawn<caf::detached>(evaluator_actor, std::move(ctx));
}

}  // namespace coach::actors
