// worker::sparse_batch and the runner's sparse half: a batch's lookups (row ids by the hashing
// trick, bags per table), the tables a spec's embeddings resolve to, forward_backward's dense and
// row gradients against central differences (with and without interaction dot), the dot
// products' inputs, evaluation with rows from a source, and a model that learns a planted CTR
// set with one ps::shard holding every row, with dot no worse than without.
#include "worker/sparse_batch.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>

#include "ps/shard.hpp"
#include "worker/ctr_data.hpp"
#include "worker/ctr_generator.hpp"
#include "worker/network.hpp"

namespace coach::worker {
namespace {

std::unique_ptr<kernels::backend> cpu() {
  return std::move(*kernels::make_backend(kernels::backend_kind::cpu));
}

/// `rows` samples of `dense` features and `fields` categorical values in [0, vocab).
dataset ctr_like(std::size_t rows, std::size_t dense, std::size_t fields, std::uint32_t vocab,
                 unsigned seed) {
  dataset d;
  d.rows = rows;
  d.features = dense;
  d.classes = 2;
  d.fields = fields;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 2.0f);
  for (std::size_t i = 0; i < rows * dense; ++i) d.x.push_back(u(rng));
  for (std::size_t i = 0; i < rows * fields; ++i) d.categorical.push_back(rng() % vocab);
  for (std::size_t i = 0; i < rows; ++i) d.y.push_back(std::int32_t(rng() % 2));
  return d;
}

embedding_config table(std::vector<int> fields, std::uint64_t rows, std::uint32_t dim,
                       sparse::pooling p, bool per_field) {
  embedding_config e;
  e.fields = std::move(fields);
  e.rows = rows;
  e.dim = dim;
  e.pooling = p;
  e.per_field = per_field;
  return e;
}

TEST(sparse_model, embeddings_resolve_to_tables_after_the_dense_features) {
  const dataset d = ctr_like(4, 3, 5, 100, 1);
  model_config m;
  m.hidden = {8};
  m.embeddings = {table({}, 1000, 4, sparse::pooling::sum, true),
                  table({1, 3}, 50, 2, sparse::pooling::mean, false)};
  auto net = network::for_data(m, d);
  ASSERT_TRUE(net) << net.error().message;
  ASSERT_EQ(net->tables().size(), 6u) << "5 per-field tables, then one shared";
  for (int f = 0; f < 5; ++f) {
    EXPECT_EQ(net->tables()[f].fields, std::vector<int>{f});
    EXPECT_EQ(net->tables()[f].config, (sparse::table_config{1000, 4, 0.01f}));
  }
  EXPECT_EQ(net->tables()[5].fields, (std::vector<int>{1, 3}));
  EXPECT_EQ(net->tables()[5].pooling, sparse::pooling::mean);
  EXPECT_EQ(net->inputs(), 3 + 5 * 4 + 2);
  EXPECT_EQ(net->dense_inputs(), 3u);
  EXPECT_EQ(net->table_column(0), 3u);
  EXPECT_EQ(net->table_column(5), 23u);
  EXPECT_EQ(net->num_params(), std::size_t(25 * 8 + 8 + 8 * 2 + 2)) << "tables are not in it";

  m.embeddings[1].fields = {1, 5};
  EXPECT_EQ(network::for_data(m, d).error().message,
            "model.embeddings[1].fields[1]: field 5 is not among the data set's 5 categorical "
            "fields");
  dataset plain = d;
  plain.fields = 0;
  plain.categorical.clear();
  EXPECT_EQ(network::for_data(m, plain).error().message,
            "model.embeddings need a data set with categorical fields (format ctr); this one "
            "has none");
  EXPECT_EQ(network::build(m, {1, 1, 3}, 2).error().message,
            "model.embeddings: the tables are resolved against the data set's categorical "
            "fields; build such a model for its data set (network::for_data)");
}

TEST(sparse_model, a_batch_looks_up_hashed_rows_each_once) {
  dataset d = ctr_like(3, 1, 2, 10, 2);
  d.categorical = {7, 7, 7, ctr_missing, 2, 7};
  model_config m;
  m.hidden = {};
  m.embeddings = {table({0, 1}, 1u << 20, 2, sparse::pooling::sum, false)};
  auto net = network::for_data(m, d).value();
  const std::uint32_t idx[] = {2, 0, 1};
  const auto b = sparse_batch(net, d, idx);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].offsets, (std::vector<std::uint32_t>{0, 2, 4, 6}));
  const auto row = [](int f, std::uint32_t v) { return embedding_row(f, v, 1u << 20); };
  EXPECT_EQ(row(0, 7), kernels::counter_rng::mix(7) % (1u << 20));
  EXPECT_EQ(row(1, 7), kernels::counter_rng::mix((std::uint64_t{1} << 32) | 7) % (1u << 20));
  EXPECT_NE(row(0, 7), row(1, 7)) << "the field keeps a shared table's fields apart";
  // Lookups: sample 2 (2, 7), sample 0 (7, 7), sample 1 (7, missing): 4 distinct rows.
  const std::vector<std::uint64_t> ids = {row(0, 2), row(1, 7), row(0, 7),
                                          row(1, 7), row(0, 7), row(1, ctr_missing)};
  ASSERT_EQ(b[0].rows.rows.size(), 4u);
  EXPECT_TRUE(std::is_sorted(b[0].rows.rows.begin(), b[0].rows.rows.end()));
  for (std::size_t j = 0; j < ids.size(); ++j)
    EXPECT_EQ(b[0].rows.rows[b[0].rows.local[j]], ids[j]) << "lookup " << j;
}

/// The loss sum of `run` at `params` with the tables' rows `values`.
double loss_of(network_runner& run, const std::vector<float>& params, const dataset& d,
               std::span<const std::uint32_t> idx, const std::vector<table_batch>& batch,
               const std::vector<std::vector<float>>& values) {
  std::vector<float> grad(params.size());
  std::vector<std::vector<float>> row_grads;
  std::vector<std::span<const float>> pulled(values.begin(), values.end());
  return run.forward_backward(params.data(), d, idx, batch, pulled, grad.data(), row_grads, 0);
}

/// Checks forward_backward's row and dense gradients for model `m` on the 6 samples of `d`
/// against central differences of the loss sum (rows drawn in [-0.8, 0.8]); returns how many
/// row gradients are not near zero.
std::size_t check_gradients(const model_config& m, const dataset& d) {
  auto net = network::for_data(m, d).value();
  auto be = cpu();
  network_runner run(net, *be, 6);
  std::vector<float> params(net.num_params());
  net.init_params(params, 5);
  const std::uint32_t idx[] = {0, 1, 2, 3, 4, 5};
  const auto batch = sparse_batch(net, d, idx);
  const std::size_t tables = net.tables().size();
  std::vector<std::vector<float>> values(tables);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-0.8f, 0.8f);
  for (std::size_t t = 0; t < tables; ++t) {
    values[t].resize(batch[t].rows.rows.size() * net.tables()[t].config.dim);
    for (auto& v : values[t]) v = u(rng);
  }

  std::vector<float> grad(params.size());
  std::vector<std::vector<float>> row_grads;
  std::vector<std::span<const float>> pulled(values.begin(), values.end());
  const double loss =
      run.forward_backward(params.data(), d, idx, batch, pulled, grad.data(), row_grads, 0);
  EXPECT_GT(loss, 0.0);
  EXPECT_EQ(row_grads.size(), tables);
  const auto check = [](double analytic, double fd, const std::string& what) {
    EXPECT_NEAR(analytic, fd, 2e-3 + 1e-2 * std::abs(fd)) << what;
  };
  std::size_t nonzero = 0;
  for (std::size_t t = 0; t < tables && t < row_grads.size(); ++t) {
    EXPECT_EQ(row_grads[t].size(), values[t].size());
    if (row_grads[t].size() != values[t].size()) continue;
    for (std::size_t i = 0; i < values[t].size(); ++i) {
      const auto at = [&](float h) {
        auto v = values;
        v[t][i] += h;
        return loss_of(run, params, d, idx, batch, v);
      };
      const double fd = (at(1e-2f) - at(-1e-2f)) / 2e-2;
      check(row_grads[t][i], fd, "table " + std::to_string(t) + " value " + std::to_string(i));
      nonzero += std::abs(row_grads[t][i]) > 1e-4;
    }
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto at = [&](float h) {
      auto p = params;
      p[i] += h;
      return loss_of(run, p, d, idx, batch, values);
    };
    check(grad[i], (at(1e-2f) - at(-1e-2f)) / 2e-2, "param " + std::to_string(i));
  }
  return nonzero;
}

/// dense(5), tanh, dense: a smooth model, so that central differences are exact enough.
model_config tanh_layers() {
  model_config m;
  m.type = "layers";
  m.layers = {{.kind = layer_kind::dense, .units = 5},
              {.kind = layer_kind::tanh},
              {.kind = layer_kind::dense}};
  return m;
}

TEST(sparse_model, row_and_dense_gradients_match_central_differences) {
  // Two shared tables (one mean-pooled over fields 0 and 1, one summed over fields 1 and 2),
  // few rows so that samples and fields collide on rows, and a tanh hidden layer.
  const dataset d = ctr_like(6, 2, 3, 4, 3);
  model_config m = tanh_layers();
  m.embeddings = {table({0, 1}, 5, 3, sparse::pooling::mean, false),
                  table({1, 2}, 4, 2, sparse::pooling::sum, false)};
  const auto batch = sparse_batch(network::for_data(m, d).value(), d,
                                  std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5});
  ASSERT_GE(batch[0].rows.rows.size(), 3u);
  ASSERT_LT(batch[1].rows.rows.size(), 12u) << "some rows are looked up more than once";
  EXPECT_GT(check_gradients(m, d), 10u);
}

TEST(sparse_model, dot_interaction_gradients_match_central_differences) {
  // Three tables of dim 3: two mean-pooled shared ones (fields 0, 1 and fields 1, 2, so a row
  // feeds two pairs and, through field 1, collides across samples) and one summed over field 3
  // alone; their 3 dot products follow the blocks. Row gradients get both the layer's direct
  // gradient and each pair's g e_other.
  const dataset d = ctr_like(6, 2, 4, 4, 7);
  model_config m = tanh_layers();
  m.embeddings = {table({0, 1}, 5, 3, sparse::pooling::mean, false),
                  table({1, 2}, 4, 3, sparse::pooling::mean, false),
                  table({3}, 6, 3, sparse::pooling::sum, true)};
  m.interaction = interaction::dot;
  auto net = network::for_data(m, d).value();
  ASSERT_EQ(net.tables().size(), 3u);
  EXPECT_EQ(net.pair_inputs(), 3u);
  EXPECT_EQ(net.pairs_column(), 2u + 3 * 3);
  EXPECT_EQ(net.inputs(), 2 + 3 * 3 + 3);
  EXPECT_EQ(net.num_params(), std::size_t(14 * 5 + 5 + 5 * 2 + 2));
  EXPECT_GT(check_gradients(m, d), 20u);
  // The same with a summed pair of tables, whose gradients are not scaled by the bag size.
  m.embeddings[0].pooling = sparse::pooling::sum;
  m.embeddings[1].pooling = sparse::pooling::sum;
  EXPECT_GT(check_gradients(m, d), 20u);
}

TEST(sparse_model, dot_interaction_inputs_are_the_pairs_dot_products_in_order) {
  // Four tables of dim 2, one field each, rows read as given: a sample's input is its dense
  // feature, the four blocks, then e0.e1, e0.e2, e0.e3, e1.e2, e1.e3, e2.e3. A model with one
  // dense layer W whose column 0 reads pair input p alone gives logit 0 = that product.
  dataset d = ctr_like(1, 1, 4, 3, 8);
  d.categorical = {0, 1, 2, 0};
  model_config m;
  m.hidden = {};
  m.embeddings = {table({}, 3, 2, sparse::pooling::sum, true)};
  m.interaction = interaction::dot;
  auto net = network::for_data(m, d).value();
  ASSERT_EQ(net.inputs(), 1 + 4 * 2 + 6);
  const std::vector<std::vector<float>> rows = {{1, 2}, {3, -1}, {0.5f, 4}, {-2, 1}};
  const std::vector<float> expected = {1 * 3 - 2,    1 * 0.5f + 8, 1 * -2 + 2,
                                       3 * 0.5f - 4, 3 * -2 - 1,   0.5f * -2 + 4};
  auto be = cpu();
  network_runner run(net, *be, 1);
  for (std::size_t pair = 0; pair < 6; ++pair) {
    std::vector<float> params(net.num_params(), 0.0f);  // W (15 x 2) then b (2)
    params[(net.pairs_column() + pair) * 2] = 1.0f;
    auto ev = run.evaluate(params.data(), d,
                           [&](std::uint32_t t, std::span<const std::uint64_t> ids,
                               std::span<float> out) -> result<void> {
                             EXPECT_EQ(ids.size(), 1u);
                             std::copy(rows[t].begin(), rows[t].end(), out.begin());
                             return {};
                           });
    ASSERT_TRUE(ev) << ev.error().message;
    // Loss of the one sample: softmax over (logit0, 0) at its label.
    const double p1 = 1.0 / (1.0 + std::exp(double(expected[pair])));
    EXPECT_NEAR(ev->loss_sum, -std::log(d.y[0] == 1 ? p1 : 1.0 - p1), 1e-5)
        << "pair " << pair << ": logit 0 should be " << expected[pair];
  }
}

TEST(sparse_model, dot_interaction_needs_tables_of_one_dim) {
  const dataset d = ctr_like(2, 1, 3, 5, 9);
  model_config m;
  m.hidden = {4};
  m.embeddings = {table({0, 1}, 10, 4, sparse::pooling::sum, true),
                  table({2}, 10, 2, sparse::pooling::sum, true)};
  m.interaction = interaction::dot;
  EXPECT_EQ(network::for_data(m, d).error().message,
            "model.interaction dot: table 2 (fields [2]) has dim 2, table 0 has 4; the dot "
            "products need every table of one dim");
  m.embeddings[1].dim = 4;
  auto net = network::for_data(m, d);
  ASSERT_TRUE(net) << net.error().message;
  EXPECT_EQ(net->inputs(), 1 + 3 * 4 + 3);
  m.embeddings.clear();
  EXPECT_EQ(network::build(m, {1, 1, 3}, 2).error().message,
            "model.interaction dot: the interaction is between embedding tables; this model has "
            "none (model.embeddings)");
}

TEST(sparse_model, an_empty_batch_gives_zero_gradients) {
  const dataset d = ctr_like(2, 1, 1, 3, 4);
  model_config m;
  m.hidden = {};
  m.embeddings = {table({}, 10, 2, sparse::pooling::sum, true)};
  auto net = network::for_data(m, d).value();
  auto be = cpu();
  network_runner run(net, *be, 2);
  std::vector<float> params(net.num_params(), 1.0f), grad(net.num_params(), 5.0f);
  std::vector<std::vector<float>> row_grads;
  const auto batch = sparse_batch(net, d, {});
  EXPECT_EQ(run.forward_backward(params.data(), d, {}, batch, {{}}, grad.data(), row_grads), 0.0);
  EXPECT_EQ(grad, std::vector<float>(net.num_params(), 0.0f));
  EXPECT_EQ(row_grads, std::vector<std::vector<float>>(1));
}

TEST(sparse_model, evaluation_reads_rows_from_its_source_and_reports_auc) {
  // Labels given by field 0's value: a model whose one table holds +1 / -1 in the right rows
  // and whose layer reads the table's first column separates them exactly.
  dataset d = ctr_like(8, 0, 1, 2, 5);
  for (std::size_t i = 0; i < 8; ++i) {
    d.categorical[i] = std::uint32_t(i % 2);
    d.y[i] = std::int32_t(i % 2);
  }
  model_config m;
  m.hidden = {};
  m.embeddings = {table({0}, 97, 1, sparse::pooling::sum, true)};
  auto net = network::for_data(m, d).value();
  ASSERT_EQ(net.num_params(), 4u);  // W (1 x 2), b (2)
  const std::vector<float> params = {-1.0f, 1.0f, 0.0f, 0.0f};
  auto be = cpu();
  network_runner run(net, *be, 3);  // batches of 3, 3, 2
  std::size_t calls = 0;
  auto ev = run.evaluate(params.data(), d,
                         [&](std::uint32_t t, std::span<const std::uint64_t> ids,
                             std::span<float> out) -> result<void> {
                           ++calls;
                           EXPECT_EQ(t, 0u);
                           for (std::size_t i = 0; i < ids.size(); ++i)
                             out[i] = ids[i] == embedding_row(0, 1, 97) ? 3.0f : -3.0f;
                           return {};
                         });
  ASSERT_TRUE(ev) << ev.error().message;
  EXPECT_EQ(calls, 3u);
  EXPECT_EQ(ev->total, 8);
  EXPECT_EQ(ev->correct, 8);
  ASSERT_TRUE(ev->auc && ev->log_loss);
  EXPECT_EQ(*ev->auc, 1.0);
  // p(class 1) = 1 / (1 + e^-6) for the positives, 1 - that for the negatives.
  EXPECT_NEAR(*ev->log_loss, std::log1p(std::exp(-6.0)), 1e-6);
  EXPECT_NEAR(ev->loss_sum / 8, *ev->log_loss, 1e-5);
  auto failed = run.evaluate(params.data(), d,
                             [](std::uint32_t, std::span<const std::uint64_t>, std::span<float>) {
                               return result<void>(fail(errc::not_found, "shard 3 is gone"));
                             });
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message, "shard 3 is gone");
}

/// A temporary file removed at the end of the test.
struct temp_file {
  std::string path;
  explicit temp_file(const std::string& name)
      : path((std::filesystem::temp_directory_path() /
              (name + "_" + std::to_string(::getpid()) + ".tsv"))
                 .string()) {}
  ~temp_file() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    std::filesystem::remove(path + ".json", ec);
  }
};

/// A planted CTR set of 300 000 rows (seed 11; 4 dense, 6 fields of 8 to 3000 ids, 20 signal
/// ids, 2 planted pairs; the last 20 % held out), generated once for the tests that learn it.
class planted_ctr : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ctr_generator_options g;
    g.rows = 300'000;
    g.seed = 11;
    g.n_dense = 4;
    g.n_fields = 6;
    g.vocab = {8, 30, 100, 300, 1000, 3000};
    g.signal_ids = 20;
    g.pairs = 2;
    g.test_fraction = 0.2;
    temp_file file("sparse_model_test");
    auto summary = write_ctr(g, file.path);
    ASSERT_TRUE(summary) << summary.error().message;
    dataset_config dc;
    dc.format = dataset_format::ctr;
    dc.path = file.path;
    dc.n_dense = 4;
    dc.n_fields = 6;
    dc.test_fraction = 0.2;
    dc.normalize = normalization::none;
    auto data = load_dataset(dc, 0);
    ASSERT_TRUE(data) << data.error().message;
    ASSERT_EQ(data->train.rows, summary->train_rows);
    ASSERT_EQ(data->test.rows, summary->test_rows);
    summary_ = new ctr_summary(std::move(*summary));
    data_ = new dataset_pair(std::move(*data));
  }
  static void TearDownTestSuite() {
    delete summary_;
    delete data_;
    summary_ = nullptr;
    data_ = nullptr;
  }
  void SetUp() override {
    if (data_ == nullptr) GTEST_SKIP() << "the planted set could not be made (see above)";
  }

  /// The held-out evaluation before and after `epochs` epochs of `m` (tables of the set),
  /// trained as a worker would: one shard holds the dense parameters and every row of every
  /// table (shard_options::rows), the batch's rows are read from it before each step, the dense
  /// and row gradients pushed to it after; evaluated with rows read from the shard.
  struct learnt {
    network_runner::evaluation before, after;
    std::int64_t steps = 0;
    std::uint64_t rows_held = 0;
  };
  static learnt learn(const model_config& m, int epochs) {
    const dataset& train = data_->train;
    auto net = network::for_data(m, train).value();
    std::vector<sparse::table_config> tables;
    for (const auto& t : net.tables()) tables.push_back(t.config);

    auto be = cpu();
    ps::optimizer_config opt;
    opt.kind = ps::optimizer_kind::adam;
    opt.adam.learning_rate = 0.002f;
    ps::shard_options so;
    so.rows = ps::sparse_rows_config{};
    so.rows->seed = 3;
    so.rows->tables = tables;
    so.rows->optimizer.kind = sparse::row_optimizer_kind::adagrad;
    so.rows->optimizer.learning_rate = 0.05f;
    so.rows->num_params = net.num_params();
    std::vector<float> initial(net.num_params());
    net.init_params(initial, 3);
    ps::shard shard(0, opt, *be, {{0, net.num_params()}}, initial, so);
    shard.set_members({0});

    const auto read_rows = [&](std::uint32_t t, std::span<const std::uint64_t> ids,
                               std::span<float> out) { return shard.read_rows(t, ids, out); };
    const int batch_size = 256;
    network_runner run(net, *be, batch_size);
    learnt out;
    auto before = run.evaluate(shard.values().data(), data_->test, read_rows);
    EXPECT_TRUE(before && before->auc);
    if (before) out.before = *before;
    std::vector<std::uint32_t> order(train.rows);
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = std::uint32_t(i);
    std::mt19937_64 rng(1);
    std::vector<float> grad(net.num_params());
    std::vector<std::vector<float>> values(tables.size()), row_grads;
    std::vector<std::span<const float>> pulled(tables.size());
    for (int epoch = 0; epoch < epochs; ++epoch) {
      std::shuffle(order.begin(), order.end(), rng);
      for (std::size_t at = 0; at < order.size(); at += batch_size) {
        const std::span<const std::uint32_t> idx(
            order.data() + at, std::min<std::size_t>(batch_size, order.size() - at));
        const auto batch = sparse_batch(net, train, idx);
        for (std::size_t t = 0; t < tables.size(); ++t) {
          values[t].resize(batch[t].rows.rows.size() * tables[t].dim);
          EXPECT_TRUE(read_rows(std::uint32_t(t), batch[t].rows.rows, values[t]));
          pulled[t] = values[t];
        }
        const double loss = run.forward_backward(shard.values().data(), train, idx, batch, pulled,
                                                 grad.data(), row_grads, std::uint64_t(out.steps));
        ps::contribution c;
        c.rank = 0;
        c.samples = idx.size();
        c.loss_sum = loss;
        c.parts = {grad};
        for (std::size_t t = 0; t < tables.size(); ++t)
          c.rows.push_back({std::uint32_t(t), batch[t].rows.rows, row_grads[t]});
        auto done = shard.push(out.steps, std::move(c));
        EXPECT_TRUE(done && *done) << (done ? "not applied" : done.error().message);
        ++out.steps;
      }
    }
    auto ev = run.evaluate(shard.values().data(), data_->test, read_rows);
    EXPECT_TRUE(ev && ev->auc) << (ev ? "no auc" : ev.error().message);
    if (ev) out.after = *ev;
    out.rows_held = shard.rows()->stats().rows;
    return out;
  }

  /// hidden [64] over one table per field (2^16 rows, dim 8, summed), with `i`.
  static model_config model(interaction i) {
    model_config m;
    m.hidden = {64};
    m.embeddings = {table({}, 1u << 16, 8, sparse::pooling::sum, true)};
    m.interaction = i;
    return m;
  }

  static ctr_summary* summary_;
  static dataset_pair* data_;
};

ctr_summary* planted_ctr::summary_ = nullptr;
dataset_pair* planted_ctr::data_ = nullptr;

// The planted set learnt end to end in one process (planted_ctr::learn): the held-out AUC
// comes close to the planted model's.
TEST_F(planted_ctr, learns_a_planted_ctr_set_with_one_shard_holding_every_row) {
  const auto start = std::chrono::steady_clock::now();
  const int epochs = 2;
  const learnt r = learn(model(interaction::none), epochs);
  ASSERT_TRUE(r.before.auc && r.after.auc && r.after.log_loss);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "initial AUC %.4f; planted test AUC %.4f, log loss %.4f; reached AUC %.4f, log loss %.4f "
      "after %d epochs of %zu rows (%lld steps), %.1f s; rows held %llu\n",
      *r.before.auc, summary_->test_auc, summary_->test_log_loss, *r.after.auc, *r.after.log_loss,
      epochs, data_->train.rows, static_cast<long long>(r.steps), seconds,
      static_cast<unsigned long long>(r.rows_held));
  // Measured (seed 11): planted 0.7504, reached 0.7275 (log loss 0.4633 and 0.4772), 91 % of
  // the planted model's lift over chance; the rest is mostly the planted pair products, which
  // an MLP over concatenated embeddings learns slowly (with pairs: 0 it reaches 0.732 of
  // 0.738). The bar: 80 % of the lift, and a log loss within 0.03.
  EXPECT_GT(*r.after.auc - 0.5, 0.80 * (summary_->test_auc - 0.5))
      << "planted " << summary_->test_auc << ", reached " << *r.after.auc;
  EXPECT_LT(*r.after.log_loss, summary_->test_log_loss + 0.03);
  EXPECT_LT(*r.before.auc, 0.6) << "the initial model knows nothing";
}

// The same model with interaction dot: the pairs' dot products give the layers the planted pair
// products directly, so it learns the set at least as well as the MLP over the blocks alone.
TEST_F(planted_ctr, dot_interaction_learns_it_no_worse_than_the_blocks_alone) {
  const int epochs = 2;
  const learnt none = learn(model(interaction::none), epochs);
  const learnt dot = learn(model(interaction::dot), epochs);
  ASSERT_TRUE(none.after.auc && dot.after.auc && none.after.log_loss && dot.after.log_loss);
  std::printf(
      "planted test AUC %.4f, log loss %.4f; after %d epochs: without dot AUC %.4f, log loss "
      "%.4f; with dot AUC %.4f, log loss %.4f\n",
      summary_->test_auc, summary_->test_log_loss, epochs, *none.after.auc, *none.after.log_loss,
      *dot.after.auc, *dot.after.log_loss);
  EXPECT_GE(*dot.after.auc, *none.after.auc);
  EXPECT_LE(*dot.after.log_loss, *none.after.log_loss);
}

}  // namespace
}  // namespace coach::worker
