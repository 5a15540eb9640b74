// spec/job_spec_optimizer.cpp: the `optimizer:` section of a job spec and its learning-rate
// schedule (job_spec_sections.hpp).
#include <limits>
#include <string_view>
#include <utility>

#include "spec/job_spec_sections.hpp"

namespace coach::scheduler::detail {
namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

/// The `consistency:` entry of `top` when it names averaging:K, else null.
const entry* averaging_entry(const fields& top) {
  const entry* c = top.find("consistency");
  const bool averaging =
      c != nullptr && c->value.IsScalar() && c->value.Scalar().starts_with("averaging");
  return averaging ? c : nullptr;
}

/// The required `type`, with the defaults it implies (momentum 0.9; adamw: weight decay 0.01).
result<ps::optimizer_config> parse_optimizer_type(const spec_parser& p, const fields& f) {
  const entry* t = f.find("type");
  if (t == nullptr) return p.missing(f, "type");
  // adamw is adam with the weight decay decoupled (kernels::adam_options::decoupled).
  using kind_and_decoupled = std::pair<ps::optimizer_kind, bool>;
  auto kind = p.get_enum<kind_and_decoupled>(*t,
                                             {{"sgd", {ps::optimizer_kind::sgd, false}},
                                              {"momentum", {ps::optimizer_kind::momentum, false}},
                                              {"adam", {ps::optimizer_kind::adam, false}},
                                              {"adamw", {ps::optimizer_kind::adam, true}}},
                                             "sgd, momentum, adam, adamw");
  if (!kind) return std::unexpected(std::move(kind.error()));
  ps::optimizer_config cfg{};
  cfg.kind = kind->first;
  cfg.adam.decoupled = kind->second;
  if (cfg.kind == ps::optimizer_kind::momentum) cfg.sgd.momentum = 0.9f;
  if (cfg.adam.decoupled) cfg.sgd.weight_decay = cfg.adam.weight_decay = 0.01f;  // PyTorch's
  return cfg;
}

/// learning_rate, weight_decay, momentum, beta1, beta2, epsilon: each refused where the type
/// has no such value.
result<void> parse_rates(const spec_parser& p, const fields& f, ps::optimizer_config& cfg) {
  if (const entry* e = f.find("learning_rate")) {
    auto v = p.get_float(*e, 0.0, true, inf, false);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.sgd.learning_rate = *v;
    cfg.adam.learning_rate = *v;
  }
  if (const entry* e = f.find("weight_decay")) {
    auto v = p.get_float(*e, 0.0, false, inf, false);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.sgd.weight_decay = *v;
    cfg.adam.weight_decay = *v;
  }
  if (const entry* e = f.find("momentum")) {
    if (cfg.kind != ps::optimizer_kind::momentum) {
      return p.bad(*e, "applies only to type momentum, not {}", cfg.type_name());
    }
    auto v = p.get_float(*e, 0.0, false, 1.0, true);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.sgd.momentum = *v;
  }
  const bool adam = cfg.kind == ps::optimizer_kind::adam;
  for (std::string_view key : {"beta1", "beta2", "epsilon"}) {
    const entry* e = f.find(key);
    if (e == nullptr) continue;
    if (!adam) return p.bad(*e, "applies only to type adam or adamw, not {}", cfg.type_name());
    auto v = key == "epsilon" ? p.get_float(*e, 0.0, true, inf, false)
                              : p.get_float(*e, 0.0, false, 1.0, true);
    if (!v) return std::unexpected(std::move(v.error()));
    if (key == "beta1") cfg.adam.beta1 = *v;
    if (key == "beta2") cfg.adam.beta2 = *v;
    if (key == "epsilon") cfg.adam.epsilon = *v;
  }
  return {};
}

/// every_epochs, gamma and min_lr of a schedule: each belongs to one type.
result<void> parse_schedule_values(const spec_parser& p, const fields& sf,
                                   ps::optimizer_config& cfg) {
  ps::lr_schedule& sched = cfg.schedule;
  for (std::string_view key : {"every_epochs", "gamma", "min_lr"}) {
    const entry* e = sf.find(key);
    if (e == nullptr) continue;
    const auto owner = key == "min_lr" ? ps::schedule_kind::cosine : ps::schedule_kind::step;
    if (sched.kind != owner) {
      return p.bad(*e, "applies only to type {}, not {}", ps::to_string(owner),
                   ps::to_string(sched.kind));
    }
    auto v = key == "every_epochs" ? p.get_number(*e, 0.0, true, inf, false)
             : key == "gamma"      ? p.get_number(*e, 0.0, true, 1.0, false)
                                   : p.get_number(*e, 0.0, false, inf, false);
    if (!v) return std::unexpected(std::move(v.error()));
    if (key == "every_epochs") sched.every_epochs = *v;
    if (key == "gamma") sched.gamma = *v;
    if (key == "min_lr") {
      // Compared as the float the rate is: a min_lr equal to the rate is refused too.
      if (!(float(*v) < cfg.base_learning_rate())) {
        return p.bad(*e, "must be < the learning_rate ({}), got {}", cfg.base_learning_rate(),
                     describe(e->value));
      }
      sched.min_lr = *v;
    }
  }
  return {};
}

/// The optional `schedule` entry `s` of the optimizer map into cfg.schedule.
result<void> parse_lr_schedule(const spec_parser& p, const fields& top, const entry& s,
                               ps::optimizer_config& cfg) {
  auto sf = p.open_map(s, {"type", "every_epochs", "gamma", "min_lr", "warmup_epochs"});
  if (!sf) return std::unexpected(std::move(sf.error()));
  ps::lr_schedule& sched = cfg.schedule;
  if (const entry* e = sf->find("type")) {
    auto v = p.get_enum<ps::schedule_kind>(*e,
                                           {{"constant", ps::schedule_kind::constant},
                                            {"step", ps::schedule_kind::step},
                                            {"cosine", ps::schedule_kind::cosine}},
                                           "constant, step, cosine");
    if (!v) return std::unexpected(std::move(v.error()));
    sched.kind = *v;
  }
  if (auto r = parse_schedule_values(p, *sf, cfg); !r) return r;
  if (sched.kind == ps::schedule_kind::step && sf->find("every_epochs") == nullptr) {
    return p.bad(errc::invalid_argument, sf->line(), sf->path("every_epochs"),
                 "is required with type step");
  }
  if (const entry* e = sf->find("warmup_epochs")) {
    auto v = p.get_number(*e, 0.0, false, inf, false);
    if (!v) return std::unexpected(std::move(v.error()));
    sched.warmup_epochs = *v;
  }
  // Under averaging:K the shards average models (scheduler::shard_optimizer) and the workers
  // train with the constant rate: a schedule would be silently ignored.
  const entry* c = averaging_entry(top);
  if (cfg.scheduled() && c != nullptr) {
    return p.bad(s,
                 "is not supported with consistency {}: the workers train with the constant "
                 "learning_rate there",
                 printable(c->value.Scalar()));
  }
  return {};
}

}  // namespace

result<void> parse_optimizer(const spec_parser& p, const fields& top, job_spec& spec) {
  const entry* o = top.find("optimizer");
  if (o == nullptr) return p.missing(top, "optimizer");
  auto f = p.open_map(*o, {"type", "learning_rate", "momentum", "weight_decay", "beta1", "beta2",
                           "epsilon", "clip_norm", "schedule"});
  if (!f) return std::unexpected(std::move(f.error()));
  ps::optimizer_config& cfg = spec.optimizer;
  auto typed = parse_optimizer_type(p, *f);
  if (!typed) return std::unexpected(std::move(typed.error()));
  cfg = std::move(*typed);
  if (auto r = parse_rates(p, *f, cfg); !r) return r;
  if (const entry* e = f->find("clip_norm")) {
    auto v = p.get_float(*e, 0.0, true, inf, false);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.clip_norm = *v;
    if (const entry* c = averaging_entry(top))
      return p.bad(*e,
                   "is not supported with consistency {}: the workers push model deltas there, "
                   "not gradients",
                   printable(c->value.Scalar()));
  }
  const entry* s = f->find("schedule");
  if (s == nullptr) return {};
  return parse_lr_schedule(p, top, *s, cfg);
}

}  // namespace coach::scheduler::detail

namespace coach::scheduler::detail {

result<void> parse_sparse_optimizer(const spec_parser& p, const fields& top, job_spec& spec) {
  const entry* o = top.find("sparse_optimizer");
  if (o == nullptr) return {};
  // A script's tables are known once its first process registered them: apply_script_tables.
  if (spec.model.embeddings.empty() && !spec.model.script)
    return p.bad(*o, "is for a model with embedding tables (model.embeddings), which this has not");
  auto f = p.open_map(*o, {"type", "learning_rate", "weight_decay", "epsilon",
                           "initial_accumulator", "beta1", "beta2"});
  if (!f) return std::unexpected(std::move(f.error()));
  sparse::row_optimizer_config cfg;
  if (const entry* e = f->find("type")) {
    auto s = p.get_string(*e);
    if (!s) return std::unexpected(std::move(s.error()));
    auto k = sparse::parse_row_optimizer_kind(*s);
    if (!k) return p.bad(*e, "must be one of sgd, adagrad, lazy_adam, got {}", describe(e->value));
    cfg.kind = *k;
  }
  if (cfg.kind == sparse::row_optimizer_kind::lazy_adam) cfg.epsilon = 1e-8f;  // Adam's usual
  const auto number = [&](std::string_view key, double lo, bool lo_open, double hi, bool hi_open,
                          float& into) -> result<void> {
    const entry* e = f->find(key);
    if (e == nullptr) return {};
    auto v = p.get_float(*e, lo, lo_open, hi, hi_open);
    if (!v) return std::unexpected(std::move(v.error()));
    into = *v;
    return {};
  };
  // A value the type does not use is refused, as in `optimizer:`.
  for (std::string_view key : {"beta1", "beta2"})
    if (const entry* e = f->find(key); e && cfg.kind != sparse::row_optimizer_kind::lazy_adam)
      return p.bad(*e, "applies only to type lazy_adam, not {}", sparse::to_string(cfg.kind));
  if (const entry* e = f->find("initial_accumulator");
      e && cfg.kind != sparse::row_optimizer_kind::adagrad)
    return p.bad(*e, "applies only to type adagrad, not {}", sparse::to_string(cfg.kind));
  if (const entry* e = f->find("epsilon"); e && cfg.kind == sparse::row_optimizer_kind::sgd)
    return p.bad(*e, "applies only to types adagrad and lazy_adam, not sgd");
  if (auto r = number("learning_rate", 0.0, true, inf, false, cfg.learning_rate); !r) return r;
  if (auto r = number("weight_decay", 0.0, false, inf, false, cfg.weight_decay); !r) return r;
  if (auto r = number("epsilon", 0.0, true, inf, false, cfg.epsilon); !r) return r;
  if (auto r = number("initial_accumulator", 0.0, false, inf, false, cfg.initial_accumulator); !r)
    return r;
  if (auto r = number("beta1", 0.0, false, 1.0, true, cfg.beta1); !r) return r;
  if (auto r = number("beta2", 0.0, false, 1.0, true, cfg.beta2); !r) return r;
  if (auto ok = cfg.validate(); !ok)
    return fail(errc::invalid_argument, "{}:{}: {}", p.source(), spec_parser::line_of(*o),
                ok.error().message);
  spec.sparse_optimizer = cfg;
  return {};
}

}  // namespace coach::scheduler::detail
