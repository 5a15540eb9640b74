#include "ps/shard.hpp"

#include <algorithm>
#include <cstring>

#include "common/enforce.hpp"

namespace coach::ps {

shard::shard(std::uint32_t id, const optimizer_config& opt, kernels::backend& be,
             std::vector<key_range> ranges, std::span<const float> initial)
    : id_(id), opt_(opt), be_(be), ranges_(std::move(ranges)) {
  std::size_t total = 0;
  for (const auto& r : ranges_) {
    offsets_.push_back(total);
    total += r.size();
  }
  COACH_ENFORCE(initial.size() == total, "shard: initial values do not match the ranges");
  pool_ = std::make_unique<buffer_pool>(total);
  values_ = pool_->acquire();
  std::copy(initial.begin(), initial.end(), values_->data());
  const std::size_t per = opt_.state_per_param();
  if (per >= 1) state_a_.assign(total, 0.0f);
  if (per >= 2) state_b_.assign(total, 0.0f);
  acc_.assign(total, 0.0f);
}

void shard::set_members(std::vector<std::uint32_t> ranks) {
  COACH_ENFORCE(pending_.empty(), "set_members while a step is partially pushed");
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  members_ = std::move(ranks);
}

result<bool> shard::push(std::int64_t step, contribution c) {
  if (step != applied_)
    return fail(errc::protocol_error, "shard {}: rank {} pushed step {} but the open step is {}",
                id_, c.rank, step, applied_);
  if (!std::binary_search(members_.begin(), members_.end(), c.rank))
    return fail(errc::protocol_error, "shard {}: rank {} is not a member of step {}", id_, c.rank,
                step);
  if (pending_.contains(c.rank))
    return fail(errc::protocol_error, "shard {}: rank {} pushed step {} twice", id_, c.rank, step);
  if (c.samples > 0) {
    if (c.parts.size() != ranges_.size())
      return fail(errc::protocol_error, "shard {}: rank {} sent {} parts for {} ranges", id_,
                  c.rank, c.parts.size(), ranges_.size());
    for (std::size_t i = 0; i < ranges_.size(); ++i)
      if (c.parts[i].size() != ranges_[i].size())
        return fail(errc::protocol_error, "shard {}: rank {} part {} has {} floats, expected {}",
                    id_, c.rank, i, c.parts[i].size(), ranges_[i].size());
  }
  pending_.emplace(c.rank, std::move(c));
  if (pending_.size() < members_.size()) return false;
  apply();
  return true;
}

void shard::apply() {
  // Sum in rank order (std::map iterates by rank): independent of arrival order.
  std::uint64_t samples = 0;
  double loss = 0;
  const contribution* first = nullptr;
  std::size_t with_data = 0;
  for (const auto& [rank, c] : pending_) {
    loss += c.loss_sum;
    if (c.samples == 0) continue;
    samples += c.samples;
    if (with_data++ == 0) {
      first = &c;
      continue;
    }
    if (with_data == 2) {
      for (std::size_t i = 0; i < ranges_.size(); ++i)
        std::memcpy(acc_.data() + offsets_[i], first->parts[i].data(),
                    first->parts[i].size() * sizeof(float));
    }
    for (std::size_t i = 0; i < ranges_.size(); ++i)
      be_.axpy(c.parts[i].size(), 1.0f, c.parts[i].data(), acc_.data() + offsets_[i]);
  }
  if (samples > 0) {
    ++updates_;
    if (values_.use_count() > 1) {  // someone still reads the current values: copy on write
      auto fresh = pool_->acquire();
      std::memcpy(fresh->data(), values_->data(), values_->size() * sizeof(float));
      values_ = std::move(fresh);
    }
    const float scale = float(1.0 / double(samples));
    for (std::size_t i = 0; i < ranges_.size(); ++i) {
      const std::size_t off = offsets_[i];
      const std::size_t n = ranges_[i].size();
      const float* g = with_data == 1 ? first->parts[i].data() : acc_.data() + off;
      float* w = values_->data() + off;
      switch (opt_.kind) {
        case optimizer_kind::sgd: {
          kernels::sgd_options o = opt_.sgd;
          o.momentum = 0.0f;
          be_.sgd_update(w, nullptr, g, n, scale, o);
          break;
        }
        case optimizer_kind::momentum:
          be_.sgd_update(w, state_a_.data() + off, g, n, scale, opt_.sgd);
          break;
        case optimizer_kind::adam:
          be_.adam_update(w, state_a_.data() + off, state_b_.data() + off, g, n, scale, updates_,
                          opt_.adam);
          break;
      }
    }
  }
  last_samples_ = samples;
  last_loss_ = loss;
  pending_.clear();
  ++applied_;
}

}  // namespace coach::ps
