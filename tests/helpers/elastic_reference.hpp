#pragma once
// What a run of the simulated elastic job (tests/helpers/elastic_sim.hpp) must end with: the
// parameters of every gradient the shards took applied once with plain SGD, and the same
// contributions through one shard that never migrates (the reference for momentum, Adam and the
// rows of lazy Adam); shared by tests/unit/elastic_test.cpp and tests/unit/elastic_rows_test.cpp.

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "tests/helpers/elastic_sim.hpp"

namespace coach::elastic_testing {

/// The parameters plain SGD (lr 0.5) must end with, from what each shard took: each step's
/// gradients summed (exact: small integers) and applied with the backend's update.
inline std::vector<float> expected_sgd(const run_result& r) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  const kernels::sgd_options plain{0.5f, 0.0f, 0.0f};
  std::vector<float> w = r.initial;
  for (std::int64_t s = 0; s < num_steps; ++s) {
    const auto& map = r.at(s).map;
    for (auto k : map.live_shards()) {
      auto it = r.counted.find({k, s});
      EXPECT_NE(it, r.counted.end()) << "shard " << k << " took nothing at step " << s;
      if (it == r.counted.end()) continue;
      std::uint64_t total = 0;
      for (auto [rank, n] : it->second) total += n;
      if (total == 0) continue;
      for (auto range : map.ranges_of(k)) {
        std::vector<float> sum(range.size(), 0.0f);
        for (auto i = range.begin; i < range.end; ++i)
          for (auto [rank, n] : it->second)
            if (n > 0) sum[i - range.begin] += known_gradient(rank, s, i);
        be->sgd_update(w.data() + range.begin, nullptr, sum.data(), sum.size(),
                       float(1.0 / double(total)), plain);
      }
    }
  }
  return w;
}

/// Every gradient taken applied exactly once, and every epoch completed counted each sample
/// once.
inline void expect_every_gradient_once(const run_result& r, std::uint64_t seed) {
  ASSERT_EQ(r.params.size(), num_keys) << "seed " << seed;
  const auto want = expected_sgd(r);
  for (std::size_t i = 0; i < num_keys; ++i)
    ASSERT_EQ(r.params[i], want[i]) << "seed " << seed << " key " << i;
  EXPECT_FALSE(r.epochs.empty()) << "seed " << seed;
  for (const auto& e : r.epochs) EXPECT_EQ(e.samples, num_samples) << "seed " << seed;
}

/// The same contributions through one shard that never migrates (with the rows of the sparse
/// runs when `rows` is set: `held` gets them).
inline std::vector<float> unmigrated(const run_result& r, const optimizer_config& opt,
                                     const sparse::row_optimizer_config* rows = nullptr,
                                     std::vector<std::byte>* held = nullptr) {
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  ps::shard_options so;
  if (rows) so.rows = rows_config(*rows);
  ps::shard one(0, opt, *be, {{0, num_keys}}, r.initial, so);
  for (std::int64_t s = 0; s < num_steps; ++s) {
    std::vector<std::uint32_t> ranks;
    for (auto [rank, n] : r.granted.at(s)) ranks.push_back(rank);
    one.set_members(ranks);
    for (auto [rank, n] : r.granted.at(s)) {
      auto g = std::make_shared<std::vector<float>>(num_keys);
      for (std::size_t i = 0; i < num_keys; ++i) (*g)[i] = known_gradient(rank, s, i);
      ps::contribution c;
      c.rank = rank;
      c.samples = n;
      if (n > 0) c.parts.emplace_back(g->data(), num_keys);
      auto ids = std::make_shared<std::vector<std::uint64_t>>(touched_rows(rank, s));
      auto grads = std::make_shared<std::vector<float>>();
      for (auto row : *ids)
        for (std::uint32_t e = 0; e < table_dim; ++e)
          grads->push_back(known_gradient(rank, s, num_keys + row * table_dim + e));
      if (rows && n > 0) c.rows.push_back({0, *ids, *grads});
      c.keep_alive =
          std::make_shared<std::tuple<decltype(g), decltype(ids), decltype(grads)>>(g, ids, grads);
      EXPECT_TRUE(one.push(s, std::move(c)));
    }
  }
  if (held) *held = one.rows()->save();
  return {one.values().begin(), one.values().end()};
}

inline optimizer_config plain_sgd() {
  optimizer_config opt;
  opt.kind = optimizer_kind::sgd;
  opt.sgd = {0.5f, 0.0f, 0.0f};
  return opt;
}

}  // namespace coach::elastic_testing
