// ps::shard (ps/shard.hpp): pushes, configurations and the optimizer's application. Its slice
// transfers are in ps/shard_transfer.cpp, its sparse rows in ps/shard_rows.cpp.

#include "ps/shard.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "common/enforce.hpp"

namespace coach::ps {

shard::shard(std::uint32_t id, const optimizer_config& opt, kernels::backend& be,
             std::vector<key_range> ranges, std::span<const float> initial, shard_options options)
    : id_(id), opt_(opt), be_(be), options_(options), ranges_(std::move(ranges)) {
  COACH_ENFORCE(options_.piece_floats >= 1 && options_.piece_floats % piece_multiple == 0,
                "shard: piece_floats must be a positive multiple of ps::piece_multiple");
  std::size_t total = 0;
  for (const auto& r : ranges_) {
    offsets_.push_back(total);
    total += r.size();
  }
  COACH_ENFORCE(initial.size() == total, "shard: initial values do not match the ranges");
  for (std::size_t i = 0; i < opt_.statistics.size(); ++i) {
    const auto& st = opt_.statistics[i];
    COACH_ENFORCE(
        st.keys.size() > 0 && (i == 0 || opt_.statistics[i - 1].keys.end <= st.keys.begin),
        "shard: statistic ranges must be non-empty, ascending and disjoint");
    COACH_ENFORCE(st.momentum >= 0.0f && st.momentum <= 1.0f,
                  "shard: a statistic range's momentum must be in [0, 1]");
  }
  COACH_ENFORCE(!opt_.scheduled() || opt_.samples_per_epoch > 0,
                "shard: a learning-rate schedule needs samples_per_epoch");
  COACH_ENFORCE(opt_.schedule.kind != schedule_kind::cosine || opt_.epochs >= 1,
                "shard: a cosine schedule needs epochs >= 1");
  pool_ = std::make_unique<buffer_pool>(total);
  values_ = pool_->acquire();
  std::copy(initial.begin(), initial.end(), values_->data());
  const std::size_t per = opt_.state_per_param();
  if (per >= 1) state_a_.assign(total, 0.0f);
  if (per >= 2) state_b_.assign(total, 0.0f);
  acc_.assign(std::min(total, options_.piece_floats), 0.0f);
  if (options_.rows) {
    const auto& r = *options_.rows;
    COACH_ENFORCE(r.num_params >= 1 && r.num_params <= max_rows_num_params,
                  "shard: sparse rows need a model with 1 to 2^47 dense parameters");
    auto store =
        sparse::row_store::create(r.seed, r.tables, r.optimizer, buckets_of(ranges_, r.num_params));
    COACH_ENFORCE(store.has_value(), "shard: the sparse tables' configuration is invalid");
    rows_.emplace(std::move(*store));
  }
}

void shard::set_members(std::vector<std::uint32_t> ranks) {
  COACH_ENFORCE(pending_.empty(), "set_members while a step is partially pushed");
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  schedule_.clear();
  schedule_[applied_] = ranks;
  assigned_.clear();
  members_ = std::move(ranks);
}

result<void> shard::check_parts(const contribution& c) const {
  if (c.samples == 0) return {};
  if (!c.rows.empty() && !rows_)
    return fail(errc::protocol_error, "shard {}: rank {} pushed sparse rows; the model has none",
                id_, c.rank);
  for (const auto& part : c.rows)
    if (auto ok = rows_->check(part.table, part.ids, part.grads.size(), "a push"); !ok)
      return fail(errc::protocol_error, "shard {}: rank {}: {}", id_, c.rank, ok.error().message);
  if (c.parts.size() != ranges_.size())
    return fail(errc::protocol_error, "shard {}: rank {} sent {} parts for {} ranges", id_, c.rank,
                c.parts.size(), ranges_.size());
  for (std::size_t i = 0; i < ranges_.size(); ++i)
    if (c.parts[i].size() != ranges_[i].size())
      return fail(errc::protocol_error, "shard {}: rank {} part {} has {} floats, expected {}", id_,
                  c.rank, i, c.parts[i].size(), ranges_[i].size());
  return {};
}

result<bool> shard::push(std::int64_t step, contribution c, const piece_callback& on_piece) {
  if (step != applied_)
    return fail(errc::protocol_error, "shard {}: rank {} pushed step {} but the open step is {}",
                id_, c.rank, step, applied_);
  if (!std::binary_search(members_.begin(), members_.end(), c.rank))
    return fail(errc::protocol_error, "shard {}: rank {} is not a member of step {}", id_, c.rank,
                step);
  if (pending_.contains(c.rank))
    return fail(errc::protocol_error, "shard {}: rank {} pushed step {} twice", id_, c.rank, step);
  if (auto ok = check_parts(c); !ok) return std::unexpected(ok.error());
  pending_.emplace(c.rank, std::move(c));
  return maybe_apply(on_piece);
}

result<bool> shard::push(std::int64_t step, std::uint64_t config_version, contribution c,
                         const piece_callback& on_piece) {
  // Held for the configuration, or for the ranges it gives this shard (a shard added to the
  // job owns nothing, and has no version, until its slices arrive).
  if (options_.one_push_per_step) return push_alone(step, config_version, std::move(c), on_piece);
  const bool held = config_version > config_version_ || (step >= applied_ && !owns_assigned(step));
  if (!held && step > applied_ + options_.max_ahead)
    return fail(errc::protocol_error,
                "shard {}: rank {} pushed step {} but the open step is {} (at most {} ahead)", id_,
                c.rank, step, applied_, options_.max_ahead);
  if (held || step > applied_) {  // ssp:S: a later step waits for its turn
    held_.push_back({step, config_version, std::move(c)});
    return false;
  }
  return push(step, std::move(c), on_piece);
}

bool shard::owns_assigned(std::int64_t step) const {
  auto it = assigned_.upper_bound(step);
  if (it == assigned_.begin()) return true;
  const auto& want = std::prev(it)->second;
  return !want || *want == ranges_;
}

bool shard::holds_push(std::int64_t step, std::uint32_t rank) const {
  if (step == applied_ && pending_.contains(rank)) return true;
  return std::any_of(held_.begin(), held_.end(),
                     [&](const held_push& h) { return h.step == step && h.c.rank == rank; });
}

result<int> shard::resume() {
  return take_held();
}

bool shard::maybe_apply(const piece_callback& on_piece) {
  for (auto r : members_)
    if (!pending_.contains(r)) return false;
  apply(on_piece, applied_);
  // The members of the step that opens now.
  if (auto it = schedule_.upper_bound(applied_); it != schedule_.begin())
    members_ = std::prev(it)->second;
  return true;
}

result<int> shard::configure(const job_config& c) {
  return configure(std::span(&c, 1));
}

result<int> shard::configure(std::span<const job_config> batch) {
  bool changed = false;
  for (const auto& c : batch) {
    if (c.version <= config_version_) continue;
    changed = true;
    config_version_ = c.version;
    auto members = c.members;
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    const std::int64_t from = std::max(c.from_step, applied_);
    schedule_.erase(schedule_.lower_bound(from), schedule_.end());
    schedule_[from] = std::move(members);
    assigned_.erase(assigned_.lower_bound(from), assigned_.end());
    if (c.map.num_params() > 0)
      assigned_[from] = c.map.ranges_of(id_);
    else
      assigned_[from] = std::nullopt;
    if (from == applied_) members_ = schedule_[from];
  }
  if (!changed) return 0;
  // A removed member may have been the last one the open step waited for.
  int completed = !pending_.empty() && maybe_apply({}) ? 1 : 0;
  auto more = take_held();
  if (!more) return std::unexpected(more.error());
  return completed + *more;
}

result<int> shard::take_held() {
  if (options_.one_push_per_step) return take_held_alone();
  int completed = 0;
  std::optional<coach::error> first;
  // A push taken can complete a step, which can make pushes of the next step takeable.
  for (bool more = true; more;) {
    std::vector<held_push> ready, later;
    for (auto& h : held_) {
      const bool takeable = h.config_version <= config_version_ &&
                            (h.step < applied_ || owns_assigned(h.step)) && h.step <= applied_;
      (takeable ? ready : later).push_back(std::move(h));
    }
    held_ = std::move(later);
    more = false;
    std::stable_sort(ready.begin(), ready.end(), [](const held_push& a, const held_push& b) {
      return a.step != b.step ? a.step < b.step : a.c.rank < b.c.rank;
    });
    for (auto& h : ready) {
      // Held past the configuration that removed its rank from the step (the worker died):
      // dropped, as a push that arrives after that configuration is refused.
      if (h.step == applied_ && !pending_.contains(h.c.rank) &&
          !std::binary_search(members_.begin(), members_.end(), h.c.rank))
        continue;
      auto done = push(h.step, std::move(h.c));
      if (!done && !first) first = done.error();
      if (done && *done) ++completed, more = true;
    }
  }
  if (first) return std::unexpected(*first);
  return completed;
}

void shard::apply(const piece_callback& on_piece, std::int64_t step) {
  // Sum in rank order (std::map iterates by rank): independent of arrival order.
  std::uint64_t samples = 0;
  double loss = 0;
  with_data_.clear();
  for (const auto& [rank, c] : pending_) {
    loss += c.loss_sum;
    if (c.samples == 0) continue;
    samples += c.samples;
    with_data_.push_back(&c);
  }
  const bool adascale = opt_.lr_scaling == lr_scaling_kind::adascale;
  std::optional<grad_stats> stats;  // this step's sums over this shard's keys (adascale)
  if (samples > 0) {
    ++updates_;
    // The schedule's rate at the progress before this step's samples.
    step_lr_ = opt_.scaled_rate(opt_.learning_rate_at(opt_.progress(samples_applied_)), samples);
    if (adascale) {
      // Every shard folds in the same totals (the lowest rank's that has them) and so gives
      // every key the same rate (ps/adascale.hpp).
      for (const auto& [rank, c] : pending_)
        if (c.stats) {
          gain_.observe(*c.stats);
          break;
        }
      step_lr_ =
          float(double(step_lr_) * gain_.gain(double(opt_.reference_batch), double(samples)));
      if (with_data_.size() >= 2) {
        stats.emplace();
        stats->version = applied_ + 1;
        stats->samples = double(samples);
        stats->contributions = double(with_data_.size());
        stats_parts_.resize(with_data_.size());
        stats_samples_.clear();
        for (const auto* c : with_data_) stats_samples_.push_back(c->samples);
      }
    }
    samples_applied_ += samples;
    // Once, before any piece of this step is written or shared: someone still reads the current
    // values, so copy on write.
    if (values_.use_count() > 1) {
      auto fresh = pool_->acquire();
      std::memcpy(fresh->data(), values_->data(), values_->size() * sizeof(float));
      values_ = std::move(fresh);
    }
  }
  const float scale = samples > 0 ? float(1.0 / double(samples)) : 0.0f;
  const std::size_t most = options_.piece_floats;
  for (std::size_t i = 0; i < ranges_.size(); ++i) {
    const std::size_t n = ranges_[i].size();
    for (std::size_t at = 0; at < n; at += most) {
      const std::size_t len = std::min(most, n - at);
      const std::size_t off = offsets_[i] + at;
      if (samples > 0) {
        // Each element's sum is first + second + ... in rank order, whatever the piece.
        const float* g = with_data_[0]->parts[i].data() + at;
        if (with_data_.size() > 1) {
          std::memcpy(acc_.data(), g, len * sizeof(float));
          for (std::size_t k = 1; k < with_data_.size(); ++k)
            be_.axpy(len, 1.0f, with_data_[k]->parts[i].data() + at, acc_.data());
          g = acc_.data();
        }
        if (stats) {
          for (std::size_t k = 0; k < with_data_.size(); ++k)
            stats_parts_[k] = with_data_[k]->parts[i].data() + at;
          add_to_stats(*stats, stats_parts_, stats_samples_, g, len);
        }
        update(off, ranges_[i].begin + at, len, g, scale);
      }
      // The step's sums are whole once its last piece is: before that piece goes out, so that
      // the message carrying it carries them too (actors/shard_actor.cpp, params_to).
      if (adascale && i + 1 == ranges_.size() && at + len == n) last_stats_ = stats;
      if (on_piece) {
        const std::uint64_t begin = ranges_[i].begin + at;
        on_piece(piece{applied_ + 1, i, off, key_range{begin, begin + len}});
      }
    }
  }
  if (samples > 0) apply_rows(scale);
  with_data_.clear();
  if (adascale) last_stats_ = stats;
  last_samples_ = samples;
  last_loss_ = loss;
  if (options_.on_applied) {
    std::vector<std::pair<std::uint32_t, std::uint64_t>> taken;
    for (const auto& [rank, c] : pending_) taken.push_back({rank, c.samples});
    options_.on_applied(step, taken);
  }
  pending_.clear();
  ++applied_;
}

result<bool> shard::push_alone(std::int64_t step, std::uint64_t config_version, contribution c,
                               const piece_callback& on_piece) {
  if (step < applied_ || applied_ahead_.contains(step)) {
    ++stale_dropped_;  // its step has its contribution already
    return false;
  }
  if (config_version > config_version_ || !owns_assigned(step)) {
    held_.push_back({step, config_version, std::move(c)});
    return false;
  }
  if (auto it = schedule_.upper_bound(step);
      it != schedule_.begin() &&
      !std::binary_search(std::prev(it)->second.begin(), std::prev(it)->second.end(), c.rank))
    return fail(errc::protocol_error, "shard {}: rank {} is not a member of step {}", id_, c.rank,
                step);
  if (auto ok = check_parts(c); !ok) return std::unexpected(ok.error());
  pending_.clear();
  pending_.emplace(c.rank, std::move(c));
  const std::int64_t before = applied_;
  apply(on_piece, step);  // advances applied_ by one: put right below when `step` is later
  if (step != before) {
    applied_ = before;
    applied_ahead_.insert(step);
  }
  while (applied_ahead_.erase(applied_) > 0) ++applied_;
  if (auto it = schedule_.upper_bound(applied_); it != schedule_.begin())
    members_ = std::prev(it)->second;
  return true;
}

result<int> shard::take_held_alone() {
  int completed = 0;
  std::optional<coach::error> first;
  std::vector<held_push> held;
  held.swap(held_);
  std::stable_sort(held.begin(), held.end(),
                   [](const held_push& a, const held_push& b) { return a.step < b.step; });
  for (auto& h : held) {
    auto done = push_alone(h.step, h.config_version, std::move(h.c), {});
    if (!done && !first) first = done.error();
    if (done && *done) ++completed;
  }
  if (first) return std::unexpected(*first);
  return completed;
}

void shard::update(std::size_t off, std::uint64_t key, std::size_t n, const float* g, float scale) {
  const auto& stats = opt_.statistics;
  // The first statistic range that ends after `key`; the keys are cut at the edges of those
  // they meet.
  auto it = std::partition_point(stats.begin(), stats.end(),
                                 [key](const statistic_range& r) { return r.keys.end <= key; });
  const std::uint64_t end = key + n;
  for (std::uint64_t at = key; at < end;) {
    const std::size_t d = std::size_t(at - key);
    if (it == stats.end() || it->keys.begin >= end) {
      optimize(off + d, std::size_t(end - at), g + d, scale);
      break;
    }
    if (it->keys.begin > at) {
      optimize(off + d, std::size_t(it->keys.begin - at), g + d, scale);
      at = it->keys.begin;
      continue;
    }
    // A running statistic: w = (1 - m) w + m (scale g), over host memory (a cpu backend).
    const std::uint64_t stop = std::min(end, it->keys.end);
    float* w = values_->data() + off + d;
    const float* x = g + d;
    const float m = it->momentum;
    const float keep = 1.0f - m;
    for (std::size_t k = 0, len = std::size_t(stop - at); k < len; ++k)
      w[k] = keep * w[k] + m * (scale * x[k]);
    at = stop;
    ++it;
  }
}

void shard::optimize(std::size_t off, std::size_t n, const float* g, float scale) {
  float* w = values_->data() + off;
  switch (opt_.kind) {
    case optimizer_kind::sgd: {
      kernels::sgd_options o = opt_.sgd;
      o.momentum = 0.0f;
      o.learning_rate = step_lr_;
      be_.sgd_update(w, nullptr, g, n, scale, o);
      break;
    }
    case optimizer_kind::momentum: {
      kernels::sgd_options o = opt_.sgd;
      o.learning_rate = step_lr_;
      be_.sgd_update(w, state_a_.data() + off, g, n, scale, o);
      break;
    }
    case optimizer_kind::adam: {
      kernels::adam_options o = opt_.adam;
      o.learning_rate = step_lr_;
      be_.adam_update(w, state_a_.data() + off, state_b_.data() + off, g, n, scale, updates_, o);
      break;
    }
  }
}

}  // namespace coach::ps
