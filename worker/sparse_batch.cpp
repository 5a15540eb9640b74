// worker/sparse_batch.cpp: a batch's lookups in a model's embedding tables, and the members of
// network_runner that run such a model (worker/sparse_batch.hpp): the input built from dense
// features, pooled bags and (interaction dot) the bags' pairwise dot products, the row
// gradients from the layers' input gradient, and evaluation with rows from a row source.
#include "worker/sparse_batch.hpp"

#include <algorithm>

#include "common/enforce.hpp"
#include "worker/binary_metrics.hpp"

namespace coach::worker {
namespace {

/// Interaction dot, forward: for each of `n` samples (rows of `width` floats in `x`), the dot
/// product of every two tables' pooled blocks (`tables` blocks of `dim` floats from column
/// `first`) into the pair columns from `pairs`, pairs in the order (0, 1), (0, 2), ..., (1, 2).
void dot_forward(float* x, std::size_t n, std::size_t width, std::size_t first, std::size_t tables,
                 std::size_t dim, std::size_t pairs) {
  for (std::size_t r = 0; r < n; ++r) {
    float* row = x + r * width;
    float* out = row + pairs;
    for (std::size_t i = 0; i < tables; ++i) {
      const float* ei = row + first + i * dim;
      for (std::size_t j = i + 1; j < tables; ++j) {
        const float* ej = row + first + j * dim;
        float sum = 0.0f;
        for (std::size_t k = 0; k < dim; ++k) sum += ei[k] * ej[k];
        *out++ = sum;
      }
    }
  }
}

/// Interaction dot, backward: with g = dx[pair (i, j)], adds g e_j to table i's block of `dx`
/// and g e_i to table j's (e the blocks of `x`, laid out as in dot_forward), pair after pair
/// in the forward order: the same sums in the same order every time.
void dot_backward(const float* x, float* dx, std::size_t n, std::size_t width, std::size_t first,
                  std::size_t tables, std::size_t dim, std::size_t pairs) {
  for (std::size_t r = 0; r < n; ++r) {
    const float* row = x + r * width;
    float* drow = dx + r * width;
    const float* g = drow + pairs;
    for (std::size_t i = 0; i < tables; ++i) {
      const float* ei = row + first + i * dim;
      float* di = drow + first + i * dim;
      for (std::size_t j = i + 1; j < tables; ++j, ++g) {
        const float* ej = row + first + j * dim;
        float* dj = drow + first + j * dim;
        for (std::size_t k = 0; k < dim; ++k) {
          di[k] += *g * ej[k];
          dj[k] += *g * ei[k];
        }
      }
    }
  }
}

}  // namespace

std::vector<table_batch> sparse_batch(const network& net, const dataset& data,
                                      std::span<const std::uint32_t> indices) {
  const auto& tables = net.tables();
  std::vector<table_batch> out(tables.size());
  std::vector<std::uint64_t> ids;
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const embedding_table& table = tables[t];
    table_batch& b = out[t];
    b.table = std::uint32_t(t);
    b.offsets.resize(indices.size() + 1);
    ids.clear();
    ids.reserve(indices.size() * table.fields.size());
    for (std::size_t s = 0; s < indices.size(); ++s) {
      COACH_ENFORCE(indices[s] < data.rows, "sparse_batch: sample index out of range");
      const std::uint32_t* cells = data.categorical.data() + std::size_t(indices[s]) * data.fields;
      b.offsets[s] = std::uint32_t(ids.size());
      for (int f : table.fields) {
        COACH_ENFORCE(std::size_t(f) < data.fields, "sparse_batch: field out of range");
        ids.push_back(embedding_row(f, cells[f], table.config.rows));
      }
    }
    b.offsets[indices.size()] = std::uint32_t(ids.size());
    b.rows = sparse::unique_rows(ids);
  }
  return out;
}

void network_runner::gather_sparse(const dataset& data, std::span<const std::uint32_t> indices,
                                   const std::vector<table_batch>& batch,
                                   const std::vector<std::span<const float>>& pulled) {
  const auto& tables = model_.tables();
  COACH_ENFORCE(batch.size() == tables.size() && pulled.size() == tables.size(),
                "a batch of a model with tables needs one table_batch and one pull per table");
  reserve(int(indices.size()));
  const std::size_t width = std::size_t(model_.inputs());
  const std::size_t dense = model_.dense_inputs();
  COACH_ENFORCE(data.features == dense, "data set width != the model's dense inputs");
  const std::size_t n = indices.size();
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t row = indices[r];
    COACH_ENFORCE(row < data.rows, "sample index out of range");
    std::copy_n(data.x.data() + row * dense, dense, staging_x_.data() + r * width);
    labels_[r] = data.y[row];
  }
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const auto& b = batch[t];
    const std::size_t dim = tables[t].config.dim;
    COACH_ENFORCE(b.offsets.size() == n + 1, "table_batch: offsets for another batch");
    COACH_ENFORCE(pulled[t].size() == b.rows.rows.size() * dim,
                  "pulled rows: rows x dim floats per table");
    sparse::bag_forward(tables[t].pooling, b.offsets, b.rows.local, pulled[t], dim,
                        {std::span(staging_x_.data(), n * width), width, model_.table_column(t)});
  }
  if (model_.interaction() == interaction::dot)
    dot_forward(staging_x_.data(), n, width, model_.table_column(0), tables.size(),
                tables[0].config.dim, model_.pairs_column());
  be_.upload(input_, staging_x_.data(), n * width);
}

double network_runner::forward_backward(const float* params, const dataset& data,
                                        std::span<const std::uint32_t> indices,
                                        const std::vector<table_batch>& batch,
                                        const std::vector<std::span<const float>>& pulled,
                                        float* grad, std::vector<std::vector<float>>& row_grads,
                                        std::uint64_t noise) {
  const auto& tables = model_.tables();
  COACH_ENFORCE(!tables.empty(), "forward_backward with rows: the model has no embedding tables");
  row_grads.resize(tables.size());
  const int rows = int(indices.size());
  if (rows == 0) {
    be_.scale(model_.num_params(), 0.0f, grad);
    if (ready_) ready_(0, model_.num_params());
    for (std::size_t t = 0; t < tables.size(); ++t)
      row_grads[t].assign(t < batch.size() ? batch[t].rows.rows.size() * tables[t].config.dim : 0,
                          0.0f);
    return 0.0;
  }
  gather_sparse(data, indices, batch, pulled);
  float* logits = forward(params, rows, true, noise, grad);
  const double loss = be_.softmax_xent(logits, labels_.data(), rows, model_.classes(), logits);
  const float* dinput = backward(params, rows, logits, grad, noise);
  const std::size_t width = std::size_t(model_.inputs());
  host_dinput_.resize(std::size_t(rows) * width);
  be_.download(host_dinput_.data(), dinput, host_dinput_.size());
  // The pairs' gradients reach the tables' blocks (staging_x_ still holds this batch's input)
  // before bag_backward reads the blocks.
  if (model_.interaction() == interaction::dot)
    dot_backward(staging_x_.data(), host_dinput_.data(), std::size_t(rows), width,
                 model_.table_column(0), tables.size(), tables[0].config.dim,
                 model_.pairs_column());
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const std::size_t dim = tables[t].config.dim;
    row_grads[t].resize(batch[t].rows.rows.size() * dim);
    sparse::bag_backward(tables[t].pooling, batch[t].offsets, batch[t].rows.local,
                         host_dinput_.data(), width, model_.table_column(t), dim, row_grads[t]);
  }
  return loss;
}

result<network_runner::evaluation> network_runner::evaluate(const float* params,
                                                            const dataset& data,
                                                            const row_source& source) {
  const auto& tables = model_.tables();
  COACH_ENFORCE(!tables.empty(), "evaluate with a row source: the model has no embedding tables");
  evaluation ev;
  binary_scores scores;
  const int classes = model_.classes();
  std::vector<std::uint32_t> idx(static_cast<std::size_t>(max_batch_));
  std::vector<std::vector<float>> values(tables.size());
  std::vector<std::span<const float>> pulled(tables.size());
  for (std::size_t begin = 0; begin < data.rows; begin += idx.size()) {
    const std::size_t n = std::min(idx.size(), data.rows - begin);
    for (std::size_t i = 0; i < n; ++i) idx[i] = std::uint32_t(begin + i);
    const std::span<const std::uint32_t> batch_idx(idx.data(), n);
    const auto batch = sparse_batch(model_, data, batch_idx);
    for (std::size_t t = 0; t < tables.size(); ++t) {
      values[t].resize(batch[t].rows.rows.size() * tables[t].config.dim);
      if (auto ok = source(std::uint32_t(t), batch[t].rows.rows, values[t]); !ok)
        return std::unexpected(std::move(ok.error()));
      pulled[t] = values[t];
    }
    gather_sparse(data, batch_idx, batch, pulled);
    float* logits = forward(params, int(n), false, 0, nullptr);
    collect_binary(logits, int(n), scores);
    ev.correct += be_.count_correct(logits, labels_.data(), int(n), classes);
    ev.loss_sum += be_.softmax_xent(logits, labels_.data(), int(n), classes, logits);
    ev.total += std::int64_t(n);
  }
  finish_binary(scores, ev);
  return ev;
}

}  // namespace coach::worker
