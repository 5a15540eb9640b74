#include "ps/shard_rows.hpp"

#include <algorithm>

#include "common/enforce.hpp"
#include "ps/shard.hpp"

namespace coach::ps {
namespace {

/// The first bucket whose key is >= key: ceil(key * bucket_count / num_params), at most
/// bucket_count.
std::uint32_t first_bucket_at(std::uint64_t key, std::uint64_t num_params) {
  const std::uint64_t scaled = key * sparse::bucket_count;  // key <= num_params < 2^47
  const std::uint64_t b = (scaled + num_params - 1) / num_params;
  return static_cast<std::uint32_t>(b < sparse::bucket_count ? b : sparse::bucket_count);
}

}  // namespace

std::vector<sparse::bucket_range> buckets_of(std::span<const key_range> ranges,
                                             std::uint64_t num_params) {
  std::vector<sparse::bucket_range> out;
  if (num_params == 0) return out;
  for (const auto& r : ranges) {
    const auto first = first_bucket_at(r.begin, num_params);
    const auto end = first_bucket_at(r.end, num_params);
    if (first >= end) continue;
    if (!out.empty() && out.back().end == first)
      out.back().end = end;
    else
      out.push_back({first, end});
  }
  return out;
}

// The shard's rows (ps/shard.hpp), kept beside how they follow the keys.

result<void> shard::read_rows(std::uint32_t table, std::span<const std::uint64_t> ids,
                              std::span<float> out) {
  if (!rows_)
    return fail(errc::protocol_error,
                "shard {}: a read of sparse rows; the model has no sparse tables", id_);
  return rows_->read(table, ids, out);
}

void shard::apply_rows(float scale) {
  if (!rows_) return;
  for (const auto* c : with_data_)
    for (const auto& part : c->rows) {
      auto added = rows_->add(part.table, part.ids, part.grads);
      COACH_ENFORCE(added.has_value(), "shard: row gradients checked at the push failed to add");
    }
  if (rows_->pending_rows() == 0) return;
  // The dense schedule's factor (warm-up, decay, scaling) applied to the rows' own rate.
  const float base = opt_.base_learning_rate();
  const float lr = options_.rows->optimizer.learning_rate;
  const float rate = base > 0 ? float(double(lr) * double(step_lr_) / double(base)) : lr;
  rows_->apply(scale, rate, updates_);
}

result<void> shard::adopt_rows(const slice_transfer& t) {
  if (!rows_) {
    if (t.rows.empty()) return {};
    return fail(errc::protocol_error,
                "shard {}: a transfer from shard {} carries sparse rows; the model has none", id_,
                t.from);
  }
  if (t.rows.empty())
    return fail(errc::protocol_error,
                "shard {}: a transfer from shard {} lacks the sparse rows of its keys", id_,
                t.from);
  auto ranges = t.ranges;
  std::sort(ranges.begin(), ranges.end(),
            [](const key_range& a, const key_range& b) { return a.begin < b.begin; });
  auto ok = rows_->adopt(t.rows, buckets_of(ranges, options_.rows->num_params));
  if (!ok)
    return fail(errc::protocol_error, "shard {}: a transfer from shard {}: {}", id_, t.from,
                ok.error().message);
  return {};
}

}  // namespace coach::ps
