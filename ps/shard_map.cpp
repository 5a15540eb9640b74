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

}  // namespace coach::ps
