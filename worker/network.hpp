#pragma once
// worker::network: a feed-forward model (a list of layers, softmax cross-entropy at the end) whose
// parameters live in one flat vector, and worker::network_runner, which runs forward and backward
// passes of it on a kernels::backend.
//
// Flat layout (the shard map cuts this vector into slices), layer by layer in order:
//   dense       W (in x out, row-major) then b (out)
//   conv2d      W (K x C x R x S) then b (K)
//   batch_norm  gamma (C), beta (C), running_mean (C), running_var (C)
// The other layers have no parameters. The mlp shorthand gives the layout of earlier versions.
//
// Batch norm's running statistics are keys like any other, so they move with the shards, but the
// shards do not train them: statistic_ranges() names them, and a worker pushes, in their place,
// its batch's mean and unbiased variance times its rows; the shard averages those by samples
// and folds them into the running values with the layer's momentum (ps::optimizer_config).
//
// Embedding tables (model.embeddings, ctr data; docs/sparse.md "The model"): a model may put
// tables in front of the layers. Their rows live in the shards (ps/shard_rows.hpp), never in
// the flat vector above, which is the same with or without them. The layers' input is then a
// sample's dense features followed by one pooled block of `dim` floats per table, in table
// order, and with `interaction: dot` the dot products of every two tables' blocks (pairs_column());
// worker/sparse_batch.hpp makes a batch's bags and runs such a model (the forward_backward and
// evaluate overloads that take rows).

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "sparse/bag_lookup.hpp"
#include "sparse/row_store.hpp"
#include "worker/dataset.hpp"
#include "worker/external_layout.hpp"
#include "worker/model_config.hpp"

namespace coach::worker {

/// Shape of one sample between layers: C x H x W (a dense layer's output is F x 1 x 1).
using sample_shape = std::array<int, 3>;

/// A flat key range [begin, end) of the parameter vector.
struct param_range {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const noexcept { return end - begin; }
};

/// A statistic range and the momentum that folds batch values into it.
struct statistic_range {
  param_range keys;
  float momentum = 0.1f;
};

/// One named tensor of the parameters, as PyTorch's nn.Sequential state_dict names it
/// ("3.weight", "5.running_mean"). Dense weights are stored in x out here and out x in there:
/// `transposed` says so.
struct param_tensor {
  std::string name;
  std::vector<std::int64_t> shape;  ///< PyTorch's shape
  std::size_t offset = 0;           ///< first float in the flat vector
  bool transposed = false;          ///< dense weight: flat holds shape[1] x shape[0]
  std::size_t size() const noexcept;
};

/// One layer resolved against its input shape.
struct layer {
  layer_config cfg;
  sample_shape in{};
  sample_shape out{};
  std::size_t param_offset = 0;  ///< first float of the layer's parameters
  std::size_t param_count = 0;
  std::size_t in_size() const noexcept { return std::size_t(in[0]) * in[1] * in[2]; }
  std::size_t out_size() const noexcept { return std::size_t(out[0]) * out[1] * out[2]; }
};

/// One embedding table of a model, resolved against its data set: a per_field entry of
/// model.embeddings gives one table per field, a shared one (per_field: false) one table.
struct embedding_table {
  sparse::table_config config;  ///< rows, dim, init_scale (what the shards hold)
  sparse::pooling pooling = sparse::pooling::sum;
  std::vector<int> fields;  ///< the categorical fields whose values a sample's bag holds
  friend bool operator==(const embedding_table&, const embedding_table&) = default;
};

struct table_batch;

/// The architecture: layers with their shapes and the flat parameter layout. Cheap to copy.
class network {
 public:
  /// Resolves `cfg` against a sample shape and the class count. Errors (invalid_argument), one
  /// line naming the layer: "layers[2] conv2d: input 7x7 is smaller than kernel 9", a last layer
  /// that is not dense or whose units differ from the classes, an input_shape that does not
  /// match the data, embeddings (they need the data set's fields: for_data).
  static result<network> build(const model_config& cfg, sample_shape input, int classes);
  /// As build() for a data set: its shape (or 1 x 1 x features) and classes; for a script's
  /// model (cfg.external set), external(cfg.external). With cfg.embeddings: the tables resolved
  /// against the data set's categorical fields (`fields` empty: all of them; a per_field entry
  /// makes one table per field) and the layers' input 1 x 1 x (features + the tables' dims,
  /// + T (T - 1) / 2 dot products with interaction dot). Errors (invalid_argument): embeddings
  /// on a data set without categorical fields, a field index >= data.fields, interaction dot
  /// over tables of different dims (naming the first table whose dim differs from table 0's),
  /// and build()'s (which refuses an interaction without embeddings).
  static result<network> for_data(const model_config& cfg, const dataset& data);
  /// A model that a user's script computes: no layers; its tensors, in the layout's order, and
  /// its statistic ranges (the `buffer` tensors, momentum 1: the shards keep the samples-weighted
  /// mean of the values the workers push) from the registered layout; its initial values those
  /// the first process registered; its tables those the script declared (no fields: the script
  /// names each step's rows itself, external_process::lookup).
  static network external(std::shared_ptr<const external_model> model);
  /// The script's model, or null for a network of layers.
  const std::shared_ptr<const external_model>& external() const noexcept { return external_; }

  std::size_t num_params() const noexcept { return num_params_; }
  const std::vector<layer>& layers() const noexcept { return layers_; }
  /// The layers' input and classes ({0, 0, 0} and 0 for a script's model).
  sample_shape input_shape() const noexcept {
    return layers_.empty() ? sample_shape{0, 0, 0} : layers_.front().in;
  }
  int inputs() const noexcept { return layers_.empty() ? 0 : int(layers_.front().in_size()); }
  int classes() const noexcept { return layers_.empty() ? 0 : int(layers_.back().out_size()); }
  /// Batch norm's running statistics (not trained by gradients).
  const std::vector<statistic_range>& statistic_ranges() const noexcept { return statistics_; }
  /// The named tensors, in layer order.
  std::vector<param_tensor> tensors() const;
  /// True when any layer behaves differently in training and evaluation (dropout, batch norm).
  bool has_training_mode() const noexcept;
  /// The embedding tables in front of the layers, in order; empty: no sparse part.
  const std::vector<embedding_table>& tables() const noexcept { return tables_; }
  /// The dense features a sample brings to the layers' input (its first inputs); the tables'
  /// blocks follow. inputs() when there are no tables.
  std::size_t dense_inputs() const noexcept {
    return tables_.empty() ? std::size_t(inputs()) : dense_inputs_;
  }
  /// The first input of table t's pooled block: dense_inputs() + the dims of the tables before.
  std::size_t table_column(std::size_t t) const noexcept;
  /// What the layers get besides the tables' blocks (none without tables).
  worker::interaction interaction() const noexcept { return interaction_; }
  /// With interaction dot, the pairs' inputs: T (T - 1) / 2 dot products, pair (i, j) (i < j)
  /// at pairs_column() + its rank in the order (0, 1), (0, 2), ..., (0, T-1), (1, 2), ...;
  /// 0 otherwise.
  std::size_t pair_inputs() const noexcept;
  /// The first pair's input: table_column(T), just after the last table's block.
  std::size_t pairs_column() const noexcept { return table_column(tables_.size()); }

  /// Fills `params` (host memory, num_params() floats) with the initial values for `seed`:
  /// He-uniform weights (fan-in C R S for conv2d), zero biases, batch norm gamma 1, beta 0,
  /// running mean 0 and variance 1. A pure function of (architecture, seed). A script's model:
  /// the values its first process registered (seeded by the job's seed there).
  void init_params(std::span<float> params, std::uint64_t seed) const;

 private:
  /// build() without its refusal of embeddings: the layers alone.
  static result<network> build_layers(const model_config& cfg, sample_shape input, int classes);

  std::shared_ptr<const external_model> external_;
  std::vector<embedding_table> tables_;
  worker::interaction interaction_ = worker::interaction::none;
  std::size_t dense_inputs_ = 0;
  std::vector<layer> layers_;
  std::vector<statistic_range> statistics_;
  std::size_t num_params_ = 0;
};

/// Runs a network on a backend. Owns the activation buffers for batches of max_batch rows,
/// grown when a larger batch comes (a worker's share of a fixed global batch grows as workers
/// leave; sized for the whole global batch up front, a thousand workers held a thousand times
/// the memory they use: issue 37). Not thread-safe: one runner per worker thread.
class network_runner {
 public:
  network_runner(const network& model, kernels::backend& be, int max_batch);
  ~network_runner();
  /// Buffers for batches of at least `rows` rows from now on (none are shrunk).
  void reserve(int rows);
  /// The rows the buffers hold now.
  int capacity() const noexcept { return max_batch_; }
  network_runner(const network_runner&) = delete;
  network_runner& operator=(const network_runner&) = delete;

  const network& model() const noexcept { return model_; }

  /// Gathers rows `indices` of `data` (at most max_batch of them), runs forward and backward in
  /// training mode with `params` (backend memory) and writes into `grad` (backend memory,
  /// num_params floats) the gradient of the SUM of the per-sample losses, and in the statistic
  /// ranges the batch statistics times the rows. Returns that loss sum. `noise` makes dropout's
  /// masks: callers pass a value distinct per (worker, step) (noise_key()).
  /// REQUIRES: a model without embedding tables (those take the overload below).
  double forward_backward(const float* params, const dataset& data,
                          std::span<const std::uint32_t> indices, float* grad,
                          std::uint64_t noise = 0);

  /// The same for a model with embedding tables (worker/sparse_batch.cpp): `batch` is
  /// sparse_batch(model(), data, indices), pulled[t] the values of batch[t].rows.rows (row after
  /// row, dim floats each, host memory). Builds each sample's input (dense features, then each
  /// table's pooled bag, then with interaction dot every two bags' dot product), runs the
  /// layers, and also sets row_grads[t] (resized) to the gradient of the loss sum with respect
  /// to each of batch[t].rows.rows, in that order: a row looked up by several samples, or
  /// several fields, gets the sum. Needs the gradient with respect to the layers' input, which
  /// the backend computes as every other layer's (cpu; cuda untested).
  /// REQUIRES: batch and pulled hold one entry per table, sized as said.
  double forward_backward(const float* params, const dataset& data,
                          std::span<const std::uint32_t> indices,
                          const std::vector<table_batch>& batch,
                          const std::vector<std::span<const float>>& pulled, float* grad,
                          std::vector<std::vector<float>>& row_grads, std::uint64_t noise = 0);

  /// Evaluation result over a data set.
  struct evaluation {
    std::int64_t correct = 0;
    std::int64_t total = 0;
    double loss_sum = 0;
    /// 2-class models: the AUC and the log loss (worker/binary_metrics.hpp) of the softmax
    /// probability of class 1. Unset for more classes, and the AUC also when the labels hold one
    /// class only (it is undefined then).
    std::optional<double> auc;
    std::optional<double> log_loss;
    double accuracy() const noexcept { return total ? double(correct) / double(total) : 0.0; }
  };

  /// Classifies every row of `data` with `params` (backend memory), in batches of max_batch,
  /// in evaluation mode. With `confusion` (classes x classes, row = label, column = prediction),
  /// counts each row there too. REQUIRES: a model without embedding tables.
  evaluation evaluate(const float* params, const dataset& data,
                      std::vector<std::int64_t>* confusion = nullptr);

  /// Where the rows of a model's tables come from when it is evaluated: fills `out`
  /// (ids.size() * dim floats) with rows `ids` of table `table` (a shard's read_rows, or a pull
  /// from the shards that hold them).
  using row_source = std::function<result<void>(
      std::uint32_t table, std::span<const std::uint64_t> ids, std::span<float> out)>;

  /// evaluate() for a model with embedding tables (worker/sparse_batch.cpp): each batch's rows
  /// fetched from `rows`, table by table. Errors: the first the row source returns.
  result<evaluation> evaluate(const float* params, const dataset& data, const row_source& rows);

  /// The predicted class of every row of `data` (labels ignored), in evaluation mode.
  std::vector<std::int32_t> predict(const float* params, const dataset& data);

  /// Seconds spent in each layer's forward and backward pass since timing was switched on
  /// (bench/train_bench's per-op breakdown). Off by default: no clock is read. On: the backend
  /// is synchronised after every layer, so a device backend's figures count the work (and the
  /// overlap between layers is lost).
  struct layer_time {
    double forward_s = 0;
    double backward_s = 0;
  };
  void enable_timing(bool on);
  const std::vector<layer_time>& timings() const noexcept { return timings_; }

  /// Called during forward_backward with each range of `grad` as soon as the ops that write
  /// it have been enqueued (a layer's parameters once its backward pass is, last layer first;
  /// the whole vector for a batch without rows): the ranges cover the vector once. A device
  /// worker starts copying each to host memory there, while the layers before it still
  /// compute (kernels::backend::download_async). Empty (the default): no calls.
  void on_gradient_ready(std::function<void(std::size_t offset, std::size_t count)> ready);

 private:
  std::function<void(std::size_t, std::size_t)> ready_;
  void gather(const dataset& data, std::span<const std::uint32_t> indices);
  /// gather() for a model with tables: dense features and pooled bags into input_.
  void gather_sparse(const dataset& data, std::span<const std::uint32_t> indices,
                     const std::vector<table_batch>& batch,
                     const std::vector<std::span<const float>>& pulled);
  /// A 2-class model's probabilities of class 1 and labels, collected for auc and log loss.
  struct binary_scores {
    std::vector<double> p;
    std::vector<float> labels;
  };
  /// Adds the rows of a batch's logits (backend memory, labels in labels_) to `s`.
  void collect_binary(const float* logits, int rows, binary_scores& s);
  /// Sets ev.auc and ev.log_loss from `s` (nothing when the model has not 2 classes).
  static void finish_binary(const binary_scores& s, evaluation& ev);
  /// Forward pass of `rows` rows already in input_; returns the logits (rows x classes).
  float* forward(const float* params, int rows, bool training, std::uint64_t noise, float* grad);
  /// Returns the gradient with respect to the layers' input (backend memory, rows x inputs)
  /// when the model has tables, else null (the first layer's input gradient is not computed).
  const float* backward(const float* params, int rows, float* dlogits, float* grad,
                        std::uint64_t noise);
  /// Runs `data` forward in evaluation mode, max_batch rows at a time (labels in labels_), and
  /// calls on_batch(logits, rows) for each batch.
  template <class OnBatch>
  void for_each_batch(const float* params, const dataset& data, OnBatch on_batch);
  /// The class with the largest logit of each of `rows` rows (downloaded to the host).
  const std::vector<std::int32_t>& argmax_rows(const float* logits, int rows);

  /// Allocates the buffers for batches of `max_batch` rows / frees them.
  void allocate(int max_batch);
  void release() noexcept;

  network model_;
  kernels::backend& be_;
  int max_batch_ = 0;
  std::vector<float> staging_x_;       ///< host rows gathered before upload
  std::vector<std::int32_t> labels_;   ///< host labels of the gathered rows
  float* input_ = nullptr;             ///< backend: max_batch x inputs
  std::vector<float*> outs_;           ///< backend: per layer, its output (flatten: its input)
  std::vector<std::int32_t*> argmax_;  ///< max_pool2d layers: backend index buffers
  std::vector<float*> saved_;          ///< batch_norm layers: mean then inv_std (2 C floats)
  float* stats_ = nullptr;             ///< scratch for a batch's statistics (2 x widest C)
  float* delta_a_ = nullptr;           ///< backend: max_batch x widest tensor
  float* delta_b_ = nullptr;
  std::vector<float> host_logits_;  ///< argmax_rows' download buffer
  std::vector<float> host_dinput_;  ///< with tables: the input gradient, downloaded
  std::vector<std::int32_t> best_;  ///< argmax_rows' answer
  bool timing_ = false;
  std::vector<layer_time> timings_;
};

/// The dropout noise value of (worker rank, global step): distinct for every pair.
constexpr std::uint64_t noise_key(std::uint32_t rank, std::int64_t step) noexcept {
  return (std::uint64_t(rank) << 40) ^ std::uint64_t(step);
}

}  // namespace coach::worker
