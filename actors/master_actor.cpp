#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>

#include "actors/roles.hpp"
#include "worker/chunk_dispenser.hpp"

namespace coach::actors {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

/// The chunks of one step, by rank, fixed when the step opens (BSP: in rank order).
struct step_plan {
  std::vector<std::optional<worker::chunk>> by_rank;
  bool finished = false;  ///< training is over: every rank is told to stop
  std::size_t fetched = 0;
  std::size_t reported = 0;
};

/// Training statistics of one epoch.
struct epoch_stats {
  double loss_sum = 0;
  std::uint64_t samples = 0;
  std::int64_t steps = 0;
  clock_type::time_point start;
  double seconds = -1;  ///< set when every chunk of the epoch is processed
  std::optional<eval_result> eval;
};

/// Parameters being assembled from the shards' snapshots of one version.
struct assembly {
  std::uint32_t epoch = 0;
  bool final = false;  ///< the job's last version (cancel), not evaluated
  std::shared_ptr<std::vector<float>> values;
  std::size_t received = 0;
};

struct master_state {
  std::shared_ptr<const job_context> ctx;
  caf::actor me;  ///< this actor, for answers from the evaluator (dropped with the state)
  caf::actor observer;
  caf::actor evaluator;
  std::unique_ptr<worker::chunk_dispenser> dispenser;
  bool epoch_started = false;
  bool cancelled = false;
  bool done = false;
  std::int64_t open_step = -1;
  std::map<std::int64_t, step_plan> plans;
  std::vector<wire_message> parked;  ///< chunk requests waiting for the epoch to complete
  std::map<std::uint32_t, epoch_stats> epochs;
  std::map<std::int64_t, assembly> assemblies;  ///< by version
  std::shared_ptr<const std::vector<float>> last_params;
  scheduler::job_result result;
  clock_type::time_point job_start = clock_type::now();
  clock_type::time_point last_progress = clock_type::now();
  static inline const char* name = "coach.job_master";

  std::uint32_t num_epochs() const { return std::uint32_t(ctx->spec.epochs); }

  wire_message to(const endpoint& dst, msg_kind kind, std::int64_t step) const {
    wire_message m;
    m.hdr.src = ctx->master;
    m.hdr.dst = dst;
    m.hdr.kind = kind;
    m.hdr.job = ctx->job;
    m.hdr.map_version = ctx->map.version();
    m.hdr.step = step;
    return m;
  }

  void request_snapshot(std::int64_t version, std::uint32_t epoch, bool final) {
    if (auto it = assemblies.find(version); it != assemblies.end()) {
      it->second.final = it->second.final || final;
      return;
    }
    auto& a = assemblies[version];
    a.epoch = epoch;
    a.final = final;
    a.values = std::make_shared<std::vector<float>>(ctx->model.num_params());
    for (const auto& s : ctx->shards) ctx->net->send(to(s, msg_kind::snapshot_request, version));
  }

  /// Opens step s if it can: false when the epoch's last chunks are still being processed.
  bool open(std::int64_t s) {
    step_plan plan;
    const std::size_t n = ctx->workers.size();
    if (cancelled) {
      plan.finished = true;
      request_snapshot(s, dispenser->epoch(), true);
    } else {
      if (!epoch_started || dispenser->exhausted()) {
        if (epoch_started && !dispenser->epoch_done()) return false;
        const std::uint32_t next = epoch_started ? dispenser->epoch() + 1 : 0;
        if (next >= num_epochs()) {
          plan.finished = true;
        } else {
          dispenser->begin_epoch(next);
          epoch_started = true;
          epochs[next].start = clock_type::now();
        }
      }
      if (!plan.finished) {
        for (std::size_t r = 0; r < n; ++r) plan.by_rank.push_back(dispenser->take());
        ++epochs[dispenser->epoch()].steps;
        // The step that hands out an epoch's last chunk ends it: snapshot the version after it.
        if (dispenser->exhausted()) request_snapshot(s + 1, dispenser->epoch(), false);
      }
    }
    plans.emplace(s, std::move(plan));
    open_step = s;
    return true;
  }

  void grant(const wire_message& req) {
    const std::int64_t s = req.hdr.step;
    const std::uint32_t rank = req.hdr.rank;
    if (rank >= ctx->workers.size()) return;
    while (open_step < s)
      if (!open(open_step + 1)) {
        parked.push_back(req);
        return;
      }
    auto it = plans.find(s);
    if (it == plans.end()) return;  // a stale request: the step is long closed
    auto& plan = it->second;
    auto m = to(ctx->workers[rank], msg_kind::chunk_grant, s);
    if (plan.finished) {
      m.hdr.flags = flag::finished;
    } else if (const auto& c = plan.by_rank[rank]; !c) {
      m.hdr.flags = flag::no_chunk;
      m.hdr.epoch = dispenser->epoch();
    } else {
      auto idx = dispenser->indices(*c);
      auto copy = std::make_shared<std::vector<std::uint32_t>>(idx.begin(), idx.end());
      m.hdr.epoch = c->epoch;
      m.hdr.chunk_id = c->id;
      m.frames.push_back(frame::of(copy, copy->data(), copy->size()));
    }
    ctx->net->send(std::move(m));
    ++plan.fetched;
    forget_if_closed(it);
  }

  void forget_if_closed(std::map<std::int64_t, step_plan>::iterator it) {
    const std::size_t n = ctx->workers.size();
    if (it->second.fetched >= n && (it->second.finished || it->second.reported >= n))
      plans.erase(it);
  }

  void on_report(const wire_message& m) {
    auto it = plans.find(m.hdr.step);
    if (it == plans.end() || m.hdr.rank >= ctx->workers.size()) return;
    auto& c = it->second.by_rank[m.hdr.rank];
    ++it->second.reported;
    if (c && dispenser->complete(*c)) {
      auto& e = epochs[c->epoch];
      e.samples += c->size();
      e.loss_sum += m.hdr.loss;
      if (dispenser->epoch_done()) {
        e.seconds = seconds_since(e.start);
        maybe_finish_epoch(c->epoch);
      }
      progress(c->epoch);
    }
    forget_if_closed(it);
    // Requests parked at the epoch's end can go on now.
    auto waiting = std::move(parked);
    parked.clear();
    for (const auto& r : waiting) grant(r);
  }

  void progress(std::uint32_t epoch) {
    const auto now = clock_type::now();
    if (now - last_progress < std::chrono::milliseconds(200)) return;
    last_progress = now;
    const auto& e = epochs[epoch];
    scheduler::progress_event p;
    p.epoch = epoch;
    p.epochs = num_epochs();
    p.samples_done = e.samples;
    p.samples_total = ctx->data->train.rows;
    p.train_loss = e.samples ? e.loss_sum / double(e.samples) : 0.0;
    p.seconds = seconds_since(e.start);
    p.samples_per_s = p.seconds > 0 ? double(e.samples) / p.seconds : 0.0;
    caf::anon_send(observer, progress_atom::value, p);
  }

  void on_snapshot(const wire_message& m) {
    auto it = assemblies.find(m.hdr.step);
    if (it == assemblies.end()) return;
    auto& a = it->second;
    for (std::size_t i = 0; i < m.hdr.ranges.size() && i < m.frames.size(); ++i) {
      const auto& r = m.hdr.ranges[i];
      const auto v = m.frames[i].as<float>();
      if (v.size() != r.size() || r.end > a.values->size()) continue;
      std::copy(v.begin(), v.end(), a.values->begin() + std::ptrdiff_t(r.begin));
    }
    if (++a.received < ctx->shards.size()) return;
    param_snapshot snap{a.epoch, it->first, a.values};
    last_params = a.values;
    const bool final = a.final;
    assemblies.erase(it);
    if (final)
      finish(false);
    else
      caf::anon_send(evaluator, eval_atom::value, snap, me);
  }

  void on_eval(const eval_result& r) {
    epochs[r.epoch].eval = r;
    maybe_finish_epoch(r.epoch);
  }

  void maybe_finish_epoch(std::uint32_t epoch) {
    auto& e = epochs[epoch];
    if (!e.eval || e.seconds < 0) return;
    scheduler::epoch_report rep;
    rep.epoch = epoch;
    rep.samples = e.samples;
    rep.steps = e.steps;
    rep.train_loss = e.samples ? e.loss_sum / double(e.samples) : 0.0;
    rep.test_accuracy = e.eval->total ? double(e.eval->correct) / double(e.eval->total) : 0.0;
    rep.test_loss = e.eval->total ? e.eval->loss_sum / double(e.eval->total) : 0.0;
    rep.seconds = e.seconds;
    rep.samples_per_s = e.seconds > 0 ? double(e.samples) / e.seconds : 0.0;
    rep.workers = std::uint32_t(ctx->workers.size());
    rep.shards = std::uint32_t(ctx->shards.size());
    result.epochs.push_back(rep);
    result.test_accuracy = rep.test_accuracy;
    caf::anon_send(observer, epoch_atom::value, rep);
    if (epoch + 1 == num_epochs()) finish(true);
  }

  void finish(bool complete) {
    if (done) return;
    done = true;
    result.cancelled = !complete;
    result.seconds = seconds_since(job_start);
    result.workers = std::uint32_t(ctx->workers.size());
    result.shards = std::uint32_t(ctx->shards.size());
    result.backend = std::string(kernels::to_string(ctx->backend));
    result.num_params = ctx->model.num_params();
    result.bytes_moved = ctx->net->traffic().total_bytes();
    if (last_params) result.params = *last_params;
    caf::anon_send(observer, done_atom::value, job_outcome{std::nullopt, std::move(result)});
  }
};

caf::behavior master_actor(caf::stateful_actor<master_state>* self,
                           std::shared_ptr<const job_context> ctx, caf::actor observer,
                           caf::actor evaluator) {
  auto& st = self->state;
  st.ctx = ctx;
  st.me = caf::actor_cast<caf::actor>(self);
  st.observer = std::move(observer);
  st.evaluator = std::move(evaluator);
  st.dispenser = std::make_unique<worker::chunk_dispenser>(
      ctx->data->train.rows, std::size_t(ctx->spec.batch_size), ctx->spec.seed);
  st.result.name = ctx->spec.name;
  return {
      [self](wire_message& m) {
        auto& s = self->state;
        switch (m.hdr.kind) {
          case msg_kind::chunk_request:
            s.grant(m);
            break;
          case msg_kind::step_report:
            s.on_report(m);
            break;
          case msg_kind::params:
            s.on_snapshot(m);
            break;
          default:
            std::fprintf(stderr, "coach: job master: unexpected message %s\n",
                         std::string(to_string(m.hdr.kind)).c_str());
        }
      },
      [self](eval_atom, eval_result& r) { self->state.on_eval(r); },
      [self](cancel_atom) {
        auto& s = self->state;
        if (s.done || s.cancelled) return;
        s.cancelled = true;
        // Steps already open finish; the next one to open tells every worker to stop.
      },
  };
}

struct evaluator_state {
  std::unique_ptr<kernels::backend> be;
  std::unique_ptr<worker::mlp_runner> runner;
  float* params = nullptr;
  static inline const char* name = "coach.evaluator";
  ~evaluator_state() {
    if (be) be->free(params);
  }
};

caf::behavior evaluator_actor(caf::stateful_actor<evaluator_state>* self,
                              std::shared_ptr<const job_context> ctx) {
  auto& st = self->state;
  st.be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  st.runner = std::make_unique<worker::mlp_runner>(ctx->model, *st.be, 1000);
  st.params = st.be->alloc(ctx->model.num_params());
  return {
      [self, ctx](eval_atom, param_snapshot& snap, caf::actor& reply_to) {
        auto& s = self->state;
        s.be->upload(s.params, snap.values->data(), snap.values->size());
        const auto ev = s.runner->evaluate(s.params, ctx->data->test);
        eval_result r{snap.epoch, ev.correct, ev.total, ev.loss_sum};
        self->send(reply_to, eval_atom::value, r);
      },
  };
}

}  // namespace

caf::actor spawn_master(caf::actor_system& sys, std::shared_ptr<const job_context> ctx,
                        caf::actor observer, caf::actor evaluator) {
  auto ep = ctx->master;
  auto net = ctx->net;
  auto a = sys.spawn(master_actor, std::move(ctx), std::move(observer), std::move(evaluator));
  net->bind(ep, a);
  return a;
}

caf::actor spawn_evaluator(caf::actor_system& sys, std::shared_ptr<const job_context> ctx) {
  return sys.spawn<caf::detached>(evaluator_actor, std::move(ctx));
}

}  // namespace coach::actors
