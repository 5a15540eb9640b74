#include "scheduler/user_orders.hpp"

#include <algorithm>

namespace coach::scheduler {

void user_orders::migrating(std::uint32_t shard, std::uint32_t host) {
  pending_.push_back({shard, host, std::nullopt});
}

void user_orders::migration_refused(std::uint32_t shard, std::uint32_t host) {
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [&](const pending& p) { return p.from == shard && p.host == host; });
  if (it == pending_.end()) return;
  if (it->to) pins_.erase(*it->to);
  pending_.erase(it);
}

bool user_orders::placed(std::uint32_t id, std::uint32_t host) {
  for (auto& p : pending_)
    if (!p.to && p.host == host) {
      p.to = id;
      pins_[id] = host;
      return true;
    }
  return false;
}

void user_orders::live(std::span<const std::uint32_t> live) {
  auto is_live = [&](std::uint32_t k) {
    return std::find(live.begin(), live.end(), k) != live.end();
  };
  // A migration whose shard left is done (or its shard is gone): its new shard is pinned, or
  // nothing is.
  std::erase_if(pending_, [&](const pending& p) { return !is_live(p.from); });
  std::erase_if(pins_, [&](const auto& pin) {
    if (is_live(pin.first)) return false;
    // A new shard waiting for the slices of a migration still under way owns none yet.
    return std::none_of(pending_.begin(), pending_.end(),
                        [&](const pending& p) { return p.to == pin.first; });
  });
}

std::optional<std::uint32_t> user_orders::pin_of(std::uint32_t id) const {
  auto it = pins_.find(id);
  if (it == pins_.end()) return std::nullopt;
  return it->second;
}

void user_orders::hold(std::uint32_t workers, std::uint32_t shards) {
  if (workers) held_workers_ = workers;
  if (shards) held_shards_ = shards;
}

bool user_orders::release_hold() {
  const bool had = holds();
  held_workers_ = held_shards_ = 0;
  return had;
}

}  // namespace coach::scheduler
