// ps::shard's slice transfers: release (the source's side), adopt (the destination's), snapshot
// (a copy of the whole state for a replica or a checkpoint) and relayout, which re-lays the
// shard's buffers out after the ranges it owns change. Split from ps/shard.cpp, which holds the
// pushes, the configurations and the optimizer's application; a transfer's rows are moved by
// ps/shard_rows.cpp. The algorithm and its contract are in ps/shard.hpp.

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "common/enforce.hpp"
#include "ps/shard.hpp"

namespace coach::ps {
namespace {

/// A run of keys and where its values start in a shard's buffers.
struct key_run {
  key_range range;
  std::size_t offset = 0;
};

/// Appends the values of `p` in `src` (if src is not empty) to `dst`.
void append(std::vector<float>& dst, std::span<const float> src, const key_run& p) {
  if (src.empty()) return;
  dst.insert(dst.end(), src.begin() + std::ptrdiff_t(p.offset),
             src.begin() + std::ptrdiff_t(p.offset + p.range.size()));
}

/// Sorts ranges and merges adjacent ones.
std::vector<key_range> merged(std::vector<key_range> rs) {
  std::sort(rs.begin(), rs.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
  std::vector<key_range> out;
  for (const auto& r : rs) {
    if (r.size() == 0) continue;
    if (!out.empty() && out.back().end == r.begin)
      out.back().end = r.end;
    else
      out.push_back(r);
  }
  return out;
}

}  // namespace

result<slice_transfer> shard::release(const std::vector<key_range>& ranges, std::uint32_t to) {
  // Held pushes are not accepted yet (they wait for this very release, or a configuration).
  if (!pending_.empty())
    return fail(errc::protocol_error,
                "shard {}: cannot hand over slices while step {} is partially pushed", id_,
                applied_);
  const auto cut = merged(ranges);
  // Cut the owned runs into pieces that stay and pieces that go.
  std::vector<key_run> keep, go;
  std::size_t c = 0;
  for (std::size_t i = 0; i < ranges_.size(); ++i) {
    key_range r = ranges_[i];
    std::size_t off = offsets_[i];
    while (c < cut.size() && cut[c].begin < r.end) {
      const auto& x = cut[c];
      if (x.begin < r.begin || x.end > r.end)
        return fail(errc::protocol_error, "shard {}: keys [{}, {}) are not owned here", id_,
                    x.begin, x.end);
      if (x.begin > r.begin) keep.push_back({{r.begin, x.begin}, off});
      go.push_back({x, off + (x.begin - r.begin)});
      off += x.end - r.begin;
      r.begin = x.end;
      ++c;
    }
    if (r.size() > 0) keep.push_back({r, off});
  }
  if (c < cut.size())
    return fail(errc::protocol_error, "shard {}: keys [{}, {}) are not owned here", id_,
                cut[c].begin, cut[c].end);
  slice_transfer t;
  if (rows_) {
    // The rows of the buckets the leaving keys carry; all or nothing, before any key moves.
    std::vector<key_range> leaving;
    for (const auto& p : go) leaving.push_back(p.range);
    auto blob = rows_->release(buckets_of(merged(leaving), options_.rows->num_params));
    if (!blob) return fail(errc::protocol_error, "shard {}: {}", id_, blob.error().message);
    t.rows = std::move(*blob);
  }
  t.from = id_;
  t.to = to;
  t.version = applied_;
  t.updates = updates_;
  t.samples_applied = samples_applied_;
  t.gain_state = gain_.state();
  if (keep.empty()) {
    // Everything goes: hand the storage over instead of copying it (the owned runs are laid
    // out in key order, so it is the transfer's layout already). While readers hold the values
    // (the step's last answers are still being sent) they are shared: nobody writes them again.
    for (const auto& p : go) t.ranges.push_back(p.range);
    t.ranges = merged(t.ranges);
    t.buffer_shared = values_.use_count() > 1;
    t.buffer = std::move(values_);
    t.state_a = std::move(state_a_);
    t.state_b = std::move(state_b_);
    relayout({}, {}, {}, {});
    return t;
  }
  const std::span<const float> values = values_->span();  // read in place, not copied
  for (const auto& p : go) {
    t.ranges.push_back(p.range);
    append(t.values, values, p);
    append(t.state_a, state_a_, p);
    append(t.state_b, state_b_, p);
  }
  t.ranges = merged(t.ranges);
  std::vector<key_range> kr;
  std::vector<float> kv, ka, kb;
  for (const auto& p : keep) {
    kr.push_back(p.range);
    append(kv, values, p);
    append(ka, state_a_, p);
    append(kb, state_b_, p);
  }
  relayout(merged(kr), std::move(kv), std::move(ka), std::move(kb));
  return t;
}

slice_transfer shard::snapshot() const {
  slice_transfer t;
  t.from = id_;
  t.to = id_;
  t.version = applied_;
  t.updates = updates_;
  t.samples_applied = samples_applied_;
  t.gain_state = gain_.state();
  t.ranges = ranges_;
  const auto v = values_->span();
  t.values.assign(v.begin(), v.end());
  t.state_a = state_a_;
  t.state_b = state_b_;
  if (rows_) t.rows = rows_->save();
  return t;
}

result<void> shard::adopt(slice_transfer&& t) {
  if (!ranges_.empty()) return adopt(std::as_const(t));
  // An empty shard takes a transfer's storage as its own (after the same checks as a copy).
  std::size_t n = 0;
  for (const auto& r : t.ranges) n += r.size();
  const std::size_t per = opt_.state_per_param();
  const auto sorted = merged(t.ranges);
  if (t.buffer_shared || t.values_span().size() != n || t.state_a.size() != (per >= 1 ? n : 0) ||
      t.state_b.size() != (per >= 2 ? n : 0) || sorted != t.ranges)
    return adopt(std::as_const(t));  // copies shared values; a refusal says what is wrong
  const adascale_gain gain_before = gain_;
  if (!gain_.restore(t.gain_state))
    return fail(errc::protocol_error,
                "shard {}: a transfer from shard {} carries a malformed "
                "gain estimate",
                id_, t.from);
  // The last check that can fail: a refused transfer changes nothing.
  if (auto ok = adopt_rows(t); !ok) {
    gain_ = gain_before;
    return ok;
  }
  applied_ = t.version;
  updates_ = t.updates;
  samples_applied_ = t.samples_applied;
  if (auto it = schedule_.upper_bound(applied_); it != schedule_.begin())
    members_ = std::prev(it)->second;
  relayout(sorted, std::move(t.values), std::move(t.state_a), std::move(t.state_b),
           std::move(t.buffer));
  return {};
}

result<void> shard::adopt(const slice_transfer& t) {
  std::size_t n = 0;
  for (const auto& r : t.ranges) n += r.size();
  const std::size_t per = opt_.state_per_param();
  if (t.values_span().size() != n || t.state_a.size() != (per >= 1 ? n : 0) ||
      t.state_b.size() != (per >= 2 ? n : 0))
    return fail(errc::protocol_error,
                "shard {}: a transfer from shard {} carries {} values for {} keys", id_, t.from,
                t.values_span().size(), n);
  const bool empty = ranges_.empty();
  // The update counts (Adam's t) may differ: a step whose only samples were a dying worker's is
  // an update at a shard its push reached and none at one that learnt of the death first (and,
  // under asp, the same for a dead worker's stand-in). The slices joined go on from the larger;
  // so do the samples applied (the schedule's position), for the same reason.
  if (!empty && (t.version != applied_ || !pending_.empty()))
    return fail(errc::protocol_error,
                "shard {}: a transfer from shard {} is at version {} (update {}) but this shard "
                "is at {} (update {})",
                id_, t.from, t.version, t.updates, applied_, updates_);
  // Every run, ours and theirs, in key order; overlapping ones are refused.
  struct src_piece {
    key_range range;
    std::size_t offset;
    bool theirs;
  };
  std::vector<src_piece> all;
  for (std::size_t i = 0; i < ranges_.size(); ++i) all.push_back({ranges_[i], offsets_[i], false});
  std::size_t off = 0;
  for (const auto& r : t.ranges) {
    all.push_back({r, off, true});
    off += r.size();
  }
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.range.begin < b.range.begin; });
  for (std::size_t i = 1; i < all.size(); ++i)
    if (all[i].range.begin < all[i - 1].range.end)
      return fail(errc::protocol_error, "shard {}: keys [{}, {}) from shard {} are owned already",
                  id_, all[i].range.begin, all[i].range.end, t.from);
  const std::span<const float> values = values_->span();  // read in place, not copied
  std::vector<key_range> rs;
  std::vector<float> v, a, b;
  for (const auto& p : all) {
    const key_run pc{p.range, p.offset};
    rs.push_back(p.range);
    append(v, p.theirs ? t.values_span() : values, pc);
    append(a, p.theirs ? t.state_a : state_a_, pc);
    append(b, p.theirs ? t.state_b : state_b_, pc);
  }
  // Both sides folded in the same totals; a shard that has seen none (new) takes the source's.
  const adascale_gain gain_before = gain_;
  if (!gain_.restore(t.gain_state))
    return fail(errc::protocol_error,
                "shard {}: a transfer from shard {} carries a malformed "
                "gain estimate",
                id_, t.from);
  // The last check that can fail: a refused transfer changes nothing.
  if (auto ok = adopt_rows(t); !ok) {
    gain_ = gain_before;
    return ok;
  }
  updates_ = std::max(updates_, t.updates);
  samples_applied_ = std::max(samples_applied_, t.samples_applied);
  if (empty) {
    applied_ = t.version;
    updates_ = t.updates;
    samples_applied_ = t.samples_applied;
    if (auto it = schedule_.upper_bound(applied_); it != schedule_.begin())
      members_ = std::prev(it)->second;
  }
  relayout(merged(rs), std::move(v), std::move(a), std::move(b));
  return {};
}

void shard::relayout(std::vector<key_range> ranges, std::vector<float> values, std::vector<float> a,
                     std::vector<float> b, std::shared_ptr<float_buffer> buffer) {
  ranges_ = std::move(ranges);
  offsets_.clear();
  std::size_t total = 0;
  for (const auto& r : ranges_) {
    offsets_.push_back(total);
    total += r.size();
  }
  COACH_ENFORCE((buffer ? buffer->size() : values.size()) == total,
                "relayout: values do not match the ranges");
  // A fresh pool: readers of the old values keep their buffer (its pool lives on with it). The
  // values become the shard's buffer without a copy: the given buffer as it is (it goes back
  // where it came from when the shard lets it go), else the vector as the pool's first buffer.
  pool_ = std::make_unique<buffer_pool>(total);
  values_ = buffer ? std::move(buffer) : pool_->adopt(std::move(values));
  const std::size_t per = opt_.state_per_param();
  state_a_ = per >= 1 ? std::move(a) : std::vector<float>{};
  state_b_ = per >= 2 ? std::move(b) : std::vector<float>{};
  acc_.assign(std::min(total, options_.piece_floats), 0.0f);
}

}  // namespace coach::ps
