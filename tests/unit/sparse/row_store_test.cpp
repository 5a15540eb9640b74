#include "sparse/row_store.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace coach::sparse {
namespace {

const bucket_range all_buckets[] = {{0, bucket_count}};

row_store make(std::vector<table_config> tables, row_optimizer_config opt,
               std::span<const bucket_range> owned = all_buckets, std::uint64_t seed = 7) {
  auto s = row_store::create(seed, std::move(tables), opt, owned);
  EXPECT_TRUE(s) << s.error().to_string();
  return std::move(*s);
}

std::vector<float> read(row_store& s, std::uint32_t table, std::vector<std::uint64_t> rows) {
  std::vector<float> out(rows.size() * s.tables()[table].dim);
  auto ok = s.read(table, rows, out);
  EXPECT_TRUE(ok) << ok.error().to_string();
  return out;
}

TEST(RowInit, IsAPureFunctionOfSeedTableAndRowWithinTheScale) {
  std::vector<float> a(16), b(16), c(16), d(16);
  init_row(1, 0, 5, 0.5f, a);
  init_row(1, 0, 5, 0.5f, b);
  init_row(1, 1, 5, 0.5f, c);
  init_row(2, 0, 5, 0.5f, d);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c) << "another table";
  EXPECT_NE(a, d) << "another seed";
  double sum = 0;
  for (std::uint64_t row = 0; row < 1000; ++row) {
    init_row(1, 0, row, 0.5f, a);
    for (float x : a) {
      ASSERT_GE(x, -0.5f);
      ASSERT_LT(x, 0.5f);
      sum += x;
    }
  }
  EXPECT_NEAR(sum / 16000, 0.0, 0.01) << "uniform around 0";
}

TEST(RowHash, SpreadsConsecutiveRowsEvenlyOverTheBuckets) {
  // 2^20 consecutive rows into 64 groups of 1,024 buckets: each group within 3 % of its share.
  std::vector<int> groups(64);
  for (std::uint64_t row = 0; row < (1u << 20); ++row) ++groups[bucket_of(3, row) / 1024];
  for (int g : groups) EXPECT_NEAR(g, 16384, 16384 * 0.03);
}

TEST(RowStore, AReadCreatesRowsWithTheirInitialValues) {
  auto s = make({{100, 4, 0.25f}, {1u << 30, 2, 0.1f}}, {});
  const auto v = read(s, 1, {123456789, 5});
  std::vector<float> want(2);
  init_row(7, 1, 123456789, 0.1f, want);
  EXPECT_EQ(std::vector<float>(v.begin(), v.begin() + 2), want);
  EXPECT_EQ(read(s, 1, {123456789, 5}), v) << "read twice, the same";
  EXPECT_EQ(s.stats().rows, 2u);
  EXPECT_TRUE(s.find(0, 3).empty()) << "table 0 untouched";
}

TEST(RowStore, RefusesBadReadsAndPushesAndCreatesNothing) {
  const bucket_range half[] = {{0, bucket_count / 2}};
  auto s = make({{100, 4}}, {}, half);
  std::vector<float> out(4);
  const std::uint64_t big[] = {100};
  EXPECT_EQ(s.read(0, big, out).error().message,
            "a read of sparse table 0: row 100 is not below its 100 rows");
  const std::uint64_t one[] = {1};
  EXPECT_EQ(s.read(1, one, out).error().message,
            "a read of sparse table 1: the model has 1 tables");
  std::vector<float> three(3);
  EXPECT_EQ(s.add(0, one, three).error().message,
            "a push of sparse table 0: 3 floats for 1 rows of dim 4");
  std::uint64_t foreign = 0;
  while (bucket_of(0, foreign) < bucket_count / 2) ++foreign;
  const std::uint64_t f[] = {foreign};
  const auto e = s.read(0, f, out);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, errc::protocol_error);
  EXPECT_NE(e.error().message.find("is not held here"), std::string::npos) << e.error().message;
  EXPECT_EQ(s.stats().rows, 0u);
  EXPECT_EQ(s.pending_rows(), 0u);
}

TEST(RowStore, SgdUpdatesOnlyTheTouchedRowsWithTheRankOrderedSum) {
  row_optimizer_config opt;
  opt.kind = row_optimizer_kind::sgd;
  auto s = make({{10, 2, 0.0f}}, opt);  // init_scale 0: rows start at 0
  read(s, 0, {1, 2, 3});
  const std::uint64_t r12[] = {1, 2}, r2[] = {2};
  ASSERT_TRUE(s.add(0, r12, std::vector<float>{1, 2, 3, 4}));
  ASSERT_TRUE(s.add(0, r2, std::vector<float>{5, 6}));
  EXPECT_EQ(s.pending_rows(), 2u);
  EXPECT_EQ(s.apply(0.5f, 0.1f, 1), 2u);
  const auto v = read(s, 0, {1, 2, 3});
  EXPECT_EQ(v, (std::vector<float>{-0.1f * (1 * 0.5f), -0.1f * (2 * 0.5f), -0.1f * (8 * 0.5f),
                                   -0.1f * (10 * 0.5f), 0, 0}));
  EXPECT_EQ(s.pending_rows(), 0u);
}

TEST(RowStore, AdagradAndLazyAdamFollowTheirFormulas) {
  // One row, gradient 2 per sample over 4 samples (sum 8, scale 1/4): g = 2.
  for (const auto kind : {row_optimizer_kind::adagrad, row_optimizer_kind::lazy_adam}) {
    row_optimizer_config opt;
    opt.kind = kind;
    opt.learning_rate = 0.05f;
    opt.initial_accumulator = 0.1f;
    opt.epsilon = 1e-8f;
    auto s = make({{10, 1, 0.0f}}, opt);
    const std::uint64_t r[] = {4};
    double w = 0, a = 0.1, m = 0, v = 0;
    // The row is touched at steps 3, 4 and 9 of the job (others touch other rows).
    for (const std::int64_t t : {3, 4, 9}) {
      ASSERT_TRUE(s.add(0, r, std::vector<float>{8}));
      s.apply(0.25f, 0.05f, t);
      const double g = 2;
      if (kind == row_optimizer_kind::adagrad) {
        a += g * g;
        w -= 0.05 * g / (std::sqrt(a) + 1e-8);
      } else {
        m = 0.9 * m + 0.1 * g;
        v = 0.999 * v + 0.001 * g * g;
        const double mh = m / (1 - std::pow(0.9, t)), vh = v / (1 - std::pow(0.999, t));
        w -= 0.05 * mh / (std::sqrt(vh) + 1e-8);
      }
      EXPECT_NEAR(s.find(0, 4)[0], w, 1e-6) << to_string(kind) << " step " << t;
    }
    const auto state = s.find_state(0, 4);
    ASSERT_EQ(state.size(), opt.state_per_element());
    if (kind == row_optimizer_kind::adagrad)
      EXPECT_NEAR(state[0], a, 1e-5);
    else {
      EXPECT_NEAR(state[0], m, 1e-6);
      EXPECT_NEAR(state[1], v, 1e-6);
    }
  }
}

// The elastic property: the same steps applied to one store holding every bucket, and to two
// stores that split the buckets and hand a range from one to the other between steps, give
// bitwise the same rows and optimizer state.
TEST(RowStore, SplittingAndMovingBucketsChangesNoBit) {
  row_optimizer_config opt;
  opt.kind = row_optimizer_kind::lazy_adam;
  opt.learning_rate = 0.02f;
  opt.weight_decay = 0.01f;
  const std::vector<table_config> tables = {{1000, 3, 0.05f}, {1u << 24, 8, 0.01f}};
  auto whole = make(tables, opt);
  const bucket_range lo[] = {{0, 30000}}, hi[] = {{30000, bucket_count}};
  auto a = make(tables, opt, lo), b = make(tables, opt, hi);
  std::mt19937_64 rng(5);
  for (std::int64_t step = 1; step <= 30; ++step) {
    if (step == 11 || step == 21) {
      // Move [20000, 30000) from a to b, then back from b... as a migration would.
      const bucket_range moving[] = {{20000, 30000}};
      auto& from = step == 11 ? a : b;
      auto& to = step == 11 ? b : a;
      auto blob = from.release(moving);
      ASSERT_TRUE(blob) << blob.error().to_string();
      ASSERT_TRUE(to.adopt(*blob, moving));
    }
    for (std::uint32_t rank = 0; rank < 3; ++rank) {
      for (std::uint32_t table = 0; table < 2; ++table) {
        std::vector<std::uint64_t> rows;
        for (int i = 0; i < 40; ++i) {
          const auto row = (rng() % 200) * (table == 0 ? 5 : 80000);
          if (std::find(rows.begin(), rows.end(), row) == rows.end()) rows.push_back(row);
        }
        std::vector<float> grads(rows.size() * tables[table].dim);
        for (auto& g : grads) g = std::uniform_real_distribution<float>(-1, 1)(rng);
        ASSERT_TRUE(whole.add(table, rows, grads));
        // Split by owner, keeping the order within each part.
        for (auto* s : {&a, &b}) {
          std::vector<std::uint64_t> mine;
          std::vector<float> mine_grads;
          for (std::size_t i = 0; i < rows.size(); ++i) {
            if (!s->owns(bucket_of(table, rows[i]))) continue;
            mine.push_back(rows[i]);
            const auto* g = grads.data() + i * tables[table].dim;
            mine_grads.insert(mine_grads.end(), g, g + tables[table].dim);
          }
          ASSERT_TRUE(s->add(table, mine, mine_grads));
        }
      }
    }
    whole.apply(1.0f / 96, 0.02f, step);
    a.apply(1.0f / 96, 0.02f, step);
    b.apply(1.0f / 96, 0.02f, step);
  }
  EXPECT_EQ(a.stats().rows + b.stats().rows, whole.stats().rows);
  std::size_t compared = 0;
  for (std::uint32_t table = 0; table < 2; ++table) {
    for (std::uint64_t i = 0; i < 200; ++i) {
      const auto row = i * (table == 0 ? 5 : 80000);
      const auto want = whole.find(table, row);
      if (want.empty()) continue;
      auto& holder = a.owns(bucket_of(table, row)) ? a : b;
      const auto got = holder.find(table, row);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size_bytes()), 0) << table << "/" << row;
      const auto gs = holder.find_state(table, row), ws = whole.find_state(table, row);
      EXPECT_EQ(std::memcmp(gs.data(), ws.data(), ws.size_bytes()), 0) << table << "/" << row;
      ++compared;
    }
  }
  EXPECT_GT(compared, 300u);
}

TEST(RowStore, SaveAndAdoptRestoreEveryRowAndItsState) {
  row_optimizer_config opt;  // adagrad
  auto s = make({{50, 2, 0.3f}, {70, 5, 0.3f}}, opt);
  read(s, 0, {1, 2, 3});
  read(s, 1, {69});
  const std::uint64_t r[] = {2};
  ASSERT_TRUE(s.add(0, r, std::vector<float>{1, -1}));
  s.apply(1.0f, 0.1f, 1);
  const auto blob = s.save();
  auto fresh = make({{50, 2, 0.3f}, {70, 5, 0.3f}}, opt, {});
  ASSERT_TRUE(fresh.adopt(blob, all_buckets));
  EXPECT_EQ(fresh.stats().rows, 4u);
  for (auto [t, row] : {std::pair{0u, 1ull}, {0u, 2ull}, {0u, 3ull}, {1u, 69ull}}) {
    const auto w = s.find(t, row), g = fresh.find(t, row);
    EXPECT_TRUE(std::equal(w.begin(), w.end(), g.begin(), g.end())) << t << "/" << row;
    const auto ws = s.find_state(t, row), gs = fresh.find_state(t, row);
    EXPECT_TRUE(std::equal(ws.begin(), ws.end(), gs.begin(), gs.end())) << t << "/" << row;
  }
}

TEST(RowStore, MergesEveryShardsRowsIntoOneStoreHoldingAllBuckets) {
  row_optimizer_config opt;
  const bucket_range lo[] = {{0, 100}}, hi[] = {{100, bucket_count}};
  auto a = make({{500, 2, 0.3f}}, opt, lo), b = make({{500, 2, 0.3f}}, opt, hi);
  std::vector<std::uint64_t> ra, rb;
  for (std::uint64_t r = 0; r < 500; ++r) (a.owns(bucket_of(0, r)) ? ra : rb).push_back(r);
  ASSERT_FALSE(ra.empty());
  read(a, 0, ra);
  read(b, 0, rb);
  auto all = make({{500, 2, 0.3f}}, opt);
  ASSERT_TRUE(all.merge(a.save()));
  ASSERT_TRUE(all.merge(b.save()));
  EXPECT_EQ(all.stats().rows, 500u);
  const auto twice = all.merge(a.save());
  ASSERT_FALSE(twice);
  EXPECT_TRUE(twice.error().message.ends_with("of table 0 twice")) << twice.error().message;
  auto part = make({{500, 2, 0.3f}}, opt, lo);
  EXPECT_EQ(part.merge(b.save()).error().message,
            "a merge of rows into a store that lacks bucket 100");
}

// An evaluator takes only the rows its test set looks up: the kept rows come with their
// values, the others are not held (a read would make them at their initial values), and a
// malformed blob is refused whole as by the plain merge.
TEST(RowStore, AMergeOfTheRowsToKeepTakesThoseAloneWithTheirValues) {
  row_optimizer_config opt;
  auto s = make({{500, 2, 0.3f}, {70, 3, 0.3f}}, opt);
  std::vector<std::uint64_t> rows0(100), rows1 = {1, 5, 69};
  for (std::uint64_t r = 0; r < 100; ++r) rows0[r] = 3 * r;
  read(s, 0, rows0);
  read(s, 1, rows1);
  const std::vector<float> g(rows0.size() * 2, 1.0f);
  ASSERT_TRUE(s.add(0, rows0, g));
  s.apply(1.0f, 0.5f, 1);
  const auto blob = s.save();
  const std::vector<std::vector<std::uint64_t>> keep = {{0, 7, 9, 297, 499}, {5}};
  auto some = make({{500, 2, 0.3f}, {70, 3, 0.3f}}, opt);
  ASSERT_TRUE(some.merge(blob, keep));
  EXPECT_EQ(some.stats().rows, 4u) << "rows 0, 9, 297 of table 0 (7 and 499 were never made)";
  for (auto [t, row] : {std::pair{0u, 0ull}, {0u, 9ull}, {0u, 297ull}, {1u, 5ull}}) {
    const auto w = s.find(t, row), got = some.find(t, row);
    ASSERT_FALSE(got.empty()) << t << "/" << row;
    EXPECT_TRUE(std::equal(w.begin(), w.end(), got.begin(), got.end())) << t << "/" << row;
  }
  EXPECT_TRUE(some.find(0, 3).empty());
  EXPECT_TRUE(some.find(1, 69).empty());
  auto cut = make({{500, 2, 0.3f}, {70, 3, 0.3f}}, opt);
  EXPECT_EQ(cut.merge(std::span(blob).first(blob.size() - 1), keep).error().message,
            "a rows transfer cut short in table 1");
  EXPECT_EQ(cut.stats().rows, 0u);
}

TEST(RowStore, RefusesATransferThatIsCutShortOrDoesNotFit) {
  row_optimizer_config opt;
  auto s = make({{50, 2}}, opt);
  read(s, 0, {1, 2, 3});
  const auto blob = s.save();
  auto other_dim = make({{50, 3}}, opt, {});
  EXPECT_EQ(other_dim.adopt(blob, all_buckets).error().message,
            "a rows transfer of table 0 with dim 2; the model's is 3");
  auto fresh = make({{50, 2}}, opt, {});
  const auto cut = std::span(blob).first(blob.size() - 1);
  EXPECT_EQ(fresh.adopt(cut, all_buckets).error().message, "a rows transfer cut short in table 0");
  auto longer = blob;
  longer.push_back(std::byte{0});
  EXPECT_EQ(fresh.adopt(longer, all_buckets).error().message,
            "a rows transfer with bytes after its tables");
  const bucket_range none_of_them[] = {{0, 1}};
  const auto e = fresh.adopt(blob, none_of_them);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("outside the buckets it moves"), std::string::npos);
  EXPECT_EQ(fresh.stats().rows, 0u) << "nothing taken from a refused transfer";
  EXPECT_EQ(s.adopt(blob, all_buckets).error().message, "an adoption of bucket 0: owned already");
}

TEST(RowStore, ReleaseWaitsForTheOpenStep) {
  row_optimizer_config opt;
  auto s = make({{50, 2}}, opt);
  const std::uint64_t r[] = {4};
  ASSERT_TRUE(s.add(0, r, std::vector<float>{1, 1}));
  const bucket_range some[] = {{0, 100}};
  EXPECT_EQ(s.release(some).error().message,
            "a release of buckets while a step is open (1 rows summed)");
  s.apply(1, 0.1f, 1);
  EXPECT_TRUE(s.release(some));
  EXPECT_FALSE(s.owns(50));
  EXPECT_TRUE(s.owns(100));
}

TEST(RowStore, MemoryFollowsTheRowsUsedNotTheRowsDeclared) {
  row_optimizer_config opt;
  opt.kind = row_optimizer_kind::sgd;
  auto s = make({{std::uint64_t{1} << 40, 8}}, opt);
  std::vector<std::uint64_t> rows;
  for (std::uint64_t i = 0; i < 10000; ++i) rows.push_back(i * 104729 * 1000);
  read(s, 0, rows);
  const auto st = s.stats();
  EXPECT_EQ(st.rows, 10000u);
  // 10,000 rows of 32 bytes, in 4,096-row blocks: 3 blocks.
  EXPECT_EQ(st.value_bytes, 3u * 4096 * 32);
  EXPECT_LE(st.index_bytes, 10000u * 16 * 100 / 35);
}

TEST(RowOptimizer, ValidatesItsFields) {
  row_optimizer_config c;
  c.beta2 = 1.0f;
  EXPECT_EQ(c.validate().error().message, "sparse_optimizer.beta2 must be in [0, 1), got 1");
  c = {};
  c.epsilon = 0;
  EXPECT_EQ(c.validate().error().message, "sparse_optimizer.epsilon must be > 0, got 0");
  EXPECT_EQ(parse_row_optimizer_kind("adam").error().message,
            "sparse_optimizer.type 'adam' is not one of sgd, adagrad, lazy_adam");
  EXPECT_EQ(parse_row_optimizer_kind("lazy_adam").value(), row_optimizer_kind::lazy_adam);
}

}  // namespace
}  // namespace coach::sparse
