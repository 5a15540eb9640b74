// A shard's sparse rows: they follow the dense keys' buckets (ps/shard_rows.hpp), take each
// step's row gradients in rank order, and move with the key ranges bitwise.
#include "ps/shard_rows.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "ps/shard.hpp"

namespace coach::ps {
namespace {

std::unique_ptr<kernels::backend> cpu() {
  return std::move(*kernels::make_backend(kernels::backend_kind::cpu));
}

TEST(ShardRows, EveryBucketFollowsTheRangeThatHoldsItsKey) {
  std::mt19937_64 rng(1);
  for (std::uint64_t n : {1ull, 7ull, 1000ull, 65536ull, 65537ull, 3000000ull}) {
    // Cut [0, n) at random points into ranges dealt to 3 owners.
    std::vector<std::uint64_t> cuts = {0, n};
    for (int i = 0; i < 6; ++i) cuts.push_back(rng() % (n + 1));
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<std::vector<key_range>> owned(3);
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i)
      owned[i % 3].push_back({cuts[i], cuts[i + 1]});
    std::vector<int> owner(sparse::bucket_count, -1);
    for (int k = 0; k < 3; ++k)
      for (const auto& r : buckets_of(owned[k], n))
        for (auto b = r.first; b < r.end; ++b) {
          ASSERT_EQ(owner[b], -1) << "bucket " << b << " twice, n " << n;
          owner[b] = k;
        }
    for (std::uint32_t b = 0; b < sparse::bucket_count; ++b) {
      const auto key = bucket_key(b, n);
      ASSERT_LT(key, n);
      int want = -1;
      for (int k = 0; k < 3; ++k)
        for (const auto& r : owned[k])
          if (r.begin <= key && key < r.end) want = k;
      ASSERT_EQ(owner[b], want) << "bucket " << b << " key " << key << " n " << n;
    }
  }
}

sparse_rows_config rows_config(sparse::row_optimizer_kind kind, std::uint64_t num_params) {
  sparse_rows_config c;
  c.seed = 9;
  c.tables = {{1000, 2, 0.1f}, {1u << 20, 4, 0.05f}};
  c.optimizer.kind = kind;
  c.optimizer.learning_rate = 0.2f;
  c.num_params = num_params;
  return c;
}

/// A push of dense gradient `g` over `ranges` and row gradients for the rows of `ids` (per
/// table) that `s` holds, each row's gradient made from (rank, row).
contribution make_push(const shard& s, std::uint32_t rank, const std::vector<float>& dense,
                       const std::vector<std::vector<std::uint64_t>>& ids) {
  struct memory {
    std::vector<float> dense;
    std::vector<std::vector<std::uint64_t>> ids;
    std::vector<std::vector<float>> grads;
  };
  auto m = std::make_shared<memory>();
  m->dense = dense;
  contribution c;
  c.rank = rank;
  c.samples = 4;
  std::size_t at = 0;
  for (const auto& r : s.ranges()) {
    c.parts.push_back(std::span<const float>(m->dense).subspan(r.begin, r.size()));
    at += r.size();
  }
  const auto& tables = s.rows()->tables();
  m->ids.resize(ids.size());
  m->grads.resize(ids.size());
  for (std::uint32_t t = 0; t < ids.size(); ++t) {
    for (auto row : ids[t]) {
      if (!s.rows()->owns(sparse::bucket_of(t, row))) continue;
      m->ids[t].push_back(row);
      for (std::uint32_t k = 0; k < tables[t].dim; ++k)
        m->grads[t].push_back(std::sin(float(rank * 7919 + row * 31 + k)));
    }
  }
  for (std::uint32_t t = 0; t < ids.size(); ++t)
    if (!m->ids[t].empty()) c.rows.push_back({t, m->ids[t], m->grads[t]});
  c.keep_alive = m;
  return c;
}

TEST(ShardRows, AStepUpdatesTheTouchedRowsWithTheRankOrderedMean) {
  auto be = cpu();
  optimizer_config opt;
  opt.sgd.learning_rate = 0.5f;
  shard_options o;
  o.rows = rows_config(sparse::row_optimizer_kind::sgd, 3);
  shard s(0, opt, *be, {{0, 3}}, std::vector<float>{1, 2, 3}, o);
  s.set_members({0, 1});
  const std::uint64_t r[] = {17};
  std::vector<float> before(2);
  ASSERT_TRUE(s.read_rows(0, r, before));
  std::vector<float> want(2);
  sparse::init_row(9, 0, 17, 0.1f, want);
  EXPECT_EQ(before, want) << "a row's first read is its initial value";
  const std::vector<std::vector<std::uint64_t>> ids = {{17, 40}, {}};
  ASSERT_FALSE(*s.push(0, make_push(s, 0, {0, 0, 0}, ids)));
  ASSERT_TRUE(*s.push(0, make_push(s, 1, {0, 0, 0}, {{17}, {}})));
  std::vector<float> after(2);
  ASSERT_TRUE(s.read_rows(0, r, after));
  for (int k = 0; k < 2; ++k) {
    // rate 0.2 (the dense schedule is constant), scale 1/8, g = rank 0's + rank 1's.
    const float g =
        std::sin(float(0 * 7919 + 17 * 31 + k)) + std::sin(float(1 * 7919 + 17 * 31 + k));
    EXPECT_EQ(after[k], want[k] - 0.2f * (g * (1.0f / 8)));
  }
  EXPECT_EQ(s.rows()->stats().rows, 2u) << "rows 17 and 40";
}

TEST(ShardRows, RefusesRowsItDoesNotHold) {
  auto be = cpu();
  optimizer_config opt;
  shard_options o;
  o.rows = rows_config(sparse::row_optimizer_kind::sgd, 100);
  shard s(0, opt, *be, {{0, 50}}, std::vector<float>(50), o);
  s.set_members({0});
  std::uint64_t foreign = 0;
  while (bucket_key(sparse::bucket_of(0, foreign), 100) < 50) ++foreign;
  auto keep = std::make_shared<std::vector<float>>(50);
  auto ids = std::make_shared<std::vector<std::uint64_t>>(1, foreign);
  auto grads = std::make_shared<std::vector<float>>(2);
  contribution c;
  c.samples = 1;
  c.parts.push_back(*keep);
  c.rows.push_back({0, *ids, *grads});
  const auto e = s.push(0, std::move(c));
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("is not held here"), std::string::npos) << e.error().message;
  EXPECT_EQ(s.applied_steps(), 0);

  shard plain(1, opt, *be, {{0, 50}}, std::vector<float>(50));
  std::vector<float> out(2);
  EXPECT_EQ(plain.read_rows(0, std::span(*ids), out).error().message,
            "shard 1: a read of sparse rows; the model has no sparse tables");
}

// The dense property test's sparse twin: one shard holding everything, and two that split the
// keys and move a range between them mid-run (release/adopt), apply the same pushes; rows and
// lazy Adam's moments end bitwise the same, and so do the dense values.
TEST(ShardRows, RowsMoveWithTheirKeysBitwise) {
  auto be = cpu();
  optimizer_config opt;
  opt.kind = optimizer_kind::adam;
  const std::uint64_t n = 64;
  shard_options o;
  o.rows = rows_config(sparse::row_optimizer_kind::lazy_adam, n);
  std::vector<float> init(n);
  for (std::size_t i = 0; i < n; ++i) init[i] = 0.01f * float(i);
  shard whole(0, opt, *be, {{0, n}}, init, o);
  shard a(1, opt, *be, {{0, 40}}, std::span(init).first(40), o);
  shard b(2, opt, *be, {{40, n}}, std::span(init).subspan(40), o);
  for (auto* s : {&whole, &a, &b}) s->set_members({0, 1, 2});
  std::mt19937_64 rng(3);
  for (std::int64_t step = 0; step < 12; ++step) {
    if (step == 5) {
      auto t = a.release({{24, 40}}, 2);
      ASSERT_TRUE(t) << t.error().to_string();
      EXPECT_FALSE(t->rows.empty());
      ASSERT_TRUE(b.adopt(std::move(*t)));
    }
    for (std::uint32_t rank = 0; rank < 3; ++rank) {
      std::vector<float> dense(n);
      for (auto& x : dense) x = std::uniform_real_distribution<float>(-1, 1)(rng);
      std::vector<std::vector<std::uint64_t>> ids(2);
      for (int i = 0; i < 30; ++i) {
        const auto t = rng() % 2;
        const auto row = rng() % (t == 0 ? 1000 : 300) * (t == 0 ? 1 : 3000);
        if (std::find(ids[t].begin(), ids[t].end(), row) == ids[t].end()) ids[t].push_back(row);
      }
      for (auto* s : {&whole, &a, &b}) ASSERT_TRUE(s->push(step, make_push(*s, rank, dense, ids)));
    }
  }
  std::size_t compared = 0;
  EXPECT_EQ(a.rows()->stats().rows + b.rows()->stats().rows, whole.rows()->stats().rows);
  for (std::uint32_t t = 0; t < 2; ++t)
    for (std::uint64_t i = 0; i < 1000; ++i) {
      const auto row = t == 0 ? i : i * 3000;
      const auto want = whole.rows()->find(t, row);
      if (want.empty()) continue;
      const auto* holder = a.rows()->owns(sparse::bucket_of(t, row)) ? &a : &b;
      const auto got = holder->rows()->find(t, row);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size_bytes()), 0) << t << "/" << row;
      const auto gs = holder->rows()->find_state(t, row);
      const auto ws = whole.rows()->find_state(t, row);
      EXPECT_EQ(std::memcmp(gs.data(), ws.data(), ws.size_bytes()), 0) << t << "/" << row;
      ++compared;
    }
  EXPECT_GT(compared, 200u);
  EXPECT_EQ(std::memcmp(a.values().data(), whole.values().data(), 24 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(b.values().data() + 16, whole.values().data() + 40, 24 * sizeof(float)), 0);

  // A checkpoint (snapshot) taken into an empty shard goes on with the same rows.
  shard restored(3, opt, *be, {}, {}, o);
  ASSERT_TRUE(restored.adopt(whole.snapshot()));
  EXPECT_EQ(restored.rows()->stats().rows, whole.rows()->stats().rows);
  EXPECT_EQ(restored.rows()->save().size(), whole.rows()->save().size());
}

TEST(ShardRows, ATransferWithoutTheRowsIsRefusedAndChangesNothing) {
  auto be = cpu();
  optimizer_config opt;
  shard_options o;
  o.rows = rows_config(sparse::row_optimizer_kind::adagrad, 10);
  shard s(0, opt, *be, {{0, 5}}, std::vector<float>(5), o);
  slice_transfer t;
  t.from = 1;
  t.ranges = {{5, 10}};
  t.values.assign(5, 1.0f);
  t.state_a.assign(0, 0.0f);
  const auto e = s.adopt(t);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message,
            "shard 0: a transfer from shard 1 lacks the sparse rows of its keys");
  EXPECT_EQ(s.ranges(), (std::vector<key_range>{{0, 5}}));
}

}  // namespace
}  // namespace coach::ps
