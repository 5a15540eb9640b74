// spec/job_spec_resources.cpp: what a job spec asks to run on: workers and shards (a count or
// a range), gpus_per_worker, backend, precision, slice_size, host_reduce, placement and
// replicas; `function:` (function mode's limits) and `schedule:` (changes at given steps)
// (job_spec_sections.hpp).
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "spec/job_spec_sections.hpp"

namespace coach::scheduler::detail {
namespace {

/// Copies of a shard at most (a primary and three backups).
constexpr std::int64_t max_replicas = 4;

result<count_range> parse_count_range(const spec_parser& p, const entry& e) {
  count_range r;
  if (e.value.IsScalar()) {
    auto n = p.get_int(e, 1, int_max);
    if (!n) return std::unexpected(std::move(n.error()));
    r.min = r.max = r.initial = int(*n);
    return r;
  }
  if (!e.value.IsMap()) {
    return p.bad(e, "must be an integer or a map {{min, max, initial}}, got {}", describe(e.value));
  }
  auto f = p.open_map(e, {"min", "max", "initial"});
  if (!f) return std::unexpected(std::move(f.error()));
  std::optional<int> min, max, initial;
  for (std::string_view key : {"min", "max", "initial"}) {
    const entry* k = f->find(key);
    if (k == nullptr) continue;
    auto v = p.get_int(*k, 1, int_max);
    if (!v) return std::unexpected(std::move(v.error()));
    (key == "min" ? min : key == "max" ? max : initial) = int(*v);
  }
  r.min = min.value_or(1);
  r.initial = initial.value_or(r.min);
  r.max = max.value_or(std::max(r.min, r.initial));
  if (!(r.min <= r.initial && r.initial <= r.max)) {
    return p.bad(e, "needs min <= initial <= max, got min {}, initial {}, max {}", r.min, r.initial,
                 r.max);
  }
  return r;
}

/// The one change of a schedule entry `f` (workers, shards or migrate) into `a`.
result<void> parse_change(const spec_parser& p, const fields& f, const entry& item,
                          const job_spec& spec, schedule_action& a) {
  int given = 0;
  for (std::string_view key : {"workers", "shards", "migrate"}) {
    const entry* k = f.find(key);
    if (k == nullptr) continue;
    if (++given > 1)
      return p.bad(*k, "is a second change in one entry; give one of workers, shards, migrate");
    const auto& range = key == "workers" ? spec.workers : spec.shards;
    if (key == "migrate") {
      auto v = p.get_int(*k, 0, std::numeric_limits<std::uint32_t>::max());
      if (!v) return std::unexpected(std::move(v.error()));
      a.kind = schedule_action::kind_type::migrate;
      a.value = std::uint32_t(*v);
    } else {
      auto v = p.get_int(*k, range.min, range.max);
      if (!v) return std::unexpected(std::move(v.error()));
      a.kind = key == "workers" ? schedule_action::kind_type::workers
                                : schedule_action::kind_type::shards;
      a.value = std::uint32_t(*v);
    }
  }
  if (given == 0)
    return p.bad(errc::invalid_argument, f.line(), item.path,
                 "needs one change: workers, shards or migrate");
  return {};
}

}  // namespace

/// workers, shards, gpus_per_worker, backend, precision, slice_size, host_reduce, placement and
/// replicas.
result<void> parse_resources(const spec_parser& p, const fields& top, job_spec& spec) {
  const entry* e = nullptr;
  if ((e = top.find("workers"))) {
    auto v = parse_count_range(p, *e);
    if (!v) return std::unexpected(std::move(v.error()));
    spec.workers = *v;
  }
  if ((e = top.find("shards"))) {
    auto v = parse_count_range(p, *e);
    if (!v) return std::unexpected(std::move(v.error()));
    spec.shards = *v;
  }
  if ((e = top.find("gpus_per_worker"))) {
    auto v = p.get_int(*e, 0, int_max);
    if (!v) return std::unexpected(std::move(v.error()));
    spec.gpus_per_worker = int(*v);
  }
  if ((e = top.find("backend"))) {
    auto s = p.get_string(*e);
    if (!s) return std::unexpected(std::move(s.error()));
    auto kind = kernels::parse_backend_kind(*s);
    if (!kind) return p.bad(*e, "must be one of auto, cpu, cuda, got {}", describe(e->value));
    spec.backend = *kind;
  }
  if ((e = top.find("precision"))) {
    auto v = p.get_enum<kernels::math_precision>(*e,
                                                 {{"fp32", kernels::math_precision::fp32},
                                                  {"tf32", kernels::math_precision::tf32},
                                                  {"bf16", kernels::math_precision::bf16}},
                                                 "fp32, tf32, bf16");
    if (!v) return std::unexpected(std::move(v.error()));
    spec.precision = *v;
  }
  // A model with embedding tables: its rows ride with the dense keys (ps/shard_rows.hpp), so
  // the slices must be many for the rows to spread over the shards (a CTR model's dense part
  // is small: 16,384-float slices left all its rows on one shard).
  if (!spec.model.embeddings.empty()) spec.slice_size = sparse_slice_size;
  if ((e = top.find("slice_size"))) {
    auto v = p.get_uint(*e, 1);
    if (!v) return std::unexpected(std::move(v.error()));
    if (*v > std::numeric_limits<std::uint32_t>::max()) {
      return p.bad(*e, "must be in [1, {}], got {}", std::numeric_limits<std::uint32_t>::max(), *v);
    }
    spec.slice_size = std::size_t(*v);
  }
  if ((e = top.find("host_reduce"))) {
    auto v = p.get_enum<bool>(*e, {{"true", true}, {"false", false}}, "true, false");
    if (!v) return std::unexpected(std::move(v.error()));
    spec.host_reduce = *v;
  }
  if ((e = top.find("placement"))) {
    auto v = p.get_enum<std::string>(
        *e,
        {{"spread", "spread"}, {"best-fit", "best-fit"}, {"random", "random"}, {"dltap", "dltap"}},
        "spread, best-fit, random, dltap");
    if (!v) return std::unexpected(std::move(v.error()));
    spec.placement = *v;
  }
  if ((e = top.find("replicas"))) {
    auto v = p.get_int(*e, 1, max_replicas);
    if (!v) return std::unexpected(std::move(v.error()));
    // A backup takes over a step in flight from the pushes the workers send it again, which
    // only the bulk-synchronous step boundary makes exact (docs/design.md "Shard replicas").
    if (*v > 1 && spec.consistency.kind != consistency_kind::bsp)
      return p.bad(*e, "must be 1 with consistency {} (backups need bsp), got {}",
                   to_string(spec.consistency), *v);
    spec.replicas = std::uint32_t(*v);
  }
  return {};
}

result<void> parse_function(const spec_parser& p, const entry& e, job_spec& spec) {
  auto f = p.open_map(e, {"deadline_s", "memory_mb", "chunks_per_invocation"});
  if (!f) return std::unexpected(std::move(f.error()));
  function_limits limits;
  if (const entry* d = f->find("deadline_s")) {
    auto v = p.get_number(*d, 0.0, false, std::numeric_limits<double>::infinity(), false);
    if (!v) return std::unexpected(std::move(v.error()));
    limits.deadline_s = *v;
  }
  if (const entry* m = f->find("memory_mb")) {
    auto v = p.get_uint(*m, 0);
    if (!v) return std::unexpected(std::move(v.error()));
    limits.memory_mb = *v;
  }
  if (const entry* c = f->find("chunks_per_invocation")) {
    auto v = p.get_int(*c, 1, 1'000'000);
    if (!v) return std::unexpected(std::move(v.error()));
    limits.chunks_per_invocation = std::uint32_t(*v);
  }
  if (spec.precision != kernels::math_precision::fp32)
    return p.bad(e,
                 "function workers compute in fp32 only (precision: {} asks for products they "
                 "do not run); drop precision or function",
                 kernels::to_string(spec.precision));
  spec.function = limits;
  return {};
}

result<void> parse_schedule(const spec_parser& p, const entry& e, job_spec& spec) {
  if (!e.value.IsSequence())
    return p.bad(e, "must be a list of changes such as {{at_step: 20, workers: 3}}, got {}",
                 describe(e.value));
  for (std::size_t i = 0; i < e.value.size(); ++i) {
    // The item stands as its own key, so a missing field names the item's line.
    const entry item{e.value[i], e.value[i], coach::format("{}[{}]", e.path, i)};
    auto f = p.open_map(item, {"at_step", "workers", "shards", "migrate"});
    if (!f) return std::unexpected(std::move(f.error()));
    schedule_action a;
    const entry* at = f->find("at_step");
    if (at == nullptr) return p.missing(*f, "at_step");
    auto step = p.get_int(*at, 1, std::int64_t(1e12));
    if (!step) return std::unexpected(std::move(step.error()));
    a.at_step = *step;
    if (!spec.schedule.empty() && a.at_step <= spec.schedule.back().at_step)
      return p.bad(*at, "must be greater than the previous change's ({}), got {}",
                   spec.schedule.back().at_step, a.at_step);
    if (auto r = parse_change(p, *f, item, spec, a); !r) return r;
    spec.schedule.push_back(a);
  }
  return {};
}

}  // namespace coach::scheduler::detail
