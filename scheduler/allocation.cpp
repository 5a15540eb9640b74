#include "scheduler/allocation.hpp"

#include <algorithm>

namespace coach::scheduler {

namespace {

std::vector<std::uint32_t> hosts_of(const std::map<std::uint32_t, std::uint32_t>& at,
                                    const std::deque<std::uint32_t>& planned) {
  std::vector<std::uint32_t> out;
  out.reserve(at.size() + planned.size());
  for (const auto& [id, h] : at) out.push_back(h);
  out.insert(out.end(), planned.begin(), planned.end());
  return out;
}

/// Down to `to` parts: the planned leave first, then the highest ids.
void shrink_to(std::map<std::uint32_t, std::uint32_t>& at, std::deque<std::uint32_t>& planned,
               std::size_t to) {
  while (at.size() + planned.size() > to) {
    if (!planned.empty())
      planned.pop_back();
    else
      at.erase(std::prev(at.end()));
  }
}

bool contains(std::span<const std::uint32_t> v, std::uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::vector<std::uint32_t> allocation::worker_hosts() const {
  return hosts_of(worker_at, planned_workers);
}
std::vector<std::uint32_t> allocation::shard_hosts() const {
  return hosts_of(shard_at, planned_shards);
}

void allocation::clear() {
  worker_at.clear();
  shard_at.clear();
  planned_workers.clear();
  planned_shards.clear();
}

void allocation::assign(std::span<const std::uint32_t> workers,
                        std::span<const std::uint32_t> shards) {
  clear();
  for (std::uint32_t r = 0; r < workers.size(); ++r) worker_at[r] = workers[r];
  for (std::uint32_t k = 0; k < shards.size(); ++k) shard_at[k] = shards[k];
}

void allocation::follow(std::span<const std::uint32_t> workers,
                        std::span<const std::uint32_t> shards) {
  auto one = [](std::map<std::uint32_t, std::uint32_t>& at, std::deque<std::uint32_t>& planned,
                std::span<const std::uint32_t> to) {
    shrink_to(at, planned, to.size());
    for (std::size_t i = at.size() + planned.size(); i < to.size(); ++i) planned.push_back(to[i]);
  };
  one(worker_at, planned_workers, workers);
  one(shard_at, planned_shards, shards);
}

void allocation::trim(std::uint32_t workers, std::uint32_t shards) {
  if (workers != 0) shrink_to(worker_at, planned_workers, workers);
  if (shards != 0) shrink_to(shard_at, planned_shards, shards);
}

std::size_t allocation::keep(std::span<const std::uint32_t> members,
                             std::span<const std::uint32_t> live) {
  return std::erase_if(worker_at, [&](const auto& p) { return !contains(members, p.first); }) +
         std::erase_if(shard_at, [&](const auto& p) { return !contains(live, p.first); });
}

}  // namespace coach::scheduler
