// The elastic invariant for sparse rows (issue 43), under bsp: the simulated job
// (tests/helpers/elastic_sim.hpp) has an embedding table whose rows ride with the keys' buckets
// (ps/shard_rows.hpp). The master's final snapshot brings every shard's rows back, and each row
// must be exactly its initial value with every row gradient the shards took applied once (plain
// SGD), or bitwise the rows of one unmigrated shard fed the same contributions (lazy Adam).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "sparse/row_store.hpp"

#include "tests/helpers/elastic_reference.hpp"
#include "tests/helpers/elastic_sim.hpp"

namespace coach {
namespace {

using namespace elastic_testing;

/// Every shard's rows of a run's result in one store (every bucket).
sparse::row_store rows_of(const run_result& r, const sparse::row_optimizer_config& opt) {
  const sparse::bucket_range all[] = {{0, sparse::bucket_count}};
  auto store = sparse::row_store::create(table_seed, {{table_rows, table_dim, 0.25f}}, opt, all);
  EXPECT_TRUE(store);
  for (const auto& blob : r.rows) EXPECT_TRUE(store->merge(blob));
  return std::move(*store);
}

/// The rows plain SGD (lr 0.5) must end with, from what each shard took: each step's row
/// gradients of the contributions the shard took, summed (exact: small integers) and applied
/// as the row optimizer does (w -= lr (sum * scale)), to the initial values.
void expect_every_row_gradient_once(const run_result& r, std::uint64_t seed) {
  std::map<std::uint64_t, std::vector<float>> want;
  for (std::int64_t s = 0; s < num_steps; ++s) {
    const auto& map = r.at(s).map;
    for (auto k : map.live_shards()) {
      auto it = r.counted.find({k, s});
      if (it == r.counted.end()) continue;
      std::uint64_t total = 0;
      for (auto [rank, n] : it->second) total += n;
      if (total == 0) continue;
      std::map<std::uint64_t, std::vector<float>> sums;
      for (auto [rank, n] : it->second) {
        if (n == 0) continue;
        for (auto row : touched_rows(rank, s)) {
          if (map.owner(ps::row_key_of(0, row, num_keys) / slice_size) != k) continue;
          auto& sum = sums.try_emplace(row, table_dim, 0.0f).first->second;
          for (std::uint32_t e = 0; e < table_dim; ++e)
            sum[e] += known_gradient(rank, s, num_keys + row * table_dim + e);
        }
      }
      const float scale = float(1.0 / double(total));
      for (const auto& [row, sum] : sums) {
        auto [at, fresh] = want.try_emplace(row, table_dim);
        if (fresh) sparse::init_row(table_seed, 0, row, 0.25f, at->second);
        for (std::uint32_t e = 0; e < table_dim; ++e) at->second[e] -= 0.5f * (sum[e] * scale);
      }
    }
  }
  sparse::row_optimizer_config sgd;
  sgd.kind = sparse::row_optimizer_kind::sgd;
  const auto got = rows_of(r, sgd);
  ASSERT_GT(want.size(), 100u) << "seed " << seed;
  for (const auto& [row, values] : want) {
    const auto v = got.find(0, row);
    ASSERT_EQ(v.size(), table_dim) << "seed " << seed << " row " << row << " missing";
    for (std::uint32_t e = 0; e < table_dim; ++e)
      ASSERT_EQ(v[e], values[e]) << "seed " << seed << " row " << row << " element " << e;
  }
  // No row took a gradient the expectation lacks (the rows read at their initial value only
  // are not created by pushes: every row held was updated).
  EXPECT_EQ(got.stats().rows, want.size()) << "seed " << seed;
}

TEST(elastic_property, sparse_rows_take_every_row_gradient_once_through_rescales_and_deaths) {
  sparse::row_optimizer_config sgd;
  sgd.kind = sparse::row_optimizer_kind::sgd;
  sgd.learning_rate = 0.5f;
  int changes = 0, held = 0;
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    auto r = job_sim(plain_sgd(), seed, {.deaths = true, .duplicates = 0.05, .rows = sgd}).run();
    if (HasFatalFailure()) return;
    expect_every_gradient_once(r, seed);
    if (HasFatalFailure()) return;
    expect_every_row_gradient_once(r, seed);
    if (HasFatalFailure()) return;
    changes += r.joins + r.leaves + r.adds + r.drains + r.migrations;
    held += r.held;
  }
  EXPECT_GT(changes, 100);
  EXPECT_GT(held, 10) << "pushes never overtook the slices (and rows) they needed";
}

TEST(elastic_invisible_rows, migrated_rows_are_bitwise_those_of_one_unmigrated_shard) {
  optimizer_config opt;
  opt.kind = optimizer_kind::adam;
  opt.adam.learning_rate = 0.01f;
  sparse::row_optimizer_config lazy;
  lazy.kind = sparse::row_optimizer_kind::lazy_adam;
  lazy.learning_rate = 0.05f;
  lazy.epsilon = 1e-8f;
  lazy.weight_decay = 0.01f;
  for (std::uint64_t seed = 100; seed < 115; ++seed) {
    auto r = job_sim(opt, seed, {.rows = lazy}).run();
    if (HasFatalFailure()) return;
    std::vector<std::byte> held;
    const auto want = unmigrated(r, opt, &lazy, &held);
    ASSERT_EQ(0, std::memcmp(r.params.data(), want.data(), num_keys * sizeof(float)))
        << "seed " << seed;
    const auto got = rows_of(r, lazy);
    const sparse::bucket_range all[] = {{0, sparse::bucket_count}};
    auto ref = sparse::row_store::create(table_seed, {{table_rows, table_dim, 0.25f}}, lazy, all);
    ASSERT_TRUE(ref && ref->merge(held));
    ASSERT_EQ(got.stats().rows, ref->stats().rows) << "seed " << seed;
    for (auto row : ref->held_rows(0)) {
      const auto a = got.find(0, row), b = ref->find(0, row);
      const auto sa = got.find_state(0, row), sb = ref->find_state(0, row);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), b.size_bytes())) << seed << " row " << row;
      ASSERT_EQ(0, std::memcmp(sa.data(), sb.data(), sb.size_bytes())) << seed << " row " << row;
    }
  }
}

}  // namespace
}  // namespace coach
