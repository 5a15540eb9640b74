// ps/change_planner.cpp: one change of a job's configuration (change_planner.hpp).
#include "master/change_planner.hpp"

#include <algorithm>
#include <map>

#include "common/format.hpp"

namespace coach::master {
namespace {

/// The moves of a change, each slice from where it is to where it ends.
std::vector<slice_move> direct(const std::vector<slice_move>& moves) {
  std::map<std::size_t, slice_move> by_slice;
  for (const auto& mv : moves) {
    auto [it, fresh] = by_slice.try_emplace(mv.slice, mv);
    if (!fresh) it->second.to = mv.to;
  }
  std::vector<slice_move> out;
  for (const auto& [slice, mv] : by_slice)
    if (mv.from != mv.to) out.push_back(mv);
  return out;
}

}  // namespace

change_plan plan_change(const job_config& cfg, const job_change& c, std::int64_t step,
                        std::uint32_t& next_rank, const change_starters& start) {
  using kind = job_change::kind_type;
  change_plan out;
  out.next = cfg;
  out.next.version = cfg.version + 1;
  out.next.from_step = step;
  auto& next = out.next;
  std::vector<slice_move> moves;
  shard_map plan = cfg.map;
  auto move = [&](const std::vector<slice_move>& mv) {
    plan.apply(mv);
    moves.insert(moves.end(), mv.begin(), mv.end());
  };
  switch (c.kind) {
    case kind::workers:
      while (next.members.size() > c.value) next.members.pop_back();  // the newest ranks leave
      while (next.members.size() < c.value && start.worker) {
        const std::uint32_t r = next_rank++;
        next.members.push_back(r);
        if (!start.worker(r, next)) {
          next.members.pop_back();
          break;
        }
        out.added.push_back(r);
      }
      break;
    case kind::shards: {
      const auto live = plan.live_shards();
      for (std::size_t have = live.size(); have < c.value && start.shard; ++have) {
        auto k = start.shard();
        if (!k) break;
        move(plan.plan_add(*k));
      }
      // The newest shards drain onto the others.
      for (std::size_t have = live.size(); have > c.value && have > 1; --have)
        move(plan.plan_drain(live[have - 1]));
      break;
    }
    case kind::migrate: {
      const auto n = plan.load();
      if (c.value >= n.size() || n[c.value] == 0) {
        out.ignored = coach::format("no shard {} owns slices; migrate ignored", c.value);
        out.next = cfg;
        return out;
      }
      if (c.to) {
        move(plan.plan_migrate(c.value, *c.to));
      } else if (start.shard) {
        if (auto k = start.shard()) move(plan.plan_migrate(c.value, *k));
      }
      break;
    }
  }
  moves = direct(moves);
  next.map = cfg.map;
  next.map.apply(moves);
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<key_range>> by_pair;
  for (const auto& mv : moves) {
    by_pair[{mv.from, mv.to}].push_back(cfg.map.slice_range(mv.slice));
    out.moved_keys += cfg.map.slice_range(mv.slice).size();
  }
  for (auto& [ft, ranges] : by_pair) {
    release_order o{ft.first, ft.second, step, next.version, {}};
    std::sort(ranges.begin(), ranges.end(), [](auto& x, auto& y) { return x.begin < y.begin; });
    for (const auto& r : ranges) {  // adjacent slices travel as one range
      if (!o.ranges.empty() && o.ranges.back().end == r.begin)
        o.ranges.back().end = r.end;
      else
        o.ranges.push_back(r);
    }
    out.orders.push_back(std::move(o));
  }
  return out;
}

std::vector<std::uint32_t> emptied_shards(const shard_map& from, const shard_map& to) {
  std::vector<std::uint32_t> out;
  const auto n = to.load();
  for (auto k : from.live_shards())
    if (k >= n.size() || n[k] == 0) out.push_back(k);
  return out;
}

}  // namespace coach::master
