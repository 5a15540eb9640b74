#include "worker/network.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "common/enforce.hpp"
#include "common/format.hpp"
#include "kernels/layer_shapes_check.hpp"
#include "worker/network_shapes.hpp"

namespace coach::worker {

using detail::conv_of;
using detail::norm_of;
using detail::pool_of;

std::string_view to_string(interaction i) noexcept {
  return i == interaction::dot ? "dot" : "none";
}

std::string_view to_string(layer_kind kind) noexcept {
  switch (kind) {
    case layer_kind::dense:
      return "dense";
    case layer_kind::conv2d:
      return "conv2d";
    case layer_kind::max_pool2d:
      return "max_pool2d";
    case layer_kind::avg_pool2d:
      return "avg_pool2d";
    case layer_kind::flatten:
      return "flatten";
    case layer_kind::dropout:
      return "dropout";
    case layer_kind::batch_norm:
      return "batch_norm";
    case layer_kind::relu:
      return "relu";
    case layer_kind::tanh:
      return "tanh";
    case layer_kind::sigmoid:
      return "sigmoid";
    case layer_kind::gelu:
      return "gelu";
  }
  return "?";
}

std::vector<layer_config> expanded_layers(const model_config& cfg) {
  if (cfg.type != "mlp") return cfg.layers;
  std::vector<layer_config> out;
  for (int h : cfg.hidden) {
    out.push_back(layer_config{.kind = layer_kind::dense, .units = h});
    out.push_back(layer_config{.kind = layer_kind::relu});
  }
  out.push_back(layer_config{.kind = layer_kind::dense});
  return out;
}

std::size_t param_tensor::size() const noexcept {
  std::size_t n = 1;
  for (auto d : shape) n *= std::size_t(d);
  return n;
}

namespace {

/// A table's fields as the spec lists them: "[1, 3]".
std::string fields_text(const std::vector<int>& fields) {
  std::string out = "[";
  for (std::size_t i = 0; i < fields.size(); ++i)
    out += coach::format("{}{}", i == 0 ? "" : ", ", fields[i]);
  return out + "]";
}

std::string dims(const sample_shape& s) {
  if (s[1] == 1 && s[2] == 1) return coach::format("{}", s[0]);
  return coach::format("{}x{}x{}", s[0], s[1], s[2]);
}

/// A kernels::validate() message without its own "conv2d: " or "pool2d: " prefix.
std::string detail_of(const error& e) {
  const auto colon = e.message.find(": ");
  return colon == std::string::npos ? e.message : e.message.substr(colon + 2);
}

bool is_windowed(layer_kind k) {
  return k == layer_kind::conv2d || k == layer_kind::max_pool2d || k == layer_kind::avg_pool2d;
}

}  // namespace

result<network> network::build(const model_config& cfg, sample_shape input, int classes) {
  if (!cfg.embeddings.empty())
    return fail(errc::invalid_argument,
                "model.embeddings: the tables are resolved against the data set's categorical "
                "fields; build such a model for its data set (network::for_data)");
  if (cfg.interaction != interaction::none)
    return fail(errc::invalid_argument,
                "model.interaction {}: the interaction is between embedding tables; this model "
                "has none (model.embeddings)",
                to_string(cfg.interaction));
  return build_layers(cfg, input, classes);
}

result<network> network::build_layers(const model_config& cfg, sample_shape input, int classes) {
  if (classes < 2)
    return fail(errc::invalid_argument, "model: {} class(es); 2 or more needed", classes);
  if (cfg.input_shape != sample_shape{0, 0, 0}) {
    const std::size_t given =
        std::size_t(cfg.input_shape[0]) * cfg.input_shape[1] * cfg.input_shape[2];
    const std::size_t have = std::size_t(input[0]) * input[1] * input[2];
    if (given != have) {
      return fail(errc::invalid_argument,
                  "model.input_shape {} holds {} values but the data set's samples have {}",
                  dims(cfg.input_shape), given, have);
    }
    input = cfg.input_shape;
  }
  if (input[0] < 1 || input[1] < 1 || input[2] < 1)
    return fail(errc::invalid_argument, "model: empty input shape {}", dims(input));
  network net;
  const auto list = expanded_layers(cfg);
  if (list.empty()) return fail(errc::invalid_argument, "model: no layers");
  sample_shape shape = input;
  std::size_t offset = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    layer l{list[i], shape, shape, offset, 0};
    const std::string what = coach::format("layers[{}] {}", i, to_string(l.cfg.kind));
    const bool last = i + 1 == list.size();
    const std::size_t flat = l.in_size();
    if (is_windowed(l.cfg.kind)) {
      if (l.cfg.kind != layer_kind::conv2d) {
        if (l.cfg.kernel == 0) l.cfg.kernel = 2;
        if (l.cfg.stride == 0) l.cfg.stride = l.cfg.kernel;
      } else if (l.cfg.stride == 0) {
        l.cfg.stride = 1;
      }
      const int k = l.cfg.kernel, p = l.cfg.padding;
      if (shape[1] + 2 * p < k || shape[2] + 2 * p < k) {
        const std::string padded =
            p > 0 ? coach::format(" ({}x{} padded)", shape[1] + 2 * p, shape[2] + 2 * p) : "";
        return fail(errc::invalid_argument, "{}: input {}x{}{} is smaller than kernel {}", what,
                    shape[1], shape[2], padded, k);
      }
    }
    switch (l.cfg.kind) {
      case layer_kind::dense: {
        if (l.cfg.units == 0) {
          if (!last)
            return fail(errc::invalid_argument,
                        "{}: units is required (only the last dense layer "
                        "may leave it out: it gets the classes)",
                        what);
          l.cfg.units = classes;
        }
        if (last && l.cfg.units != classes)
          return fail(errc::invalid_argument,
                      "{}: the last layer gives the class scores, so its units must be the data "
                      "set's {} classes, got {}",
                      what, classes, l.cfg.units);
        if (flat > std::size_t(1) << 30)
          return fail(errc::invalid_argument, "{}: input of {} values is too large", what, flat);
        l.out = {l.cfg.units, 1, 1};
        l.param_count = flat * std::size_t(l.cfg.units) + std::size_t(l.cfg.units);
        break;
      }
      case layer_kind::conv2d: {
        if (l.cfg.channels < 1)
          return fail(errc::invalid_argument, "{}: channels must be >= 1", what);
        auto s = conv_of(l, 1);
        if (auto ok = kernels::validate(s); !ok)
          return fail(errc::invalid_argument, "{}: {}", what, detail_of(ok.error()));
        l.out = {s.filters, s.out_h(), s.out_w()};
        l.param_count = s.weight_size() + std::size_t(s.filters);
        break;
      }
      case layer_kind::max_pool2d:
      case layer_kind::avg_pool2d: {
        auto s = pool_of(l, 1);
        if (auto ok = kernels::validate(s); !ok)
          return fail(errc::invalid_argument, "{}: {}", what, detail_of(ok.error()));
        l.out = {shape[0], s.out_h(), s.out_w()};
        break;
      }
      case layer_kind::flatten:
        l.out = {int(flat), 1, 1};
        break;
      case layer_kind::dropout:
        if (!(l.cfg.p >= 0.0f && l.cfg.p < 1.0f))
          return fail(errc::invalid_argument, "{}: p must be in [0, 1), got {}", what, l.cfg.p);
        break;
      case layer_kind::batch_norm: {
        const int c = shape[0];
        l.param_count = 4 * std::size_t(c);
        net.statistics_.push_back(statistic_range{
            {offset + 2 * std::size_t(c), offset + 4 * std::size_t(c)}, l.cfg.momentum});
        break;
      }
      case layer_kind::relu:
      case layer_kind::tanh:
      case layer_kind::sigmoid:
      case layer_kind::gelu:
        break;
    }
    if (last && l.cfg.kind != layer_kind::dense)
      return fail(errc::invalid_argument,
                  "{}: the last layer must be dense (its outputs are the class scores; softmax "
                  "cross-entropy follows it)",
                  what);
    offset += l.param_count;
    shape = l.out;
    net.layers_.push_back(l);
  }
  net.num_params_ = offset;
  return net;
}

result<network> network::for_data(const model_config& cfg, const dataset& data) {
  if (cfg.script) {
    if (!cfg.external)
      return fail(errc::invalid_argument,
                  "the script {}'s model is not registered yet (its first process registers it)",
                  cfg.script->path);
    return external(cfg.external);
  }
  if (cfg.embeddings.empty()) {
    sample_shape shape = data.shape;
    if (shape == sample_shape{0, 0, 0}) shape = {1, 1, int(data.features)};
    return build(cfg, shape, data.classes);
  }
  if (data.fields == 0)
    return fail(errc::invalid_argument,
                "model.embeddings need a data set with categorical fields (format ctr); this one "
                "has none");
  std::vector<embedding_table> tables;
  std::size_t width = data.features;
  for (std::size_t i = 0; i < cfg.embeddings.size(); ++i) {
    const embedding_config& e = cfg.embeddings[i];
    if (e.rows == 0 || e.dim == 0)
      return fail(errc::invalid_argument, "model.embeddings[{}]: rows and dim must be >= 1", i);
    std::vector<int> fields = e.fields;
    if (fields.empty())
      for (std::size_t f = 0; f < data.fields; ++f) fields.push_back(int(f));
    for (std::size_t j = 0; j < fields.size(); ++j)
      if (fields[j] < 0 || std::size_t(fields[j]) >= data.fields)
        return fail(errc::invalid_argument,
                    "model.embeddings[{}].fields[{}]: field {} is not among the data set's {} "
                    "categorical fields",
                    i, j, fields[j], data.fields);
    const sparse::table_config tc{e.rows, e.dim, e.init_scale};
    if (e.per_field) {
      for (int f : fields) tables.push_back({tc, e.pooling, {f}});
    } else {
      tables.push_back({tc, e.pooling, std::move(fields)});
    }
  }
  for (const auto& t : tables) width += t.config.dim;
  if (cfg.interaction == interaction::dot) {
    // Every two tables' pooled vectors meet in a dot product: one dim for all.
    for (std::size_t t = 1; t < tables.size(); ++t)
      if (tables[t].config.dim != tables[0].config.dim)
        return fail(errc::invalid_argument,
                    "model.interaction dot: table {} (fields {}) has dim {}, table 0 has {}; the "
                    "dot products need every table of one dim",
                    t, fields_text(tables[t].fields), tables[t].config.dim, tables[0].config.dim);
    width += tables.size() * (tables.size() - 1) / 2;
  }
  if (width > std::size_t(1) << 30)
    return fail(errc::invalid_argument, "model.embeddings: an input of {} values is too large",
                width);
  auto net = build_layers(cfg, sample_shape{1, 1, int(width)}, data.classes);
  if (!net) return net;
  net->tables_ = std::move(tables);
  net->interaction_ = cfg.interaction;
  net->dense_inputs_ = data.features;
  return net;
}

std::size_t network::pair_inputs() const noexcept {
  if (interaction_ != interaction::dot) return 0;
  return tables_.size() * (tables_.size() - 1) / 2;  // 0 tables: 0 * anything
}

std::size_t network::table_column(std::size_t t) const noexcept {
  std::size_t column = dense_inputs();
  for (std::size_t i = 0; i < t && i < tables_.size(); ++i) column += tables_[i].config.dim;
  return column;
}

network network::external(std::shared_ptr<const external_model> model) {
  network n;
  for (const auto& t : model->layout.tensors)
    if (t.kind == tensor_kind::buffer)
      n.statistics_.push_back({{t.offset, t.offset + t.size()}, 1.0f});
  // The script's tables: the shards hold them as model.embeddings' (its process pools them).
  for (const auto& t : model->layout.tables)
    n.tables_.push_back(
        {sparse::table_config{t.rows, t.dim, t.init_scale}, sparse::pooling::sum, {}});
  n.num_params_ = model->layout.floats;
  n.external_ = std::move(model);
  return n;
}

std::vector<param_tensor> network::tensors() const {
  if (external_) {
    std::vector<param_tensor> out;
    for (const auto& t : external_->layout.tensors)
      out.push_back({t.name, t.shape, t.offset, false});
    return out;
  }
  std::vector<param_tensor> out;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const layer& l = layers_[i];
    const std::int64_t n = l.out[0];
    const auto name = [&](std::string_view what) { return coach::format("{}.{}", i, what); };
    switch (l.cfg.kind) {
      case layer_kind::dense:
        out.push_back({name("weight"), {n, std::int64_t(l.in_size())}, l.param_offset, true});
        out.push_back({name("bias"), {n}, l.param_offset + l.in_size() * std::size_t(n), false});
        break;
      case layer_kind::conv2d: {
        const std::int64_t k = l.cfg.kernel;
        out.push_back({name("weight"), {n, l.in[0], k, k}, l.param_offset, false});
        out.push_back(
            {name("bias"), {n}, l.param_offset + std::size_t(n * l.in[0] * k * k), false});
        break;
      }
      case layer_kind::batch_norm: {
        const std::size_t c = std::size_t(l.in[0]);
        const std::int64_t ci = l.in[0];
        out.push_back({name("weight"), {ci}, l.param_offset, false});
        out.push_back({name("bias"), {ci}, l.param_offset + c, false});
        out.push_back({name("running_mean"), {ci}, l.param_offset + 2 * c, false});
        out.push_back({name("running_var"), {ci}, l.param_offset + 3 * c, false});
        break;
      }
      default:
        break;
    }
  }
  return out;
}

bool network::has_training_mode() const noexcept {
  return std::any_of(layers_.begin(), layers_.end(), [](const layer& l) {
    return l.cfg.kind == layer_kind::dropout || l.cfg.kind == layer_kind::batch_norm;
  });
}

void network::init_params(std::span<float> params, std::uint64_t seed) const {
  COACH_ENFORCE(params.size() == num_params_, "init_params: wrong size");
  if (external_) {
    COACH_ENFORCE(external_->initial && external_->initial->size() == num_params_,
                  "init_params: the script's initial values are missing");
    std::copy(external_->initial->begin(), external_->initial->end(), params.begin());
    return;
  }
  // A pure function of (seed, parameterized layer): uniform in [-limit, limit] with
  // limit = sqrt(6 / fan_in), drawn from a 64-bit Mersenne Twister mapped to floats by hand
  // (std::uniform_real_distribution is implementation-defined, and runs must be reproducible
  // across platforms). Layers are counted among the dense and conv2d ones, so the mlp shorthand
  // keeps the values of earlier versions.
  std::size_t li = 0;
  for (const layer& l : layers_) {
    float* p = params.data() + l.param_offset;
    if (l.cfg.kind == layer_kind::dense || l.cfg.kind == layer_kind::conv2d) {
      const bool conv = l.cfg.kind == layer_kind::conv2d;
      const std::size_t fan_in =
          conv ? std::size_t(l.in[0]) * l.cfg.kernel * l.cfg.kernel : l.in_size();
      const std::size_t outs = std::size_t(l.out[0]);
      const std::size_t n = fan_in * outs;
      std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + li + 1);
      const double limit = std::sqrt(6.0 / double(fan_in));
      for (std::size_t i = 0; i < n; ++i) {
        double u = double(rng() >> 11) * 0x1.0p-53;  // [0, 1)
        p[i] = float((2.0 * u - 1.0) * limit);
      }
      std::fill_n(p + n, outs, 0.0f);
      ++li;
    } else if (l.cfg.kind == layer_kind::batch_norm) {
      const std::size_t c = std::size_t(l.in[0]);
      std::fill_n(p, c, 1.0f);
      std::fill_n(p + c, c, 0.0f);
      std::fill_n(p + 2 * c, c, 0.0f);
      std::fill_n(p + 3 * c, c, 1.0f);
    }
  }
}

}  // namespace coach::worker
