// worker::sparse_batch and the runner's sparse half: a batch's lookups (row ids by the hashing
// trick, bags per table), the tables a spec's embeddings resolve to, forward_backward's dense and
// row gradients against central differences, evaluation with rows from a source, and a model
// that learns a planted CTR set with one ps::shard holding every row.
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

TEST(sparse_model, row_and_dense_gradients_match_central_differences) {
  // Two shared tables (one mean-pooled over fields 0 and 1, one summed over fields 1 and 2),
  // few rows so that samples and fields collide on rows, and a tanh hidden layer.
  dataset d = ctr_like(6, 2, 3, 4, 3);
  model_config m;
  m.type = "layers";
  m.layers = {{.kind = layer_kind::dense, .units = 5},
              {.kind = layer_kind::tanh},
              {.kind = layer_kind::dense}};
  m.embeddings = {table({0, 1}, 5, 3, sparse::pooling::mean, false),
                  table({1, 2}, 4, 2, sparse::pooling::sum, false)};
  auto net = network::for_data(m, d).value();
  auto be = cpu();
  network_runner run(net, *be, 6);
  std::vector<float> params(net.num_params());
  net.init_params(params, 5);
  const std::uint32_t idx[] = {0, 1, 2, 3, 4, 5};
  const auto batch = sparse_batch(net, d, idx);
  std::vector<std::vector<float>> values(2);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-0.8f, 0.8f);
  for (std::size_t t = 0; t < 2; ++t) {
    values[t].resize(batch[t].rows.rows.size() * net.tables()[t].config.dim);
    for (auto& v : values[t]) v = u(rng);
  }
  ASSERT_GE(batch[0].rows.rows.size(), 3u);
  ASSERT_LT(batch[1].rows.rows.size(), 12u) << "some rows are looked up more than once";

  std::vector<float> grad(params.size());
  std::vector<std::vector<float>> row_grads;
  std::vector<std::span<const float>> pulled(values.begin(), values.end());
  const double loss =
      run.forward_backward(params.data(), d, idx, batch, pulled, grad.data(), row_grads, 0);
  EXPECT_GT(loss, 0.0);
  ASSERT_EQ(row_grads.size(), 2u);
  const auto check = [](double analytic, double fd, const std::string& what) {
    EXPECT_NEAR(analytic, fd, 2e-3 + 1e-2 * std::abs(fd)) << what;
  };
  std::size_t nonzero = 0;
  for (std::size_t t = 0; t < 2; ++t) {
    ASSERT_EQ(row_grads[t].size(), values[t].size());
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
  EXPECT_GT(nonzero, 10u);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto at = [&](float h) {
      auto p = params;
      p[i] += h;
      return loss_of(run, p, d, idx, batch, values);
    };
    check(grad[i], (at(1e-2f) - at(-1e-2f)) / 2e-2, "param " + std::to_string(i));
  }
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

// A planted CTR set, learnt end to end in one process: one shard holds the dense parameters and
// every row of every table (shard_options::rows), the worker reads the rows of each batch from
// it, computes with forward_backward and pushes the dense and row gradients back; the held-out
// AUC, evaluated with rows read from the shard, comes close to the planted model's.
TEST(sparse_model, learns_a_planted_ctr_set_with_one_shard_holding_every_row) {
  const auto start = std::chrono::steady_clock::now();
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

  model_config m;
  m.hidden = {64};
  m.embeddings = {table({}, 1u << 16, 8, sparse::pooling::sum, true)};
  auto net = network::for_data(m, data->train).value();
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
  auto before = run.evaluate(shard.values().data(), data->test, read_rows);
  ASSERT_TRUE(before && before->auc);
  std::vector<std::uint32_t> order(data->train.rows);
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = std::uint32_t(i);
  std::mt19937_64 rng(1);
  std::vector<float> grad(net.num_params());
  std::vector<std::vector<float>> values(tables.size()), row_grads;
  std::vector<std::span<const float>> pulled(tables.size());
  std::int64_t step = 0;
  const int epochs = 2;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t at = 0; at < order.size(); at += batch_size) {
      const std::span<const std::uint32_t> idx(
          order.data() + at, std::min<std::size_t>(batch_size, order.size() - at));
      const auto batch = sparse_batch(net, data->train, idx);
      for (std::size_t t = 0; t < tables.size(); ++t) {
        values[t].resize(batch[t].rows.rows.size() * tables[t].dim);
        ASSERT_TRUE(read_rows(std::uint32_t(t), batch[t].rows.rows, values[t]));
        pulled[t] = values[t];
      }
      const double loss = run.forward_backward(shard.values().data(), data->train, idx, batch,
                                               pulled, grad.data(), row_grads, std::uint64_t(step));
      ps::contribution c;
      c.rank = 0;
      c.samples = idx.size();
      c.loss_sum = loss;
      c.parts = {grad};
      for (std::size_t t = 0; t < tables.size(); ++t)
        c.rows.push_back({std::uint32_t(t), batch[t].rows.rows, row_grads[t]});
      auto done = shard.push(step, std::move(c));
      ASSERT_TRUE(done && *done) << (done ? "not applied" : done.error().message);
      ++step;
    }
  }
  auto ev = run.evaluate(shard.values().data(), data->test, read_rows);
  ASSERT_TRUE(ev) << ev.error().message;
  ASSERT_TRUE(ev->auc);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "initial AUC %.4f; planted test AUC %.4f, log loss %.4f; reached AUC %.4f, log loss %.4f "
      "after %d "
      "epochs of %zu rows (%lld steps), %.1f s; rows held %llu\n",
      *before->auc, summary->test_auc, summary->test_log_loss, *ev->auc, *ev->log_loss, epochs,
      order.size(), static_cast<long long>(step), seconds,
      static_cast<unsigned long long>(shard.rows()->stats().rows));
  // Measured (seed 11): planted 0.7504, reached 0.7275 (log loss 0.4633 and 0.4772), 91 % of
  // the planted model's lift over chance; the rest is mostly the planted pair products, which
  // an MLP over concatenated embeddings learns slowly (with pairs: 0 it reaches 0.732 of
  // 0.738). The bar: 80 % of the lift, and a log loss within 0.03.
  EXPECT_GT(*ev->auc - 0.5, 0.80 * (summary->test_auc - 0.5))
      << "planted " << summary->test_auc << ", reached " << *ev->auc;
  EXPECT_LT(*ev->log_loss, summary->test_log_loss + 0.03);
  EXPECT_LT(*before->auc, 0.6) << "the initial model knows nothing";
}

}  // namespace
}  // namespace coach::worker
