#pragma once
// worker::model_config: the model section of a job spec: a list of layers, softmax cross-entropy
// at the end. The `type: mlp` form is shorthand for dense layers with ReLU between them
// (expanded_layers()). A model of ctr data may put embedding tables in front of the layers
// (`embeddings:`, docs/sparse.md): their rows live in the shards, not in the flat parameters,
// and may feed the layers the dot products of every two tables' pooled vectors as well
// (`interaction: dot`, DLRM's interaction).

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sparse/bag_lookup.hpp"

namespace coach::worker {

/// Activation between the hidden layers of the mlp shorthand.
enum class activation { relu };

/// What a layer computes.
enum class layer_kind {
  dense,       ///< y = x W + b over the flattened input
  conv2d,      ///< 2-D convolution with bias (kernels::conv2d_shape)
  max_pool2d,  ///< window maximum
  avg_pool2d,  ///< window mean (pads count as zeros)
  flatten,     ///< C x H x W -> C H W (a no-op on the data: NCHW is already flat per sample)
  dropout,     ///< inverted dropout while training, identity while evaluating
  batch_norm,  ///< per channel (per feature after a dense layer); running statistics in the shards
  relu,
  tanh,
  sigmoid,
  gelu,  ///< tanh approximation
};

/// The spec spelling of a kind ("dense", "conv2d", ...).
std::string_view to_string(layer_kind kind) noexcept;

/// One layer as the spec gives it. Fields that do not apply to the kind are ignored.
struct layer_config {
  layer_kind kind = layer_kind::relu;
  int units = 0;          ///< dense: outputs; 0 on the last layer: the data set's classes
  int channels = 0;       ///< conv2d: output channels (filters)
  int kernel = 0;         ///< conv2d: required; pools: default 2
  int stride = 0;         ///< conv2d: default 1; pools: default = kernel
  int padding = 0;        ///< conv2d and pools: zeros on each side
  float p = 0.5f;         ///< dropout: probability of dropping an element, in [0, 1)
  float momentum = 0.1f;  ///< batch_norm: running = (1 - momentum) running + momentum batch
  float epsilon = 1e-5f;  ///< batch_norm
  friend bool operator==(const layer_config&, const layer_config&) = default;
};

struct external_model;

/// What a model with embedding tables feeds its layers besides the dense features and the
/// tables' pooled vectors (docs/sparse.md, "Interaction").
enum class interaction {
  none,  ///< nothing more
  /// the dot product of every two tables' pooled vectors, pairs (i, j), i < j, in the order
  /// (0, 1), (0, 2), ..., (1, 2), ...: T (T - 1) / 2 more inputs (DLRM, Naumov et al. 2019)
  dot,
};

/// The spec spelling of an interaction ("none", "dot").
std::string_view to_string(interaction i) noexcept;

/// One entry of `model.embeddings:` (docs/sparse.md, "The model"): tables of `rows` rows of
/// `dim` floats that the categorical fields `fields` of a ctr data set look up, each sample's
/// bag pooled into `dim` inputs of the layers.
struct embedding_config {
  /// Categorical fields (0-based, < the data set's n_fields), in order; empty: all of them.
  std::vector<int> fields;
  std::uint64_t rows = 0;  ///< rows of each table (required, >= 1): ids are hashed into them
  std::uint32_t dim = 0;   ///< floats per row (required, >= 1)
  sparse::pooling pooling = sparse::pooling::sum;  ///< how a bag's rows become one vector
  float init_scale = 0.01f;  ///< initial rows uniform in [-init_scale, init_scale], >= 0
  /// true: one table per field, each `rows` rows (a bag holds the sample's one value of that
  /// field); false: one table for all the fields, whose bag holds each field's value (multi-hot).
  bool per_field = true;
  friend bool operator==(const embedding_config&, const embedding_config&) = default;
};

/// `model: {script: PATH, args: [...], start_timeout_s: S}`: a user's script computes the steps
/// (docs/python.md; the protocol in docs/wire.md).
struct script_config {
  std::string path;  ///< absolute once the spec is loaded (relative: the spec's folder)
  std::vector<std::string> args;  ///< after the script's path
  double start_timeout_s = 120;   ///< from its start to its hello
  /// Processes each node keeps started ahead (interpreter and framework loaded, model built),
  /// so that a worker that joins computes at once.
  int warm = 1;
  friend bool operator==(const script_config&, const script_config&) = default;
};

/// The model of a job.
struct model_config {
  std::string type = "mlp";  ///< "mlp" (the shorthand), "layers" (an explicit list) or "script"
  /// type "script": the script; its layout comes from its first process (`external`).
  std::optional<script_config> script;
  /// A script's model once its first process registered it (worker/external_layout.hpp); null
  /// before that and for the other types.
  std::shared_ptr<const external_model> external;
  /// mlp: hidden layer widths, each >= 1; may be empty (softmax regression).
  std::vector<int> hidden{128};
  activation act = activation::relu;
  /// type "layers": the list, in order; the last must be dense.
  std::vector<layer_config> layers;
  /// Shape of one sample, {C, H, W}; {0, 0, 0}: the data set's (IDX images are 1 x rows x cols,
  /// other data 1 x 1 x features). When given, C H W must equal the data set's features.
  /// With embeddings: the layers' input, 1 x 1 x (n_dense + the tables' dims, + T (T - 1) / 2
  /// with interaction dot).
  std::array<int, 3> input_shape{0, 0, 0};
  /// Embedding tables in front of the layers (ctr data only); empty: none.
  std::vector<embedding_config> embeddings;
  /// With embeddings: none, or dot (every table the same dim); none without embeddings.
  worker::interaction interaction = worker::interaction::none;
  friend bool operator==(const model_config&, const model_config&) = default;
};

/// The layers the model runs: `layers` for type "layers"; for the mlp shorthand, dense(h) relu
/// for each hidden width h, then dense with the classes (units 0).
std::vector<layer_config> expanded_layers(const model_config& cfg);

}  // namespace coach::worker
