#include "ps/shard_map.hpp"

#include <algorithm>

#include "common/enforce.hpp"

namespace coach::ps {

shard_map shard_map::even(std::size_t num_params, std::size_t slice_size,
                          std::uint32_t num_shards) {
  COACH_ENFORCE(num_params >= 1 && slice_size >= 1 && num_shards >= 1, "bad shard_map::even");
  shard_map m;
  m.num_params_ = num_params;
  m.slice_size_ = slice_size;
  m.num_shards_ = num_shards;
  m.version_ = 1;
  const std::size_t slices = (num_params + slice_size - 1) / slice_size;
  m.owner_.resize(slices);
  for (std::uint32_t k = 0; k < num_shards; ++k) {
    const std::size_t b = slices * k / num_shards;
    const std::size_t e = slices * (k + 1) / num_shards;
    std::fill(m.owner_.begin() + std::ptrdiff_t(b), m.owner_.begin() + std::ptrdiff_t(e), k);
  }
  return m;
}

result<shard_map> shard_map::from_owners(std::size_t num_params, std::size_t slice_size,
                                         std::vector<std::uint32_t> owners, std::uint64_t version) {
  if (num_params == 0 || slice_size == 0)
    return fail(errc::invalid_argument, "a shard map needs parameters and a slice size");
  const std::size_t slices = (num_params + slice_size - 1) / slice_size;
  if (owners.size() != slices)
    return fail(errc::invalid_argument,
                "a shard map of {} parameters in slices of {} has {} "
                "slices, got owners for {}",
                num_params, slice_size, slices, owners.size());
  shard_map m;
  m.num_params_ = num_params;
  m.slice_size_ = slice_size;
  m.version_ = version;
  for (auto o : owners) {
    if (o >= max_shards)
      return fail(errc::invalid_argument, "shard id {} is out of range (at most {})", o,
                  max_shards - 1);
    m.num_shards_ = std::max(m.num_shards_, o + 1);
  }
  m.owner_ = std::move(owners);
  return m;
}

std::uint32_t shard_map::owner(std::size_t slice) const {
  COACH_ENFORCE(slice < owner_.size(), "slice out of range");
  return owner_[slice];
}

key_range shard_map::slice_range(std::size_t slice) const {
  COACH_ENFORCE(slice < owner_.size(), "slice out of range");
  const std::uint64_t b = std::uint64_t(slice) * slice_size_;
  return {b, std::min<std::uint64_t>(b + slice_size_, num_params_)};
}

std::vector<key_range> shard_map::ranges_of(std::uint32_t shard) const {
  std::vector<key_range> out;
  for (std::size_t s = 0; s < owner_.size(); ++s) {
    if (owner_[s] != shard) continue;
    const key_range r = slice_range(s);
    if (!out.empty() && out.back().end == r.begin)
      out.back().end = r.end;
    else
      out.push_back(r);
  }
  return out;
}

void shard_map::assign(std::size_t slice, std::uint32_t shard) {
  COACH_ENFORCE(slice < owner_.size(), "slice out of range");
  owner_[slice] = shard;
  num_shards_ = std::max(num_shards_, shard + 1);
  ++version_;
}

void shard_map::apply(const std::vector<slice_move>& moves) {
  for (const auto& m : moves) {
    COACH_ENFORCE(m.slice < owner_.size(), "slice out of range");
    COACH_ENFORCE(owner_[m.slice] == m.from, "a move's source does not own the slice");
    owner_[m.slice] = m.to;
    num_shards_ = std::max(num_shards_, m.to + 1);
  }
  ++version_;
}

std::vector<std::size_t> shard_map::load() const {
  std::vector<std::size_t> n(num_shards_, 0);
  for (auto o : owner_) ++n[o];
  return n;
}

std::vector<std::uint32_t> shard_map::live_shards() const {
  std::vector<std::uint32_t> out;
  const auto n = load();
  for (std::uint32_t k = 0; k < n.size(); ++k)
    if (n[k] > 0) out.push_back(k);
  return out;
}

std::vector<std::size_t> shard_map::slices_of(std::uint32_t shard) const {
  std::vector<std::size_t> out;
  for (std::size_t s = 0; s < owner_.size(); ++s)
    if (owner_[s] == shard) out.push_back(s);
  return out;
}

std::vector<slice_move> shard_map::plan_add(std::uint32_t to) const {
  auto n = load();
  if (to >= n.size()) n.resize(to + 1, 0);
  COACH_ENFORCE(n[to] == 0, "plan_add: the new shard already owns slices");
  std::size_t live = 0;
  for (auto c : n) live += c > 0;
  const std::size_t target = owner_.size() / (live + 1);
  // Each shard's slices, so a donor gives its last (highest) slice first.
  std::vector<std::vector<std::size_t>> owned(n.size());
  for (std::size_t s = 0; s < owner_.size(); ++s) owned[owner_[s]].push_back(s);
  std::vector<slice_move> moves;
  while (n[to] < target) {
    std::uint32_t donor = 0;
    for (std::uint32_t k = 1; k < n.size(); ++k)
      if (k != to && n[k] > n[donor]) donor = k;
    if (donor == to || n[donor] <= n[to] + 1) break;
    moves.push_back({owned[donor].back(), donor, to});
    owned[donor].pop_back();
    --n[donor];
    ++n[to];
  }
  return moves;
}

std::vector<slice_move> shard_map::plan_drain(std::uint32_t from) const {
  auto n = load();
  std::vector<slice_move> moves;
  if (from >= n.size() || n[from] == 0) return moves;
  std::vector<std::uint32_t> heirs;
  for (std::uint32_t k = 0; k < n.size(); ++k)
    if (k != from && n[k] > 0) heirs.push_back(k);
  COACH_ENFORCE(!heirs.empty(), "plan_drain: no other shard owns slices");
  for (std::size_t s = 0; s < owner_.size(); ++s) {
    if (owner_[s] != from) continue;
    std::uint32_t best = heirs.front();
    for (auto k : heirs)
      if (n[k] < n[best]) best = k;
    moves.push_back({s, from, best});
    ++n[best];
  }
  return moves;
}

std::vector<slice_move> shard_map::plan_migrate(std::uint32_t from, std::uint32_t to) const {
  COACH_ENFORCE(from != to, "plan_migrate: a shard cannot migrate to itself");
  std::vector<slice_move> moves;
  for (std::size_t s = 0; s < owner_.size(); ++s)
    if (owner_[s] == from) moves.push_back({s, from, to});
  return moves;
}

}  // namespace coach::ps
