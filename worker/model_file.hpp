#pragma once
// worker::model_file: trained parameters kept as a .safetensors file (Hugging Face's format:
// an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and
// byte range, then the raw little-endian data), so the weights load into PyTorch:
//
//   import torch, safetensors.torch
//   net.load_state_dict(safetensors.torch.load_file("model.safetensors"))
//
// where `net` is the nn.Sequential of the same layers (bench/pytorch_check.py builds it from
// the file's metadata). Tensors are named as that nn.Sequential's state_dict names them
// (network::tensors()), float32; dense weights are written out x in, as nn.Linear holds them.
// Batch norm's num_batches_tracked is left out (PyTorch fills it in when loading).
//
// The header's __metadata__ (strings only) keeps what Coach needs to use the file again:
//   format            "pt"
//   coach.model       the model section as YAML, every layer explicit (model_yaml())
//   coach.input_shape "C,H,W"
//   coach.classes     the number of classes
//   coach.class_names a JSON array of the class names (absent for integer labels)
//   coach.normalize   none | max | standardize; coach.feature_offset, coach.feature_scale: JSON
//                     arrays (absent when empty): x' = (x - offset[c]) / scale[c]
//   and whatever else the writer adds (coach.name, coach.epochs, coach.test_accuracy).
//
// A checkpoint (spec/checkpoint_file.hpp) is such a file with the optimizer state as more
// tensors (pack_tensors with a prefix) and its own metadata entry.

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "worker/dataset.hpp"
#include "worker/network.hpp"

namespace coach::worker {

/// One tensor of a file as read: its name, dtype ("F32", ...), shape and bytes.
struct stored_tensor {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
};

/// A whole .safetensors file.
struct safetensors_file {
  std::map<std::string, std::string> metadata;
  std::vector<stored_tensor> tensors;  ///< in header order
  const stored_tensor* find(std::string_view name) const;
};

/// Writes the safetensors file `path` (through a temporary file in the same directory, flushed
/// to the disk and renamed over it: a crash, of the process or of the machine, leaves the old
/// file or the new one, never half of one). Errors: io_error naming the path.
result<void> write_safetensors(const std::string& path, const safetensors_file& file);

/// Reads a safetensors file. Errors: not_found, io_error, parse_error naming the path and what
/// is wrong (a header longer than the file, JSON that does not parse, a byte range outside the
/// data, a range whose size disagrees with the dtype and shape).
result<safetensors_file> read_safetensors(const std::string& path);

/// The model section of a spec for `net`, as YAML on one line, every layer explicit with its
/// resolved fields: `{type: layers, input_shape: [1, 28, 28], layers: [{type: conv2d, ...}]}`;
/// a model with embedding tables also lists them, one entry per table with its fields
/// (`embeddings: [{fields: [0], rows: 1000, dim: 8, ..., per_field: false}, ...]`) and, when
/// not none, its interaction (`interaction: dot`); its input_shape is the layers' input (dense
/// features, pooled bags and the bags' dot products).
std::string model_yaml(const network& net);

/// A file holding `params` (num_params floats) of `net` as named tensors, with the metadata
/// above for the data set's classes and transform plus `extra`.
safetensors_file pack_model(const network& net, std::span<const float> params,
                            const std::vector<std::string>& class_names,
                            const feature_transform& transform,
                            const std::map<std::string, std::string>& extra);

/// The flat parameters of `net` from a file's tensors. Errors (invalid_argument, naming the
/// tensor): a tensor of the network missing, another dtype than F32, another shape.
result<std::vector<float>> unpack_params(const network& net, const safetensors_file& file);

/// `values`, a vector laid out as the parameters of `net` (num_params floats: a per-parameter
/// optimizer state), as tensors named `prefix` + each tensor's name, shaped and laid out as
/// pack_model writes the parameters. `skip_statistics`: batch norm's running statistics
/// (network::statistic_ranges) are left out.
std::vector<stored_tensor> pack_tensors(const network& net, std::span<const float> values,
                                        const std::string& prefix, bool skip_statistics);
/// The inverse of pack_tensors: the vector from the tensors named `prefix` + each tensor's
/// name (with skip_statistics, the statistics' keys are zero). Errors as unpack_params',
/// naming the whole tensor name.
result<std::vector<float>> unpack_tensors(const network& net, const safetensors_file& file,
                                          const std::string& prefix, bool skip_statistics);

/// The class names and the feature transform kept in a file's metadata.
struct model_labels {
  std::vector<std::string> class_names;  ///< empty: the classes are 0..classes-1
  feature_transform transform;
};
result<model_labels> labels_of(const safetensors_file& file);

}  // namespace coach::worker
