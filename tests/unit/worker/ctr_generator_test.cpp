// worker::ctr_generator: the planted CTR data is a pure function of its options (same bytes for
// a seed, others for another), its ids follow Zipf's law, its cells decode back to ids, the
// reader reads what it writes, and the planted AUC and log loss of its JSON are those of the
// true probabilities recomputed here from the rows read back.

#include "worker/ctr_generator.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/counter_rng.hpp"
#include "worker/binary_metrics.hpp"
#include "worker/ctr_data.hpp"

namespace coach::worker {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class ctr_generator_test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ctr_generator_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// The defaults (26 fields, vocabularies up to 10^7) on a few rows.
  static ctr_generator_options small(std::uint64_t rows, std::uint64_t seed = 1) {
    ctr_generator_options o;
    o.rows = rows;
    o.seed = seed;
    return o;
  }

  fs::path dir_;
};

TEST_F(ctr_generator_test, a_seed_gives_the_same_bytes_and_another_seed_others) {
  ASSERT_TRUE(write_ctr(small(3000, 5), path("a.tsv")));
  ASSERT_TRUE(write_ctr(small(3000, 5), path("b.tsv")));
  ASSERT_TRUE(write_ctr(small(3000, 6), path("c.tsv")));
  const std::string a = slurp(path("a.tsv"));
  EXPECT_GT(a.size(), 3000u * 200);  // 26 cells of 8 digits a row, most present
  EXPECT_EQ(a, slurp(path("b.tsv")));
  EXPECT_EQ(slurp(path("a.tsv.json")), slurp(path("b.tsv.json")));
  const std::string c = slurp(path("c.tsv"));
  EXPECT_NE(a, c);
  EXPECT_NE(a.substr(0, a.find('\n')), c.substr(0, c.find('\n')));
}

TEST_F(ctr_generator_test, keyed_permutations_are_bijections_and_invert) {
  for (std::uint64_t n : {1ull, 2ull, 10ull, 1000ull, 1025ull}) {
    const keyed_permutation p(n, 42);
    std::set<std::uint64_t> seen;
    for (std::uint64_t x = 0; x < n; ++x) {
      const std::uint64_t y = p.forward(x);
      EXPECT_LT(y, n);
      EXPECT_EQ(p.inverse(y), x);
      seen.insert(y);
    }
    EXPECT_EQ(seen.size(), n);
  }
  // Frequent ranks are not small ids: rank 0..9 of a 10^6 field land all over.
  const keyed_permutation big(1'000'000, 7);
  std::uint64_t small_ids = 0;
  for (std::uint64_t r = 0; r < 10; ++r) small_ids += big.forward(r) < 1000 ? 1 : 0;
  EXPECT_LE(small_ids, 1u);
}

TEST_F(ctr_generator_test, zipf_ranks_follow_the_law_within_sampling_error) {
  // 5000 draws from Zipf(1.1) over 10^6 ranks (P(1) = 0.1239, P(2) = P(1) / 2^1.1) and from
  // Zipf(0.7) over 50.
  for (const auto& [n, s] : {std::pair{1'000'000ull, 1.1}, std::pair{50ull, 0.7}}) {
    const zipf_sampler z(n, s);
    const std::uint64_t key = kernels::counter_rng::key(3, 0);
    std::uint64_t counter = 0;
    const auto uniform = [&] {
      return double(kernels::counter_rng::mix(key + counter++) >> 11) * 0x1.0p-53;
    };
    const int draws = 5000;
    int top = 0, second = 0;
    for (int i = 0; i < draws; ++i) {
      const std::uint64_t k = z.sample(uniform);
      ASSERT_GE(k, 1u);
      ASSERT_LE(k, n);
      top += k == 1 ? 1 : 0;
      second += k == 2 ? 1 : 0;
    }
    const double p1 = z.probability(1), p2 = z.probability(2);
    EXPECT_NEAR(p2 / p1, std::pow(2.0, -s), 1e-12);
    // Four standard deviations of a binomial count.
    EXPECT_NEAR(top, draws * p1, 4 * std::sqrt(draws * p1 * (1 - p1))) << n;
    EXPECT_NEAR(second, draws * p2, 4 * std::sqrt(draws * p2 * (1 - p2))) << n;
    EXPECT_LT(counter, std::uint64_t(draws) * 13 / 10);  // rejections are rare
  }
  EXPECT_NEAR(zipf_sampler(1'000'000, 1.1).probability(1), 0.1238764075518094, 1e-12);
}

TEST_F(ctr_generator_test, cells_decode_to_ids_and_weights_sit_on_the_signal_ids_only) {
  const planted_ctr_model m(small(10));
  ASSERT_EQ(m.n_fields(), 26u);
  EXPECT_EQ(m.vocab(0), 10u);
  EXPECT_EQ(m.vocab(25), 10'000'000u);
  EXPECT_EQ(m.signal_ids(0), 10u);
  EXPECT_EQ(m.signal_ids(25), 20u);
  EXPECT_EQ(m.pairs().size(), 4u);
  EXPECT_EQ(m.pairs()[0], (std::pair<std::size_t, std::size_t>{0, 14}));
  for (std::uint64_t rank : {0ull, 1ull, 19ull, 20ull, 9'999'999ull}) {
    const std::uint64_t id = m.id_of_rank(25, rank);
    EXPECT_EQ(m.rank_of_id(25, id), rank);
    const std::uint32_t cell = m.cell_of_id(25, id);
    EXPECT_NE(cell, ctr_missing);
    EXPECT_EQ(m.id_of_cell(25, cell), id);
    const double w = m.weight(25, id);
    if (rank < 20) {
      EXPECT_NE(w, 0.0);
      EXPECT_LE(std::abs(w), 2 * 0.8);  // 0.8 (U - m), U and m in [-1, 1)
    } else {
      EXPECT_EQ(w, 0.0);
      EXPECT_EQ(m.vector_entry(25, id, 0), 0.0);
    }
  }
  EXPECT_FALSE(m.id_of_cell(3, ctr_missing));
  EXPECT_EQ(m.weight(25, m.id_of_rank(25, 3)),
            planted_ctr_model(small(10)).weight(25, m.id_of_rank(25, 3)));
}

TEST_F(ctr_generator_test, bad_options_are_refused_by_name) {
  auto o = small(0);
  EXPECT_EQ(check_ctr_options(o).error().message, "rows must be >= 2 (got 0)");
  o = small(100);
  o.test_fraction = 1;
  EXPECT_EQ(check_ctr_options(o).error().message, "test_fraction must lie in (0, 1) (got 1)");
  o = small(100);
  o.zipf = 0;
  EXPECT_EQ(check_ctr_options(o).error().message, "zipf exponent must lie in (0, 10] (got 0)");
  o = small(100);
  o.vocab = {5, 6};
  EXPECT_EQ(check_ctr_options(o).error().message, "vocab lists 2 fields, expected 26");
  o = small(100);
  EXPECT_EQ(write_ctr(o, path("no/such/dir/x.tsv")).error().message,
            path("no/such/dir/x.tsv") + ": cannot open for writing");
}

/// The planted model's probability of row r of `set`, recomputed from the formula of
/// ctr_generator.hpp with the model's pure functions.
double reference_probability(const planted_ctr_model& m, const ctr_set& set, std::size_t r) {
  std::vector<std::optional<std::uint64_t>> ids(set.n_fields);
  for (std::size_t f = 0; f < set.n_fields; ++f) {
    const std::uint32_t cell = set.categorical_row(r)[f];
    if (cell == ctr_missing) continue;
    ids[f] = m.id_of_cell(f, cell);
    EXPECT_TRUE(ids[f].has_value()) << "row " << r << " field " << f;
  }
  double z = m.bias();
  for (std::size_t f = 0; f < set.n_fields; ++f) z += ids[f] ? m.weight(f, *ids[f]) : 0.0;
  for (std::size_t i = 0; i < set.n_dense; ++i) {
    z += m.dense_weight(i) * (double(set.dense_row(r)[i]) - m.dense_center(i));
  }
  for (const auto& [f, g] : m.pairs()) {
    if (!ids[f] || !ids[g]) continue;
    for (std::size_t j = 0; j < m.pair_dim(); ++j) {
      z += m.vector_entry(f, *ids[f], j) * m.vector_entry(g, *ids[g], j);
    }
  }
  return 1.0 / (1.0 + std::exp(-z));
}

TEST_F(ctr_generator_test, the_json_planted_scores_are_those_of_the_true_probabilities) {
  auto o = small(20000, 11);
  o.test_fraction = 0.25;
  const std::string out = path("p.tsv.gz");
  auto summary = write_ctr(o, out);
  ASSERT_TRUE(summary) << summary.error().message;
  EXPECT_EQ(summary->train_rows, 15000u);
  EXPECT_EQ(summary->test_rows, 5000u);

  ctr_options read;
  read.path = out;
  auto set = load_ctr(read);
  ASSERT_TRUE(set) << set.error().message;
  ASSERT_EQ(set->rows, 20000u);
  const planted_ctr_model m(o);
  std::vector<double> train_p, test_p;
  std::vector<float> train_y, test_y;
  std::size_t missing = 0;
  for (std::size_t r = 0; r < set->rows; ++r) {
    const double p = reference_probability(m, *set, r);
    (r < 15000 ? train_p : test_p).push_back(p);
    (r < 15000 ? train_y : test_y).push_back(set->labels[r]);
    for (std::size_t f = 0; f < 26; ++f) missing += set->categorical_row(r)[f] == ctr_missing;
  }
  EXPECT_NEAR(double(missing) / (20000.0 * 26), 0.03, 0.003);

  const auto json = nlohmann::json::parse(slurp(out + ".json"));
  const auto& test = json["planted"]["test"];
  EXPECT_NEAR(test["auc"].get<double>(), binary_auc(test_p, test_y).value(), 1e-12);
  EXPECT_NEAR(test["log_loss"].get<double>(), binary_log_loss(test_p, test_y).value(), 1e-12);
  const auto& train = json["planted"]["train"];
  EXPECT_NEAR(train["auc"].get<double>(), binary_auc(train_p, train_y).value(), 1e-5);
  EXPECT_NEAR(train["log_loss"].get<double>(), binary_log_loss(train_p, train_y).value(), 1e-12);
  double positives = 0;
  for (float y : set->labels) positives += y;
  EXPECT_NEAR(json["base_rate"]["all"].get<double>(), positives / 20000.0, 1e-12);
  EXPECT_EQ(json["rows"], 20000);
  EXPECT_EQ(json["parameters"]["seed"], 11);
  EXPECT_EQ(json["parameters"]["vocab"].size(), 26u);
  // The defaults plant a Criteo-like base rate (about 0.26) and a planted AUC near 0.84.
  EXPECT_NEAR(json["base_rate"]["all"].get<double>(), 0.26, 0.03);
  EXPECT_NEAR(test["auc"].get<double>(), 0.84, 0.02);
  EXPECT_EQ(summary->test_auc, test["auc"].get<double>());
}

TEST_F(ctr_generator_test, the_reader_reads_back_plain_and_gzipped_output_alike) {
  auto o = small(2000, 3);
  o.n_dense = 4;
  o.n_fields = 5;
  o.max_vocab = 1000;
  ASSERT_TRUE(write_ctr(o, path("r.tsv")));
  ASSERT_TRUE(write_ctr(o, path("r.tsv.gz")));
  EXPECT_LT(fs::file_size(path("r.tsv.gz")), fs::file_size(path("r.tsv")) / 2);
  ctr_options read;
  read.n_dense = 4;
  read.n_fields = 5;
  read.path = path("r.tsv");
  auto plain = load_ctr(read);
  read.path = path("r.tsv.gz");
  auto gz = load_ctr(read);
  ASSERT_TRUE(plain && gz);
  EXPECT_EQ(plain->rows, 2000u);
  EXPECT_EQ(plain->labels, gz->labels);
  EXPECT_EQ(plain->dense, gz->dense);
  EXPECT_EQ(plain->categorical, gz->categorical);
  // Every present cell is an id of its field; the most frequent cell of the 1000-id field is
  // its rank 0 at P(1) (1 - 3% missing).
  const planted_ctr_model m(o);
  std::size_t top = 0;
  const std::uint32_t top_cell = m.cell_of_id(4, m.id_of_rank(4, 0));
  for (std::size_t r = 0; r < plain->rows; ++r) {
    for (std::size_t f = 0; f < 5; ++f) {
      const std::uint32_t cell = plain->categorical_row(r)[f];
      if (cell != ctr_missing) {
        EXPECT_TRUE(m.id_of_cell(f, cell)) << r << " " << f;
      }
    }
    top += plain->categorical_row(r)[4] == top_cell;
  }
  const double p1 = zipf_sampler(1000, 1.1).probability(1) * 0.97;
  EXPECT_NEAR(double(top), 2000 * p1, 4 * std::sqrt(2000 * p1 * (1 - p1)));
}

}  // namespace
}  // namespace coach::worker
