#include "worker/dataset_cache.hpp"

#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace coach::worker {
namespace {

// Everything that changes what load_dataset returns. The csv and npy splits depend on the seed
// (npy only without test files, but the key does not look at the directory); the idx split does
// not, so idx ignores it and jobs with other seeds share one copy. The ctr split is by file
// order: its test_fraction counts, not the seed; its column counts do.
using cache_key =
    std::tuple<int, std::string, double, std::size_t, std::size_t, std::uint64_t, int, bool,
               std::int64_t, std::string, char, std::size_t, std::size_t, std::size_t>;

cache_key key_of(const dataset_config& cfg, std::uint64_t seed) {
  const bool ctr = cfg.format == dataset_format::ctr;
  const bool seeded = cfg.format != dataset_format::idx && !ctr;
  const bool csv = cfg.format == dataset_format::csv;
  return {int(cfg.format),
          cfg.path,
          seeded || ctr ? cfg.test_fraction : 0.0,
          cfg.train_limit,
          cfg.test_limit,
          seeded ? seed : 0,
          int(cfg.normalize),
          csv && cfg.header,
          csv ? cfg.label_column.index : 0,
          csv ? cfg.label_column.name : std::string(),
          csv ? cfg.delimiter : ',',
          ctr ? cfg.n_dense : 0,
          ctr ? cfg.n_fields : 0,
          ctr ? cfg.min_count : 0};
}

struct cache {
  std::mutex mu;
  std::map<cache_key, std::weak_ptr<const dataset_pair>> loaded;
};

cache& the_cache() {
  static cache c;
  return c;
}

}  // namespace

result<shared_dataset> load_dataset_shared_tracked(const dataset_config& cfg, std::uint64_t seed) {
  auto& c = the_cache();
  const auto key = key_of(cfg, seed);
  {
    std::lock_guard lock(c.mu);
    if (auto it = c.loaded.find(key); it != c.loaded.end())
      if (auto held = it->second.lock()) return shared_dataset{std::move(held), false};
  }
  auto data = load_dataset(cfg, seed);  // outside the lock: seconds for Fashion-MNIST
  if (!data) return std::unexpected(data.error());
  auto fresh = std::make_shared<const dataset_pair>(std::move(*data));
  std::lock_guard lock(c.mu);
  auto& slot = c.loaded[key];
  if (auto held = slot.lock()) {
    return shared_dataset{std::move(held), false};  // another caller finished first
  }
  std::erase_if(c.loaded, [](const auto& kv) { return kv.second.expired(); });
  c.loaded[key] = fresh;
  return shared_dataset{std::move(fresh), true};
}

result<std::shared_ptr<const dataset_pair>> load_dataset_shared(const dataset_config& cfg,
                                                                std::uint64_t seed) {
  auto got = load_dataset_shared_tracked(cfg, seed);
  if (!got) return std::unexpected(std::move(got.error()));
  return std::move(got->data);
}

}  // namespace coach::worker
