#include "master/snapshot_assembler.hpp"

#include <algorithm>

namespace coach::master {

void snapshot_assembler::request(std::int64_t version, std::uint32_t epoch, bool final,
                                 bool with_state) {
  if (auto it = wanted_.find(version); it != wanted_.end()) {
    it->second.final = it->second.final || final;
    if (!it->second.asked) it->second.with_state = it->second.with_state || with_state;
    return;
  }
  wanted_.emplace(version, assembly{epoch, final, false, with_state,
                                    std::make_shared<std::vector<float>>(num_params_),
                                    key_coverage(num_params_), nullptr});
}

std::vector<std::int64_t> snapshot_assembler::to_ask(std::int64_t step) {
  std::vector<std::int64_t> out;
  for (auto& [version, a] : wanted_) {
    if (version > step) break;
    if (a.asked) continue;
    a.asked = true;
    out.push_back(version);
  }
  return out;
}

std::vector<std::int64_t> snapshot_assembler::asked_versions() const {
  std::vector<std::int64_t> out;
  for (const auto& [v, a] : wanted_)
    if (a.asked) out.push_back(v);
  return out;
}

bool snapshot_assembler::lacks(std::int64_t version, std::span<const key_range> ranges) const {
  auto it = wanted_.find(version);
  if (it == wanted_.end() || !it->second.asked) return false;
  std::vector<key_range> gaps;
  for (const auto& r : ranges) it->second.received.missing(r, gaps);
  return !gaps.empty();
}

bool snapshot_assembler::asked(std::int64_t version) const {
  auto it = wanted_.find(version);
  return it != wanted_.end() && it->second.asked;
}

bool snapshot_assembler::wants_state(std::int64_t version) const {
  auto it = wanted_.find(version);
  return it != wanted_.end() && it->second.with_state;
}

void snapshot_assembler::reopen(const std::set<std::uint32_t>& epochs) {
  std::erase_if(wanted_,
                [&](const auto& w) { return !w.second.final && epochs.contains(w.second.epoch); });
}

result<void> snapshot_assembler::take(std::int64_t version, assembly& a,
                                      std::span<const key_range> ranges,
                                      std::span<const std::span<const float>> pieces) {
  if (ranges.size() != pieces.size())
    return fail(errc::protocol_error, "snapshot of version {}: {} ranges but {} pieces", version,
                ranges.size(), pieces.size());
  for (std::size_t i = 0; i < ranges.size(); ++i)
    if (ranges[i].begin > ranges[i].end || pieces[i].size() != ranges[i].size())
      return fail(errc::protocol_error,
                  "snapshot of version {}: piece {} has {} floats for range [{}, {})", version, i,
                  pieces[i].size(), ranges[i].begin, ranges[i].end);
  if (auto ok = a.received.add(ranges); !ok) return std::unexpected(ok.error());
  for (std::size_t i = 0; i < ranges.size(); ++i)
    std::copy(pieces[i].begin(), pieces[i].end(),
              a.values->begin() + std::ptrdiff_t(ranges[i].begin));
  return {};
}

std::optional<snapshot_assembler::assembled> snapshot_assembler::if_whole(wanted_map::iterator it) {
  auto& a = it->second;
  if (!a.received.complete()) return std::nullopt;
  assembled out{it->first, a.epoch, a.final, std::move(a.values), std::move(a.state)};
  if (out.state) out.state->values = *out.values;
  wanted_.erase(it);
  return out;
}

result<std::optional<snapshot_assembler::assembled>> snapshot_assembler::add(
    std::int64_t version, std::span<const key_range> ranges,
    std::span<const std::span<const float>> pieces) {
  auto it = wanted_.find(version);
  if (it == wanted_.end()) return std::optional<assembled>{};
  if (it->second.with_state)
    return fail(errc::protocol_error,
                "snapshot of version {}: plain values, but the optimizer state was asked for",
                version);
  if (auto ok = take(version, it->second, ranges, pieces); !ok) return std::unexpected(ok.error());
  return if_whole(it);
}

result<std::optional<snapshot_assembler::assembled>> snapshot_assembler::add_state(
    slice_transfer t) {
  auto it = wanted_.find(t.version);
  if (it == wanted_.end()) return std::optional<assembled>{};
  auto& a = it->second;
  if (!a.with_state)
    return fail(errc::protocol_error,
                "snapshot of version {} from shard {}: optimizer state not asked for", t.version,
                t.from);
  std::size_t keys = 0;
  for (const auto& r : t.ranges) keys += r.size();
  const auto values = t.values_span();
  if (values.size() != keys || t.state_a.size() != (state_per_param_ >= 1 ? keys : 0) ||
      t.state_b.size() != (state_per_param_ >= 2 ? keys : 0))
    return fail(errc::protocol_error,
                "snapshot of version {} from shard {}: {} values and {} + {} state floats for {} "
                "keys ({} state floats per key)",
                t.version, t.from, values.size(), t.state_a.size(), t.state_b.size(), keys,
                state_per_param_);
  if (t.updates < 0 || t.updates > t.version)
    return fail(errc::protocol_error,
                "snapshot of version {} from shard {}: {} updates in {} steps is impossible",
                t.version, t.from, t.updates, t.version);
  // The pieces of values, in range order (the transfer's layout).
  std::vector<std::span<const float>> pieces;
  std::size_t off = 0;
  for (const auto& r : t.ranges) {
    pieces.push_back(values.subspan(off, r.size()));
    off += r.size();
  }
  if (auto ok = take(t.version, a, t.ranges, pieces); !ok) return std::unexpected(ok.error());
  if (!a.state) {
    a.state = std::make_shared<training_state>();
    a.state->version = t.version;
    if (state_per_param_ >= 1) a.state->state_a.assign(num_params_, 0.0f);
    if (state_per_param_ >= 2) a.state->state_b.assign(num_params_, 0.0f);
  }
  auto& s = *a.state;
  if (!t.rows.empty()) s.rows.push_back(std::move(t.rows));  // checked by whoever reads them
  s.updates = std::max(s.updates, t.updates);
  s.samples_applied = std::max(s.samples_applied, t.samples_applied);
  off = 0;
  for (const auto& r : t.ranges) {
    const auto at = std::ptrdiff_t(r.begin), from = std::ptrdiff_t(off),
               n = std::ptrdiff_t(r.size());
    if (!t.state_a.empty())
      std::copy(t.state_a.begin() + from, t.state_a.begin() + from + n, s.state_a.begin() + at);
    if (!t.state_b.empty())
      std::copy(t.state_b.begin() + from, t.state_b.begin() + from + n, s.state_b.begin() + at);
    off += r.size();
  }
  return if_whole(it);
}

}  // namespace coach::master
