#include "master/change_sequencer.hpp"

#include <algorithm>

#include "common/format.hpp"

namespace coach::master {
namespace {

void add_once(std::vector<std::uint32_t>& to, std::uint32_t x) {
  if (std::ranges::find(to, x) == to.end()) to.push_back(x);
}

}  // namespace

master::job_change to_job_change(const change_request& r) {
  return {r.action.kind, r.action.value, r.shard};
}

std::string describe(const change_request& r) {
  const auto& a = r.action;
  std::string what = coach::format("{} {}", ps::to_string(a.kind), a.value);
  if (!r.node.empty()) what += " to " + r.node;
  return what;
}

std::vector<std::uint32_t> change_sequencer::live_shards() const {
  return cfg_.map.live_shards();
}

std::vector<std::uint32_t> change_sequencer::planned_live_shards() const {
  return planned_map().live_shards();
}

void change_sequencer::queue(change_request c, std::int64_t at_step) {
  c.action.at_step = at_step;
  auto at = std::upper_bound(
      queued_.begin(), queued_.end(), at_step,
      [](std::int64_t s, const change_request& x) { return s < x.action.at_step; });
  queued_.insert(at, std::move(c));
}

void change_sequencer::preparing(std::uint32_t shard, change_request c) {
  preparing_.insert_or_assign(shard, std::move(c));
}

std::optional<change_request> change_sequencer::prepared(std::uint32_t shard) {
  auto it = preparing_.find(shard);
  if (it == preparing_.end()) return std::nullopt;
  auto c = std::move(it->second);
  preparing_.erase(it);
  return c;
}

change_sequencer::due change_sequencer::at(std::int64_t step, bool stopping) {
  using kind = due::kind_type;
  if (next_) return {kind::wait, {}};  // a change waits for its new parts
  if (stopping || queued_.empty() || queued_.front().action.at_step > step || acks_awaited_ > 0)
    return {kind::open, {}};
  due d{kind::begin, std::move(queued_.front())};
  queued_.pop_front();
  return d;
}

bool change_sequencer::begun(master::change_plan plan, std::size_t parts_elsewhere) {
  next_ = std::move(plan.next);
  orders_ = std::move(plan.orders);
  parts_awaited_ = parts_elsewhere;
  failed_ = false;
  return parts_awaited_ == 0;
}

change_sequencer::part_news change_sequencer::part_ready(bool worker, std::uint32_t id, bool ok) {
  if (parts_awaited_ == 0 || !next_) return part_news::unexpected;
  if (!ok) {
    if (worker)
      std::erase(next_->members, id);  // the change goes on without it
    else
      failed_ = true;  // slices cannot move to it: the whole change is dropped
  }
  if (--parts_awaited_ > 0) return part_news::waiting;
  if (!failed_) return part_news::ready;
  orders_.clear();
  next_.reset();
  return part_news::dropped;
}

std::vector<master::release_order> change_sequencer::publish() {
  auto orders = std::move(orders_);
  orders_.clear();
  acks_awaited_ += orders.size();
  if (!orders.empty())
    for (auto k : master::emptied_shards(cfg_.map, next_->map)) add_once(releasing_, k);
  cfg_ = std::move(*next_);
  next_.reset();
  return orders;
}

change_sequencer::ack_news change_sequencer::acknowledged() {
  if (acks_awaited_ == 0) return ack_news::unexpected;
  if (--acks_awaited_ > 0) return ack_news::waiting;
  if (releasing_.empty()) return ack_news::done;
  releasing_.clear();
  return ack_news::freed;
}

std::vector<ps::job_config> change_sequencer::without(
    const std::vector<std::uint32_t>& ranks, std::int64_t from,
    const std::map<std::int64_t, ps::job_config>& published) {
  auto drop = [&](std::vector<std::uint32_t> m) {
    std::erase_if(m, [&](std::uint32_t r) { return std::ranges::find(ranks, r) != ranks.end(); });
    return m;
  };
  // Every configuration that governs a step from `from` on, again without them, each with its
  // own shard map (a change between `from` and now moved slices: the steps before it keep the
  // map they had).
  std::vector<std::pair<std::int64_t, ps::job_config>> redo;
  auto h = published.upper_bound(from);
  if (h != published.begin()) redo.push_back({from, std::prev(h)->second});
  for (; h != published.end(); ++h) redo.push_back({h->first, h->second});
  if (redo.empty()) redo.push_back({from, cfg_});
  std::vector<ps::job_config> out;
  auto version = cfg_.version;
  for (auto& [step, c] : redo) {
    c.version = ++version;
    c.from_step = step;
    c.members = drop(std::move(c.members));
    out.push_back(c);
  }
  cfg_ = out.back();
  if (next_) {
    next_->members = drop(next_->members);
    next_->version = cfg_.version + 1;
  }
  return out;
}

void change_sequencer::layout(std::vector<std::uint32_t>& members,
                              std::vector<std::uint32_t>& shards) const {
  members = cfg_.members;
  shards = live_shards();
  if (next_) {
    for (auto r : next_->members) add_once(members, r);
    for (auto k : next_->map.live_shards()) add_once(shards, k);
  }
  for (auto k : releasing_) add_once(shards, k);
  for (const auto& [k, c] : preparing_) add_once(shards, k);
  for (const auto& c : queued_)
    if (c.shard) add_once(shards, *c.shard);
}

}  // namespace coach::master
