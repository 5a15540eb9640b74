// worker/script_invocations.cpp: a worker's processes of its job's script
// (script_invocations.hpp).
#include "worker/script_invocations.hpp"

#include <algorithm>

#include "common/format.hpp"
#include "common/log.hpp"
#include "worker/function_runner.hpp"

namespace coach::worker {

script_invocations::script_invocations(std::shared_ptr<external_pool> pool, std::string who,
                                       std::optional<script_limits> limits)
    : pool_(std::move(pool)), who_(std::move(who)), limits_(limits) {
  if (limits_) {
    limits_->steps_per_invocation = std::max<std::uint32_t>(1, limits_->steps_per_invocation);
    limits_->max_attempts = std::max<std::uint32_t>(1, limits_->max_attempts);
  }
}

script_invocations::~script_invocations() {
  if (current_) totals_ += current_->totals();
  if (totals_.steps > 0) log::info("{}: {}", who_, totals_.summary());
  if (current_) current_->stop();  // its steps() end: the script runs on to its end
}

void script_invocations::retire() {
  totals_ += current_->totals();
  count_end(counts_, process_end::completed);
  pool_->retire(std::move(current_));
  answered_ = 0;
  lookup_step_ = -1;
}

void script_invocations::drop_failed() {
  // It ended without answering: "completed" cannot be how.
  const process_end end = current_->ended_as();
  count_end(counts_, end == process_end::completed ? process_end::failed : end);
  totals_ += current_->totals();
  current_.reset();  // killed and reaped
  answered_ = 0;
  lookup_step_ = -1;
}

result<external_step> script_invocations::step(std::int64_t step, std::uint32_t rank,
                                               const float* params,
                                               std::span<const std::uint32_t> indices, float* grad,
                                               const external_step_rows* rows) {
  if (!limits_) {
    if (!current_) {
      auto p = pool_->take(who_);
      if (!p) return std::unexpected(p.error());
      current_ = std::move(*p);
    }
    return current_->step(step, rank, params, indices, grad, nullptr, rows);
  }
  external_step out;
  auto ok = bounded(
      step,
      [&](external_process& p, const invocation_deadline* d) -> result<void> {
        // A script with tables: a process that did not answer this step's lookup (a fresh one
        // after a failed invocation) is asked it first: its Embeddings map ids to the rows by
        // it. The script's lookups are a function of the samples: the same ids, the same rows.
        if (rows != nullptr && lookup_step_ != step) {
          auto ids = p.lookup(step, indices, d);
          if (!ids) return std::unexpected(ids.error());
          lookup_step_ = step;
        }
        auto r = p.step(step, rank, params, indices, grad, d, rows);
        if (!r) return std::unexpected(r.error());
        out = *r;
        return {};
      },
      true);
  if (!ok) return std::unexpected(ok.error());
  return out;
}

result<std::vector<std::vector<std::uint64_t>>> script_invocations::lookup(
    std::int64_t step, std::span<const std::uint32_t> indices) {
  if (!limits_) {
    if (!current_) {
      auto p = pool_->take(who_);
      if (!p) return std::unexpected(p.error());
      current_ = std::move(*p);
    }
    return current_->lookup(step, indices);
  }
  std::vector<std::vector<std::uint64_t>> ids;
  auto ok = bounded(
      step,
      [&](external_process& p, const invocation_deadline* d) -> result<void> {
        auto r = p.lookup(step, indices, d);
        if (!r) return std::unexpected(r.error());
        ids = std::move(*r);
        lookup_step_ = step;
        return {};
      },
      false);
  if (!ok) return std::unexpected(ok.error());
  return ids;
}

result<void> script_invocations::bounded(std::int64_t step, const bounded_call& call, bool task) {
  const auto& lim = *limits_;
  std::string last;
  for (std::uint32_t attempt = 0; attempt < lim.max_attempts;) {
    if (!current_) {
      ++counts_.started;
      next_started_ = false;
      lookup_step_ = -1;
      auto p = pool_->take(who_);
      if (!p) {
        // A script that cannot start under the limits (too little memory for its imports)
        // counts as such; one that cannot run at all, or whose layout differs, is the error.
        if (p.error().code != errc::resource_exhausted && p.error().code != errc::io_error)
          return std::unexpected(p.error());
        ++(p.error().code == errc::resource_exhausted ? counts_.out_of_memory : counts_.failed);
        last = p.error().message;
        ++attempt;
        continue;
      }
      current_ = std::move(*p);
      invoked_ = std::chrono::steady_clock::now();
    }
    // The next invocation's process starts beside this one's last step.
    if (task && !next_started_ && answered_ + 1 >= lim.steps_per_invocation) {
      pool_->prestart(1);
      next_started_ = true;
    }
    const invocation_deadline d{invoked_ + lim.deadline, double(lim.deadline.count()) / 1000.0};
    auto r = call(*current_, lim.deadline.count() > 0 ? &d : nullptr);
    if (r) {
      if (!task) return {};
      ++answered_;
      ++counts_.tasks;
      counts_.peak_memory_bytes =
          std::max(counts_.peak_memory_bytes, current_->peak_memory_bytes());
      if (answered_ >= lim.steps_per_invocation) retire();
      return {};
    }
    // A script's own failure is not the limits': it would fail again.
    if (r.error().code != errc::resource_exhausted && r.error().code != errc::io_error)
      return std::unexpected(r.error());
    log::warn("{} (step {} goes to a fresh process)", r.error().message, step);
    // A process that answered earlier steps does not count against this one.
    if (answered_ == 0) ++attempt;
    last = r.error().message;
    drop_failed();
  }
  return fail(errc::resource_exhausted,
              "function mode: {} processes of the script in a row ended without finishing step {} "
              "(the last: {}); the limits (deadline {:g} s, memory {} MB; 0 = none) are too small "
              "for this script and batch",
              lim.max_attempts, step, last, double(lim.deadline.count()) / 1000.0,
              lim.memory_bytes >> 20);
}

}  // namespace coach::worker
