#include "scheduler/resource_pool.hpp"

#include <algorithm>
#include <bit>

#include "common/enforce.hpp"

namespace coach::scheduler {
namespace {

// CPUs are fractional (a measured cpus_free); a sum of parts given back may differ from the
// original by rounding, which must not turn "fits exactly" into "does not fit".
constexpr double cpu_slack = 1e-9;

}  // namespace

resource_pool::resource_pool(const cluster_view& cluster) {
  nodes_.reserve(cluster.nodes.size());
  for (const auto& n : cluster.nodes) add_node(n.id, n.total, n.free);
}

void resource_pool::add_node(std::uint32_t id, const resources& total, const resources& free) {
  COACH_ENFORCE(!contains(id), "node ids are unique within a pool");
  COACH_ENFORCE(free.gpus >= 0, "free GPUs are not negative");
  if (id < dense_limit) {
    if (dense_.size() <= id) dense_.resize(std::size_t(id) + 1, 0);
    dense_[id] = std::uint32_t(nodes_.size() + 1);
  } else {
    index_.emplace(id, nodes_.size());
  }
  nodes_.push_back(node{id, total, free});
  if (nodes_.size() > words_ * 64) {
    ++words_;
    for (auto& bucket : buckets_) bucket.resize(words_, 0);
  }
  free_gpus_ += free.gpus;
  total_gpus_ += total.gpus;
  link(nodes_.size() - 1);
}

bool resource_pool::fits(const resources& free, const resources& demand) noexcept {
  return free.gpus >= demand.gpus && free.cpus + cpu_slack >= demand.cpus &&
         free.memory >= demand.memory;
}

void resource_pool::link(std::size_t n) {
  const auto b = std::size_t(nodes_[n].free.gpus);
  if (buckets_.size() <= b) buckets_.resize(b + 1, std::vector<std::uint64_t>(words_, 0));
  buckets_[b][n / 64] |= std::uint64_t(1) << (n % 64);
}

void resource_pool::unlink(std::size_t n) {
  buckets_[std::size_t(nodes_[n].free.gpus)][n / 64] &= ~(std::uint64_t(1) << (n % 64));
}

std::optional<std::size_t> resource_pool::lookup(std::uint32_t id) const {
  if (id < dense_limit) {
    if (id < dense_.size() && dense_[id] != 0) return std::size_t(dense_[id] - 1);
    return std::nullopt;
  }
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

bool resource_pool::contains(std::uint32_t id) const {
  return lookup(id).has_value();
}

std::size_t resource_pool::index_of(std::uint32_t id) const {
  auto n = lookup(id);
  COACH_ENFORCE(n.has_value(), "the node is in the pool");
  return *n;
}

std::optional<std::uint32_t> resource_pool::find(const resources& demand) const {
  for (auto b = std::size_t(std::max(demand.gpus, 0)); b < buckets_.size(); ++b) {
    const auto& bits = buckets_[b];
    for (std::size_t word = 0; word < bits.size(); ++word) {
      for (std::uint64_t w = bits[word]; w != 0; w &= w - 1) {
        const std::size_t n = word * 64 + std::size_t(std::countr_zero(w));
        if (fits(nodes_[n].free, demand)) return nodes_[n].id;
      }
    }
  }
  return std::nullopt;
}

std::optional<std::uint32_t> resource_pool::take(const resources& demand) {
  auto id = find(demand);
  if (id) take_on(*id, demand);
  return id;
}

bool resource_pool::take_on(std::uint32_t id, const resources& demand) {
  const std::size_t n = index_of(id);
  if (!fits(nodes_[n].free, demand)) return false;
  unlink(n);
  auto& f = nodes_[n].free;
  f.gpus -= demand.gpus;
  f.cpus = std::max(0.0, f.cpus - demand.cpus);
  f.memory -= demand.memory;
  free_gpus_ -= demand.gpus;
  link(n);
  return true;
}

void resource_pool::give(std::uint32_t id, const resources& amount) {
  const std::size_t n = index_of(id);
  unlink(n);
  auto& f = nodes_[n].free;
  f.gpus += amount.gpus;
  f.cpus += amount.cpus;
  f.memory += amount.memory;
  free_gpus_ += amount.gpus;
  link(n);
}

bool resource_pool::take_all(const resources& per_worker, int workers, const resources& per_shard,
                             int shards, std::vector<std::uint32_t>& worker_nodes,
                             std::vector<std::uint32_t>& shard_nodes) {
  const std::size_t w0 = worker_nodes.size();
  const std::size_t s0 = shard_nodes.size();
  bool ok = true;
  // Workers first: they need GPUs, the scarce resource; shards then fill what is left.
  for (int i = 0; ok && i < workers; ++i) {
    auto id = take(per_worker);
    if (id) worker_nodes.push_back(*id);
    ok = id.has_value();
  }
  for (int i = 0; ok && i < shards; ++i) {
    auto id = take(per_shard);
    if (id) shard_nodes.push_back(*id);
    ok = id.has_value();
  }
  if (ok) return true;
  for (std::size_t i = w0; i < worker_nodes.size(); ++i) give(worker_nodes[i], per_worker);
  for (std::size_t i = s0; i < shard_nodes.size(); ++i) give(shard_nodes[i], per_shard);
  worker_nodes.resize(w0);
  shard_nodes.resize(s0);
  return false;
}

const resources& resource_pool::free(std::uint32_t id) const {
  return nodes_[index_of(id)].free;
}

const resources& resource_pool::total(std::uint32_t id) const {
  return nodes_[index_of(id)].total;
}

cluster_view resource_pool::view() const {
  cluster_view v;
  v.nodes.reserve(nodes_.size());
  for (const auto& n : nodes_) v.nodes.push_back(node_view{n.id, n.total, n.free});
  return v;
}

}  // namespace coach::scheduler
