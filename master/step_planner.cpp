// worker/step_planner.cpp: which worker computes what at each step (step_planner.hpp).
#include "master/step_planner.hpp"

#include <algorithm>

namespace coach::master {

global_cut cut_global_batch(std::size_t global_batch, std::uint32_t max_workers) {
  global_cut out;
  const std::size_t g = std::max<std::size_t>(1, global_batch);
  const std::size_t w = std::max<std::uint32_t>(1, max_workers);
  for (std::size_t chunk = g / w; chunk >= 1; --chunk)
    if (g % chunk == 0) {
      out.chunk = chunk;
      break;
    }
  out.per_step = std::uint32_t(g / out.chunk);
  return out;
}

step_planner::step_planner(chunk_dispenser& dispenser, std::uint32_t first_epoch,
                           std::uint32_t epochs, std::uint32_t chunks_per_step,
                           std::int64_t max_ahead, std::int64_t first_step,
                           std::uint32_t global_chunks)
    : dispenser_(dispenser),
      first_epoch_(first_epoch),
      epochs_(epochs),
      chunks_per_step_(std::max<std::uint32_t>(1, chunks_per_step)),
      global_chunks_(global_chunks),
      max_ahead_(max_ahead),
      open_step_(std::max<std::int64_t>(0, first_step) - 1) {}

std::vector<std::int64_t> step_planner::unreported(std::uint32_t rank) const {
  std::vector<std::int64_t> out;
  for (const auto& [step, p] : plans_)
    if (!p.finished && p.by_rank.contains(rank) && !p.reported_by.contains(rank))
      out.push_back(step);
  return out;
}

std::int64_t step_planner::oldest_incomplete() const noexcept {
  for (const auto& [step, p] : plans_)
    if (!p.finished && p.reported < p.expected) return step;
  return open_step_ + 1;
}

std::optional<step_planner::opened> step_planner::open(std::span<const std::uint32_t> members,
                                                       bool stop) {
  opened out;
  plan p;
  if (!stop && max_ahead_ >= 0 && open_step_ + 1 - oldest_incomplete() > max_ahead_)
    return std::nullopt;  // ssp:S: the slowest member is too far behind
  if (stop) {
    out.finished = p.finished = true;
  } else {
    if (!epoch_started_ || dispenser_.exhausted()) {
      if (epoch_started_ && !dispenser_.epoch_done()) return std::nullopt;
      const std::uint32_t next = epoch_started_ ? dispenser_.epoch() + 1 : first_epoch_;
      if (next >= epochs_) {
        out.finished = p.finished = true;
      } else {
        dispenser_.begin_epoch(next);
        epoch_started_ = true;
        out.epoch_begun = next;
      }
    }
    if (!p.finished) {
      for (auto r : members) p.by_rank[r];
      if (global_chunks_ > 0) {
        // The step's chunks, whatever its members; member k of m gets the k-th of m runs.
        std::vector<master::chunk> taken;
        for (std::uint32_t k = 0; k < global_chunks_; ++k)
          if (auto c = dispenser_.take()) taken.push_back(*c);
        const std::size_t m = members.size(), n = taken.size();
        for (std::size_t k = 0; k < m; ++k)
          for (std::size_t c = k * n / m; c < (k + 1) * n / m; ++c)
            p.by_rank[members[k]].push_back(taken[c]);
      } else {
        // Round by round, so that the chunks of an epoch's end are shared out among the members.
        for (std::uint32_t k = 0; k < chunks_per_step_; ++k)
          for (auto r : members)
            if (auto c = dispenser_.take()) p.by_rank[r].push_back(*c);
      }
      out.ends_epoch = dispenser_.exhausted();
    }
  }
  p.expected = members.size();
  plans_.emplace(++open_step_, std::move(p));
  return out;
}

step_planner::grant step_planner::take(std::uint32_t rank, std::int64_t step) {
  auto it = plans_.find(step);
  if (it == plans_.end()) return {};  // a stale request: the step is long closed
  auto& p = it->second;
  grant g;
  auto mine = p.by_rank.find(rank);
  if (!p.finished && mine == p.by_rank.end()) {  // this rank left the job: not counted
    g.what = grant::kind::finished;
    return g;
  }
  if (p.finished) {
    g.what = grant::kind::finished;
  } else if (mine->second.empty()) {
    g.what = grant::kind::no_chunk;
    g.epoch = dispenser_.epoch();
  } else {
    g.what = grant::kind::chunk;
    g.chunks = mine->second;
    g.epoch = mine->second.front().epoch;
  }
  ++p.fetched;
  forget_if_closed(it);
  return g;
}

step_planner::reported step_planner::report(std::uint32_t rank, std::int64_t step) {
  reported out;
  auto it = plans_.find(step);
  if (it == plans_.end()) return out;
  auto mine = it->second.by_rank.find(rank);
  if (mine == it->second.by_rank.end()) return out;
  if (!it->second.reported_by.insert(rank).second) return out;  // reported twice: once counts
  out.known = true;
  const auto chunks = mine->second;
  if (++it->second.reported == it->second.expected) {
    std::uint64_t samples = 0;
    for (const auto& [r, cs] : it->second.by_rank)
      for (const auto& c : cs) samples += c.size();
    out.step_samples = samples;
  }
  for (const auto& c : chunks)
    if (dispenser_.complete(c)) out.chunks_done.push_back(c);
  out.epoch_done = !out.chunks_done.empty() && dispenser_.epoch_done();
  forget_if_closed(it);
  return out;
}

std::set<std::uint32_t> step_planner::drop(std::span<const std::uint32_t> ranks,
                                           std::int64_t from) {
  std::set<std::uint32_t> reopened;
  for (auto it = plans_.lower_bound(from); it != plans_.end();) {
    auto& p = it->second;
    for (auto r : ranks) {
      auto mine = p.by_rank.find(r);
      if (mine == p.by_rank.end()) continue;
      for (const auto& c : mine->second) {
        dispenser_.give_back(c);
        reopened.insert(c.epoch);
      }
      p.by_rank.erase(mine);
      p.expected = p.expected > 0 ? p.expected - 1 : 0;
    }
    auto next = std::next(it);
    forget_if_closed(it);
    it = next;
  }
  return reopened;
}

void step_planner::forget_if_closed(std::map<std::int64_t, plan>::iterator it) {
  const std::size_t n = it->second.expected;
  if (it->second.fetched >= n && (it->second.finished || it->second.reported >= n))
    plans_.erase(it);
}

}  // namespace coach::master
