#pragma once
// worker::model_config: the model section of a job spec: a list of layers, softmax cross-entropy
// at the end. The `type: mlp` form is shorthand for dense layers with ReLU between them
// (expanded_layers()).

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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
  std::array<int, 3> input_shape{0, 0, 0};
  friend bool operator==(const model_config&, const model_config&) = default;
};

/// The layers the model runs: `layers` for type "layers"; for the mlp shorthand, dense(h) relu
/// for each hidden width h, then dense with the classes (units 0).
std::vector<layer_config> expanded_layers(const model_config& cfg);

}  // namespace coach::worker
