#include "scheduler/placement.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <tuple>
#include <unordered_map>

#include "common/format.hpp"

namespace coach::scheduler {
namespace {

constexpr std::array<std::string_view, 4> known_placements{"spread", "best-fit", "random", "dltap"};

double share(std::span<const double> bytes, std::size_t k) {
  return k < bytes.size() ? bytes[k] : 1.0;
}

/// How many parts of `cost` the CPUs of `free` hold (whole CPUs for a part that takes none).
/// Placements compare room in these, never in fractions of a CPU: what other programs keep busy
/// is measured and moves by tenths from one heartbeat to the next, and a job must land where it
/// landed before whenever the nodes hold as many of its parts.
int cpu_room(const resources& free, const resources& cost) {
  const double per = cost.cpus > 0 ? cost.cpus : 1.0;
  return int(std::floor(std::max(0.0, free.cpus) / per + 1e-9));
}

/// Takes parts from a pool and gives them all back unless committed: all or nothing.
class transaction {
 public:
  explicit transaction(resource_pool& pool) : pool_(pool) {}
  ~transaction() {
    if (committed_) return;
    for (auto it = taken_.rbegin(); it != taken_.rend(); ++it) pool_.give(it->first, it->second);
  }
  bool take_on(std::uint32_t node, const resources& r) {
    if (!pool_.take_on(node, r)) return false;
    taken_.emplace_back(node, r);
    return true;
  }
  void commit() { committed_ = true; }

 private:
  resource_pool& pool_;
  std::vector<std::pair<std::uint32_t, resources>> taken_;
  bool committed_ = false;
};

result<placement_result> nowhere(const placement_request& r, bool worker, std::size_t placed) {
  return fail(errc::resource_exhausted, "job {}: {} {} of {} fits on no node", r.job,
              worker ? "worker" : "shard", placed + 1, worker ? r.add_workers : r.add_shards);
}

/// What one job has on each node while a placement runs.
struct job_on_node {
  int parts = 0;
  int workers = 0;
  double shard_bytes = 0;
};

class tally {
 public:
  explicit tally(const placement_request& r) {
    for (auto n : r.worker_nodes) {
      auto& x = map_[n];
      ++x.parts;
      ++x.workers;
    }
    for (std::size_t k = 0; k < r.shard_nodes.size(); ++k) {
      auto& x = map_[r.shard_nodes[k]];
      ++x.parts;
      x.shard_bytes += share(r.shard_bytes, k);
    }
    total_ = r.worker_nodes.size() + r.shard_nodes.size();
  }
  job_on_node at(std::uint32_t node) const {
    auto it = map_.find(node);
    return it == map_.end() ? job_on_node{} : it->second;
  }
  void add_worker(std::uint32_t node) {
    auto& x = map_[node];
    ++x.parts;
    ++x.workers;
    ++total_;
  }
  void add_shard(std::uint32_t node, double bytes) {
    auto& x = map_[node];
    ++x.parts;
    x.shard_bytes += bytes;
    ++total_;
  }
  std::size_t total() const { return total_; }
  const std::unordered_map<std::uint32_t, job_on_node>& nodes() const { return map_; }

 private:
  std::unordered_map<std::uint32_t, job_on_node> map_;
  std::size_t total_ = 0;
};

class spread final : public placement {
 public:
  std::string_view name() const noexcept override { return "spread"; }
  result<placement_result> place(resource_pool& pool, const placement_request& r) const override {
    transaction tx(pool);
    tally job(r);
    placement_result out;
    const std::size_t n = pool.size();
    std::size_t cursor = n ? job.total() % n : 0;
    // Part i of the rotation tries node i first: the fewest parts of the job, then the rotation.
    // Walked in rotation order, the first node that fits and holds none of the job wins at once.
    auto one = [&](const resources& cost) -> std::optional<std::uint32_t> {
      std::optional<std::size_t> best;
      int best_parts = 0;
      for (std::size_t k = 0; k < n; ++k) {
        const std::size_t pos = (cursor + k) % n;
        if (!resource_pool::fits(pool.free_at(pos), cost)) continue;
        const int parts = job.at(pool.id_at(pos)).parts;
        if (!best || parts < best_parts) {
          best = pos;
          best_parts = parts;
        }
        if (parts == 0) break;
      }
      if (!best) return std::nullopt;
      cursor = (cursor + 1) % n;
      const auto id = pool.id_at(*best);
      tx.take_on(id, cost);
      return id;
    };
    for (int i = 0; i < r.add_workers; ++i) {
      auto id = one(r.per_worker);
      if (!id) return nowhere(r, true, out.workers.size());
      job.add_worker(*id);
      out.workers.push_back(*id);
    }
    for (int i = 0; i < r.add_shards; ++i) {
      auto id = one(r.per_shard);
      if (!id) return nowhere(r, false, out.shards.size());
      job.add_shard(*id, 1);
      out.shards.push_back(*id);
    }
    tx.commit();
    return out;
  }
};

class best_fit final : public placement {
 public:
  std::string_view name() const noexcept override { return "best-fit"; }
  result<placement_result> place(resource_pool& pool, const placement_request& r) const override {
    placement_result out;
    if (!pool.take_all(r.per_worker, r.add_workers, r.per_shard, r.add_shards, out.workers,
                       out.shards)) {
      // Which part: find it again without taking anything.
      resource_pool probe = pool;
      for (int i = 0; i < r.add_workers; ++i)
        if (!probe.take(r.per_worker)) return nowhere(r, true, std::size_t(i));
      for (int i = 0; i < r.add_shards; ++i)
        if (!probe.take(r.per_shard)) return nowhere(r, false, std::size_t(i));
    }
    return out;
  }
};

class random_placement final : public placement {
 public:
  explicit random_placement(std::uint64_t seed) : seed_(seed) {}
  std::string_view name() const noexcept override { return "random"; }
  result<placement_result> place(resource_pool& pool, const placement_request& r) const override {
    transaction tx(pool);
    std::mt19937_64 rng(seed_ ^ (r.job * 0x9e3779b97f4a7c15ull) ^
                        (r.worker_nodes.size() + r.shard_nodes.size()));
    placement_result out;
    std::vector<std::size_t> fit;
    auto one = [&](const resources& cost) -> std::optional<std::uint32_t> {
      fit.clear();
      for (std::size_t pos = 0; pos < pool.size(); ++pos)
        if (resource_pool::fits(pool.free_at(pos), cost)) fit.push_back(pos);
      if (fit.empty()) return std::nullopt;
      const auto id = pool.id_at(fit[rng() % fit.size()]);
      tx.take_on(id, cost);
      return id;
    };
    for (int i = 0; i < r.add_workers; ++i) {
      auto id = one(r.per_worker);
      if (!id) return nowhere(r, true, out.workers.size());
      out.workers.push_back(*id);
    }
    for (int i = 0; i < r.add_shards; ++i) {
      auto id = one(r.per_shard);
      if (!id) return nowhere(r, false, out.shards.size());
      out.shards.push_back(*id);
    }
    tx.commit();
    return out;
  }

 private:
  std::uint64_t seed_;
};

class dltap final : public placement {
 public:
  std::string_view name() const noexcept override { return "dltap"; }
  result<placement_result> place(resource_pool& pool, const placement_request& r) const override {
    transaction tx(pool);
    tally job(r);
    placement_result out;
    const std::size_t kept = r.shard_nodes.size();
    // The new shards' shares, largest first (placed in that order; reported in id order).
    std::vector<std::size_t> order(std::size_t(std::max(0, r.add_shards)));
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return share(r.shard_bytes, kept + a) > share(r.shard_bytes, kept + b);
    });
    int workers_left = r.add_workers, shards_left = r.add_shards;
    // What the job still needs, to find a node that holds all of it.
    auto rest = [&] {
      resources need;
      need.gpus = workers_left * r.per_worker.gpus + shards_left * r.per_shard.gpus;
      need.cpus = workers_left * r.per_worker.cpus + shards_left * r.per_shard.cpus;
      need.memory = std::uint64_t(workers_left) * r.per_worker.memory +
                    std::uint64_t(shards_left) * r.per_shard.memory;
      return need;
    };
    auto one = [&](const resources& cost, bool worker,
                   double bytes) -> std::optional<std::uint32_t> {
      std::optional<std::size_t> best;
      if (job.total() == 0) {
        // Nothing of the job placed yet: the node that holds all of it most tightly, else the
        // one with the most room.
        const resources need = rest();
        std::tuple<bool, int, double, std::size_t> best_key{};
        for (std::size_t pos = 0; pos < pool.size(); ++pos) {
          const auto& f = pool.free_at(pos);
          if (!resource_pool::fits(f, cost)) continue;
          const bool all = resource_pool::fits(f, need);
          const int room = cpu_room(f, cost);
          const auto key =
              all ? std::tuple(false, f.gpus, room, pos) : std::tuple(true, -f.gpus, -room, pos);
          if (!best || key < best_key) {
            best = pos;
            best_key = key;
          }
        }
      } else {
        // The most bytes kept on the node, then the most parts of the job, then room. A node
        // holding some of the job beats every other, so those are looked at first (a few), and
        // the whole pool only when none of them has room.
        std::tuple<double, int, int, int, std::size_t> best_key{};
        for (const auto& [id, here] : job.nodes()) {
          const auto pos = pool.position(id);
          if (!pos || !resource_pool::fits(pool.free_at(*pos), cost)) continue;
          const auto& f = pool.free_at(*pos);
          const double local = worker ? here.shard_bytes : bytes * double(here.workers);
          const auto key = std::tuple(-local, -here.parts, -f.gpus, -cpu_room(f, cost), *pos);
          if (!best || key < best_key) {
            best = *pos;
            best_key = key;
          }
        }
        const bool beside = best.has_value();
        for (std::size_t pos = 0; !beside && pos < pool.size(); ++pos) {
          const auto& f = pool.free_at(pos);
          if (!resource_pool::fits(f, cost)) continue;
          const auto key = std::tuple(0.0, 0, -f.gpus, -cpu_room(f, cost), pos);
          if (!best || key < best_key) {
            best = pos;
            best_key = key;
          }
        }
      }
      if (!best) return std::nullopt;
      const auto id = pool.id_at(*best);
      tx.take_on(id, cost);
      return id;
    };
    // Shards and workers interleaved in proportion (s, w, w, s, w, w for 2 shards and 4
    // workers): where a node cannot hold the whole job, each node it fills gets shards and the
    // workers that use them, not all the shards on one node and the workers elsewhere.
    const int parts = r.add_workers + r.add_shards;
    std::size_t shards_done = 0;
    int workers_done = 0;
    out.shards.resize(order.size());
    for (int t = 0; t < parts; ++t) {
      const bool shard = shards_done < order.size() &&
                         (workers_done == r.add_workers ||
                          std::int64_t(shards_done) * parts <= std::int64_t(t) * r.add_shards);
      if (shard) {
        const std::size_t i = order[shards_done];
        const double bytes = share(r.shard_bytes, kept + i);
        auto id = one(r.per_shard, false, bytes);
        if (!id) return nowhere(r, false, shards_done);
        job.add_shard(*id, bytes);
        out.shards[i] = *id;
        ++shards_done;
        --shards_left;
      } else {
        auto id = one(r.per_worker, true, 0);
        if (!id) return nowhere(r, true, std::size_t(workers_done));
        job.add_worker(*id);
        out.workers.push_back(*id);
        ++workers_done;
        --workers_left;
      }
    }
    tx.commit();
    return out;
  }
};

}  // namespace

std::span<const std::string_view> placement_names() noexcept {
  return known_placements;
}

result<std::unique_ptr<placement>> make_placement(std::string_view name, std::uint64_t seed) {
  if (name == "spread") return std::make_unique<spread>();
  if (name == "best-fit") return std::make_unique<best_fit>();
  if (name == "random") return std::make_unique<random_placement>(seed);
  if (name == "dltap") return std::make_unique<dltap>();
  return fail(errc::invalid_argument,
              "unknown placement '{}' (known: spread, best-fit, random, dltap)", name);
}

std::vector<std::vector<std::uint32_t>> place_backups(std::span<const std::uint32_t> shard_hosts,
                                                      std::uint32_t backups,
                                                      std::span<const std::uint32_t> candidates,
                                                      std::span<const std::uint32_t> held) {
  std::map<std::uint32_t, std::size_t> copies;
  for (auto h : shard_hosts) ++copies[h];
  for (auto h : held) ++copies[h];
  std::vector<std::vector<std::uint32_t>> out(shard_hosts.size());
  for (std::size_t k = 0; k < shard_hosts.size(); ++k) {
    auto& chain = out[k];
    while (chain.size() < backups) {
      std::optional<std::uint32_t> best;
      for (auto h : candidates) {
        if (h == shard_hosts[k] || std::find(chain.begin(), chain.end(), h) != chain.end())
          continue;
        if (!best || copies[h] < copies[*best]) best = h;
      }
      if (!best) break;
      chain.push_back(*best);
      ++copies[*best];
    }
  }
  return out;
}

double cross_host_share(std::span<const std::uint32_t> worker_nodes,
                        std::span<const std::uint32_t> shard_nodes,
                        std::span<const double> shard_bytes) {
  double out = 0;
  for (std::size_t k = 0; k < shard_nodes.size(); ++k)
    for (auto w : worker_nodes)
      if (w != shard_nodes[k]) out += share(shard_bytes, k);
  return out;
}

double aggregation_degree(std::span<const std::uint32_t> worker_nodes,
                          std::span<const std::uint32_t> shard_nodes,
                          std::span<const double> shard_bytes) {
  double all = 0;
  for (std::size_t k = 0; k < shard_nodes.size(); ++k)
    all += share(shard_bytes, k) * double(worker_nodes.size());
  if (all <= 0) return 0;
  return 1.0 - cross_host_share(worker_nodes, shard_nodes, shard_bytes) / all;
}

}  // namespace coach::scheduler
