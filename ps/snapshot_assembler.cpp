#include "ps/snapshot_assembler.hpp"

#include <algorithm>

namespace coach::ps {

void snapshot_assembler::request(std::int64_t version, std::uint32_t epoch, bool final) {
  if (auto it = wanted_.find(version); it != wanted_.end()) {
    it->second.final = it->second.final || final;
    return;
  }
  wanted_.emplace(version,
                  assembly{epoch, final, false, std::make_shared<std::vector<float>>(num_params_),
                           key_coverage(num_params_)});
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

void snapshot_assembler::reopen(const std::set<std::uint32_t>& epochs) {
  std::erase_if(wanted_,
                [&](const auto& w) { return !w.second.final && epochs.contains(w.second.epoch); });
}

result<std::optional<snapshot_assembler::assembled>> snapshot_assembler::add(
    std::int64_t version, std::span<const key_range> ranges,
    std::span<const std::span<const float>> pieces) {
  auto it = wanted_.find(version);
  if (it == wanted_.end()) return std::optional<assembled>{};
  auto& a = it->second;
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
  if (!a.received.complete()) return std::optional<assembled>{};
  assembled out{version, a.epoch, a.final, std::move(a.values)};
  wanted_.erase(it);
  return std::optional<assembled>{std::move(out)};
}

}  // namespace coach::ps
