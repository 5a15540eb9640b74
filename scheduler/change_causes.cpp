#include "scheduler/change_causes.hpp"

#include <algorithm>

namespace coach::scheduler {

namespace {

bool has(std::span<const std::uint32_t> v, std::uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

void change_causes::expect(expected_change c) {
  expected_.push_back(std::move(c));
  while (expected_.size() > max_expected) expected_.pop_front();
}

void change_causes::refused(expected_change::kind_type kind, const std::string& cause) {
  for (auto it = expected_.rbegin(); it != expected_.rend(); ++it)
    if (it->kind == kind && it->cause == cause) {
      expected_.erase(std::next(it).base());
      return;
    }
}

std::string change_causes::took_effect(std::span<const std::uint32_t> before_workers,
                                       std::span<const std::uint32_t> before_shards,
                                       std::span<const std::uint32_t> members,
                                       std::span<const std::uint32_t> live,
                                       const std::string& own) {
  using k = expected_change::kind_type;
  auto matches = [&](const expected_change& c) {
    switch (c.kind) {
      case k::rescale:
        return (c.workers == 0 || members.size() == c.workers) &&
               (c.shards == 0 || live.size() == c.shards) &&
               (members.size() != before_workers.size() || live.size() != before_shards.size());
      case k::migrate:
        return has(before_shards, c.shard) && !has(live, c.shard);
      case k::drop_workers:
        return std::none_of(c.ranks.begin(), c.ranks.end(),
                            [&](std::uint32_t r) { return has(members, r); });
    }
    return false;
  };
  auto it = std::find_if(expected_.begin(), expected_.end(), matches);
  if (it != expected_.end()) {
    std::string cause = std::move(it->cause);
    expected_.erase(it);
    return cause;
  }
  // A migration in effect in two steps: its new shard takes the slices (one shard more), then
  // the shard it replaces leaves. The first step is the migration's too, still expected.
  const bool added = std::any_of(live.begin(), live.end(),
                                 [&](std::uint32_t k) { return !has(before_shards, k); });
  for (const auto& c : expected_)
    if (c.kind == k::migrate && added && has(live, c.shard)) return c.cause;
  std::vector<std::uint32_t> gone;
  for (auto r : before_workers)
    if (!has(members, r)) gone.push_back(r);
  if (gone.empty()) return own;
  std::string which;
  for (auto r : gone) which += (which.empty() ? "" : ", ") + std::to_string(r);
  return "failure: worker" + std::string(gone.size() > 1 ? "s " : " ") + which + " died";
}

std::string change_causes::adding(bool worker) const {
  for (const auto& c : expected_) {
    if (worker && c.kind == expected_change::kind_type::rescale && c.workers != 0) return c.cause;
    if (!worker && (c.kind == expected_change::kind_type::migrate ||
                    (c.kind == expected_change::kind_type::rescale && c.shards != 0)))
      return c.cause;
  }
  return {};
}

}  // namespace coach::scheduler
