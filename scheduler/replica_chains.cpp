// scheduler/replica_chains.cpp: one job's shard replicas and their chains (replica_chains.hpp).
#include "scheduler/replica_chains.hpp"

#include "scheduler/placement.hpp"

namespace coach::scheduler {

std::vector<std::uint32_t> replica_chains::place(std::span<const std::uint32_t> shards,
                                                 std::span<const std::uint32_t> usable) {
  chains_.clear();
  backups_.clear();
  if (replicas_ <= 1) return {};
  backups_ = place_backups(shards, replicas_ - 1, usable);
  std::vector<std::uint32_t> short_of;
  for (std::uint32_t k = 0; k < backups_.size(); ++k) {
    const auto& b = backups_[k];
    chains_.push_back({0, std::uint32_t(b.size())});
    if (b.size() + 1 < replicas_) short_of.push_back(k);
  }
  return short_of;
}

std::vector<std::uint32_t> replica_chains::place_added(
    std::uint32_t id, std::uint32_t host, const std::map<std::uint32_t, std::uint32_t>& shard_at,
    std::span<const std::uint32_t> usable) {
  if (replicas_ <= 1) return {};
  std::vector<std::uint32_t> held;
  for (const auto& [k, h] : shard_at)
    if (k != id) held.push_back(h);
  for (std::uint32_t k = 0; k < chains_.size(); ++k)
    for (auto i = chains_[k].head + 1; i <= chains_[k].tail; ++i)  // the head: shard_at
      held.push_back(backups_[k][i - 1]);
  const std::uint32_t primary[] = {host};
  auto b = std::move(place_backups(primary, replicas_ - 1, usable, held)[0]);
  if (backups_.size() <= id) backups_.resize(id + 1);
  if (chains_.size() <= id) chains_.resize(id + 1);
  backups_[id] = b;
  chains_[id] = {0, std::uint32_t(b.size())};
  return b;
}

void replica_chains::keep_only(const std::map<std::uint32_t, std::uint32_t>& shard_at) {
  for (std::uint32_t k = 0; k < chains_.size(); ++k)
    if (!shard_at.contains(k)) chains_[k] = {};
}

std::optional<replica_chains::failover> replica_chains::fail_over(
    std::uint32_t host, const std::map<std::uint32_t, std::uint32_t>& shard_at) {
  // A shard whose primary was on `host` and that has no chain (none was placed) recovers.
  for (const auto& [k, h] : shard_at)
    if (h == host && k >= chains_.size()) return std::nullopt;
  failover out;
  for (std::uint32_t k = 0; k < chains_.size(); ++k) {
    auto& c = chains_[k];
    auto on_host = [&](std::uint32_t i) {
      return i == 0 ? shard_at.contains(k) && shard_at.at(k) == host : backups_[k][i - 1] == host;
    };
    for (std::uint32_t i = c.head; i <= c.tail; ++i) {
      if (!on_host(i)) continue;
      if (i == c.head) {
        if (c.head == c.tail) return std::nullopt;  // no copy left: recover from the checkpoint
        ++c.head;
        out.heads.insert(out.heads.end(), {k, c.head});
      } else {
        c.tail = i - 1;
        out.cut.insert(out.cut.end(), {k, i - 1});
      }
      break;  // a host holds one copy of a shard at most
    }
  }
  for (std::size_t j = 0; j < out.heads.size(); j += 2) {
    const auto k = out.heads[j];
    out.promoted.emplace_back(k, backups_[k][out.heads[j + 1] - 1]);
  }
  return out;
}

}  // namespace coach::scheduler
