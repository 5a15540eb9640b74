#include "worker/network.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "common/enforce.hpp"
#include "common/format.hpp"
#include "kernels/layer_shapes_check.hpp"
#include "worker/binary_metrics.hpp"

namespace coach::worker {

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

/// The pooling or convolution geometry of a layer for one sample.
kernels::conv2d_shape conv_of(const layer& l, int batch) {
  kernels::conv2d_shape s;
  s.batch = batch;
  s.channels = l.in[0];
  s.height = l.in[1];
  s.width = l.in[2];
  s.filters = l.cfg.channels;
  s.kernel_h = s.kernel_w = l.cfg.kernel;
  s.stride_h = s.stride_w = l.cfg.stride;
  s.pad_h = s.pad_w = l.cfg.padding;
  return s;
}

kernels::pool2d_shape pool_of(const layer& l, int batch) {
  kernels::pool2d_shape s;
  s.batch = batch;
  s.channels = l.in[0];
  s.height = l.in[1];
  s.width = l.in[2];
  s.window_h = s.window_w = l.cfg.kernel;
  s.stride_h = s.stride_w = l.cfg.stride;
  s.pad_h = s.pad_w = l.cfg.padding;
  return s;
}

kernels::batch_norm_shape norm_of(const layer& l, int batch) {
  return kernels::batch_norm_shape{batch, l.in[0], l.in[1] * l.in[2]};
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

// --- runner ---------------------------------------------------------------------------------

network_runner::network_runner(const network& model, kernels::backend& be, int max_batch)
    : model_(model), be_(be) {
  COACH_ENFORCE(max_batch >= 1, "max_batch must be >= 1");
  allocate(max_batch);
}

void network_runner::allocate(int max_batch) {
  max_batch_ = max_batch;
  const std::size_t rows = std::size_t(max_batch);
  staging_x_.resize(rows * std::size_t(model_.inputs()));
  labels_.resize(rows);
  input_ = be_.alloc(rows * std::size_t(model_.inputs()));
  std::size_t widest = std::size_t(model_.inputs());
  int widest_c = 1;
  const auto& layers = model_.layers();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const layer& l = layers[i];
    widest = std::max({widest, l.in_size(), l.out_size()});
    argmax_.push_back(nullptr);
    saved_.push_back(nullptr);
    if (l.cfg.kind == layer_kind::flatten) {
      outs_.push_back(i == 0 ? input_ : outs_.back());
      continue;
    }
    outs_.push_back(be_.alloc(rows * l.out_size()));
    if (l.cfg.kind == layer_kind::max_pool2d)
      argmax_.back() = be_.alloc_indices(rows * l.out_size());
    if (l.cfg.kind == layer_kind::batch_norm) {
      saved_.back() = be_.alloc(2 * std::size_t(l.in[0]));
      widest_c = std::max(widest_c, l.in[0]);
    }
  }
  stats_ = be_.alloc(2 * std::size_t(widest_c));
  delta_a_ = be_.alloc(rows * widest);
  delta_b_ = be_.alloc(rows * widest);
}

void network_runner::release() noexcept {
  const auto& layers = model_.layers();
  be_.free(input_);
  for (std::size_t i = 0; i < layers.size() && i < outs_.size(); ++i) {
    if (layers[i].cfg.kind != layer_kind::flatten) be_.free(outs_[i]);
    be_.free_indices(argmax_[i]);
    be_.free(saved_[i]);
  }
  be_.free(stats_);
  be_.free(delta_a_);
  be_.free(delta_b_);
  input_ = stats_ = delta_a_ = delta_b_ = nullptr;
  outs_.clear();
  argmax_.clear();
  saved_.clear();
}

network_runner::~network_runner() {
  release();
}

void network_runner::reserve(int rows) {
  if (rows <= max_batch_) return;
  // A batch norm layer's saved statistics describe the last forward pass; nothing else is kept
  // between calls, so the buffers are made anew.
  release();
  allocate(rows);
}

void network_runner::gather(const dataset& data, std::span<const std::uint32_t> indices) {
  COACH_ENFORCE(model_.tables().empty(),
                "a model with embedding tables runs on its batch's rows (worker/sparse_batch.hpp)");
  reserve(int(indices.size()));  // a worker's share of a step can grow as workers leave
  COACH_ENFORCE(data.features == std::size_t(model_.inputs()), "data set width != model inputs");
  const std::size_t f = data.features;
  for (std::size_t r = 0; r < indices.size(); ++r) {
    const std::size_t row = indices[r];
    COACH_ENFORCE(row < data.rows, "sample index out of range");
    std::copy_n(data.x.data() + row * f, f, staging_x_.data() + r * f);
    labels_[r] = data.y[row];
  }
  be_.upload(input_, staging_x_.data(), indices.size() * f);
}

namespace {
/// Dropout's seed for layer i: distinct per layer.
std::uint64_t dropout_seed(std::size_t i) {
  return 0xD1B54A32D192ED03ull * (i + 1);
}
}  // namespace

float* network_runner::forward(const float* params, int rows, bool training, std::uint64_t noise,
                               float* grad) {
  const auto& layers = model_.layers();
  const float* in = input_;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto t0 =
        timing_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    const layer& l = layers[i];
    float* out = outs_[i];
    const float* w = params + l.param_offset;
    const std::size_t n_in = std::size_t(rows) * l.in_size();
    switch (l.cfg.kind) {
      case layer_kind::dense: {
        const int f = int(l.in_size()), u = l.cfg.units;
        be_.gemm(false, false, rows, u, f, 1.0f, in, f, w, u, 0.0f, out, u);
        be_.bias_add(out, w + std::size_t(f) * u, rows, u);
        break;
      }
      case layer_kind::conv2d: {
        const auto s = conv_of(l, rows);
        be_.conv2d_forward(s, in, w, w + s.weight_size(), out);
        break;
      }
      case layer_kind::max_pool2d:
        be_.max_pool2d_forward(pool_of(l, rows), in, out, argmax_[i]);
        break;
      case layer_kind::avg_pool2d:
        be_.avg_pool2d_forward(pool_of(l, rows), in, out);
        break;
      case layer_kind::flatten:
        break;  // outs_[i] is the input buffer itself
      case layer_kind::dropout:
        if (training && l.cfg.p > 0.0f)
          be_.dropout_forward(in, out, n_in, l.cfg.p, dropout_seed(i), noise);
        else
          be_.copy(out, in, n_in);
        break;
      case layer_kind::batch_norm: {
        const auto s = norm_of(l, rows);
        const std::size_t c = std::size_t(l.in[0]);
        kernels::batch_norm_options o{l.cfg.momentum, l.cfg.epsilon};
        if (training) {
          // The batch's own statistics: momentum 1 over zeroed scratch gives them exactly
          // (blend(0, s, 1) = s); they go to the shards in the statistic keys of the gradient.
          be_.scale(2 * c, 0.0f, stats_);
          kernels::batch_norm_options take{1.0f, l.cfg.epsilon};
          be_.batch_norm_forward_train(s, take, in, w, w + c, out, stats_, stats_ + c, saved_[i],
                                       saved_[i] + c);
          if (grad != nullptr) {
            float* g = grad + l.param_offset + 2 * c;
            be_.copy(g, stats_, 2 * c);
            be_.scale(2 * c, float(rows), g);
          }
        } else {
          be_.batch_norm_forward_inference(s, o, in, w, w + c, w + 2 * c, w + 3 * c, out);
        }
        break;
      }
      case layer_kind::relu:
        be_.relu(in, out, n_in);
        break;
      case layer_kind::tanh:
        be_.tanh(in, out, n_in);
        break;
      case layer_kind::sigmoid:
        be_.sigmoid(in, out, n_in);
        break;
      case layer_kind::gelu:
        be_.gelu(in, out, n_in);
        break;
    }
    in = outs_[i];
    if (timing_) be_.synchronize();  // a device backend's ops only enqueue: wait for the layer's
    if (timing_)
      timings_[i].forward_s +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return outs_.back();
}

const float* network_runner::backward(const float* params, int rows, float* dz, float* grad,
                                      std::uint64_t noise) {
  const auto& layers = model_.layers();
  // With embedding tables the gradient goes on past the first layer, to its input: the pooled
  // bags are part of it, and their rows are trained by it.
  const bool input_grad = !model_.tables().empty();
  float* spare = delta_a_;
  const auto flip = [&](float* used) { return used == delta_a_ ? delta_b_ : delta_a_; };
  for (std::size_t i = layers.size(); i-- > 0;) {
    const auto t0 =
        timing_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    const layer& l = layers[i];
    const float* x = i == 0 ? input_ : outs_[i - 1];
    const float* w = params + l.param_offset;
    float* g = grad + l.param_offset;
    const std::size_t n_in = std::size_t(rows) * l.in_size();
    const bool first = i == 0 && !input_grad;
    switch (l.cfg.kind) {
      case layer_kind::dense: {
        const int f = int(l.in_size()), u = l.cfg.units;
        // dW = x^T dz (f x u); db = column sums of dz; dx = dz W^T (rows x f).
        be_.gemm(true, false, f, u, rows, 1.0f, x, f, dz, u, 0.0f, g, u);
        be_.column_sum(dz, rows, u, 0.0f, g + std::size_t(f) * u);
        if (!first) {
          be_.gemm(false, true, rows, f, u, 1.0f, dz, u, w, u, 0.0f, spare, f);
          dz = spare;
        }
        break;
      }
      case layer_kind::conv2d: {
        const auto s = conv_of(l, rows);
        be_.conv2d_backward_filter(s, x, dz, g, g + s.weight_size());
        if (!first) {
          be_.conv2d_backward_data(s, dz, w, spare);
          dz = spare;
        }
        break;
      }
      case layer_kind::max_pool2d:
        if (!first) {
          be_.max_pool2d_backward(pool_of(l, rows), dz, argmax_[i], spare);
          dz = spare;
        }
        break;
      case layer_kind::avg_pool2d:
        if (!first) {
          be_.avg_pool2d_backward(pool_of(l, rows), dz, spare);
          dz = spare;
        }
        break;
      case layer_kind::flatten:
        break;
      case layer_kind::dropout:
        if (l.cfg.p > 0.0f) be_.dropout_backward(dz, dz, n_in, l.cfg.p, dropout_seed(i), noise);
        break;
      case layer_kind::batch_norm: {
        const std::size_t c = std::size_t(l.in[0]);
        // dx may alias dy; gamma's and beta's gradients land in the gradient vector.
        be_.batch_norm_backward(norm_of(l, rows), x, dz, w, saved_[i], saved_[i] + c, dz, g, g + c);
        break;
      }
      case layer_kind::relu:
        be_.relu_grad(outs_[i], dz, dz, n_in);
        break;
      case layer_kind::tanh:
        be_.tanh_grad(outs_[i], dz, dz, n_in);
        break;
      case layer_kind::sigmoid:
        be_.sigmoid_grad(outs_[i], dz, dz, n_in);
        break;
      case layer_kind::gelu:
        be_.gelu_grad(x, dz, dz, n_in);
        break;
    }
    if (dz == spare) spare = flip(spare);
    if (ready_ && l.param_count > 0) ready_(l.param_offset, l.param_count);
    if (timing_) be_.synchronize();
    if (timing_)
      timings_[i].backward_s +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return input_grad ? dz : nullptr;
}

void network_runner::on_gradient_ready(
    std::function<void(std::size_t offset, std::size_t count)> ready) {
  ready_ = std::move(ready);
}

double network_runner::forward_backward(const float* params, const dataset& data,
                                        std::span<const std::uint32_t> indices, float* grad,
                                        std::uint64_t noise) {
  COACH_ENFORCE(model_.tables().empty(),
                "forward_backward: a model with embedding tables needs its batch's rows (the "
                "overload that takes table_batch)");
  const int rows = int(indices.size());
  if (rows == 0) {
    // No samples: a zero gradient, so a caller may still contribute to a synchronous step.
    be_.scale(model_.num_params(), 0.0f, grad);
    if (ready_) ready_(0, model_.num_params());
    return 0.0;
  }
  gather(data, indices);
  float* logits = forward(params, rows, true, noise, grad);
  // dlogits overwrite the logits (softmax_xent allows aliasing); the last layer is dense, whose
  // output buffer is its own.
  const double loss = be_.softmax_xent(logits, labels_.data(), rows, model_.classes(), logits);
  backward(params, rows, logits, grad, noise);
  return loss;
}

template <class OnBatch>
void network_runner::for_each_batch(const float* params, const dataset& data, OnBatch on_batch) {
  std::vector<std::uint32_t> idx(static_cast<std::size_t>(max_batch_));
  for (std::size_t begin = 0; begin < data.rows; begin += std::size_t(max_batch_)) {
    const std::size_t n = std::min(std::size_t(max_batch_), data.rows - begin);
    for (std::size_t i = 0; i < n; ++i) idx[i] = std::uint32_t(begin + i);
    gather(data, std::span(idx.data(), n));
    on_batch(forward(params, int(n), false, 0, nullptr), int(n));
  }
}

const std::vector<std::int32_t>& network_runner::argmax_rows(const float* logits, int rows) {
  const std::size_t classes = std::size_t(model_.classes());
  host_logits_.resize(std::size_t(rows) * classes);
  be_.download(host_logits_.data(), logits, host_logits_.size());
  best_.resize(std::size_t(rows));
  for (std::size_t r = 0; r < best_.size(); ++r) {
    const float* row = host_logits_.data() + r * classes;
    best_[r] = std::int32_t(std::max_element(row, row + classes) - row);
  }
  return best_;
}

void network_runner::collect_binary(const float* logits, int rows, binary_scores& s) {
  if (model_.classes() != 2) return;
  host_logits_.resize(std::size_t(rows) * 2);
  be_.download(host_logits_.data(), logits, host_logits_.size());
  for (std::size_t r = 0; r < std::size_t(rows); ++r) {
    // softmax's class-1 probability: 1 / (1 + exp(l0 - l1)), in double.
    const double d = double(host_logits_[2 * r]) - double(host_logits_[2 * r + 1]);
    s.p.push_back(1.0 / (1.0 + std::exp(d)));
    s.labels.push_back(labels_[r] != 0 ? 1.0f : 0.0f);
  }
}

void network_runner::finish_binary(const binary_scores& s, evaluation& ev) {
  if (s.p.empty()) return;
  if (auto auc = binary_auc(s.p, s.labels)) ev.auc = *auc;  // undefined with one class only
  if (auto ll = binary_log_loss(s.p, s.labels)) ev.log_loss = *ll;
}

network_runner::evaluation network_runner::evaluate(const float* params, const dataset& data,
                                                    std::vector<std::int64_t>* confusion) {
  COACH_ENFORCE(model_.tables().empty(),
                "evaluate: a model with embedding tables needs a row source (the overload that "
                "takes one)");
  evaluation ev;
  binary_scores scores;
  const int classes = model_.classes();
  if (confusion != nullptr) confusion->assign(std::size_t(classes) * classes, 0);
  for_each_batch(params, data, [&](float* logits, int n) {
    collect_binary(logits, n, scores);
    ev.correct += be_.count_correct(logits, labels_.data(), n, classes);
    if (confusion != nullptr) {
      const auto& best = argmax_rows(logits, n);
      for (std::size_t r = 0; r < best.size(); ++r)
        (*confusion)[std::size_t(labels_[r]) * std::size_t(classes) + std::size_t(best[r])] += 1;
    }
    ev.loss_sum += be_.softmax_xent(logits, labels_.data(), n, classes, logits);
    ev.total += std::int64_t(n);
  });
  finish_binary(scores, ev);
  return ev;
}

void network_runner::enable_timing(bool on) {
  timing_ = on;
  timings_.assign(model_.layers().size(), layer_time{});
}

std::vector<std::int32_t> network_runner::predict(const float* params, const dataset& data) {
  std::vector<std::int32_t> out;
  out.reserve(data.rows);
  for_each_batch(params, data, [&](float* logits, int n) {
    const auto& best = argmax_rows(logits, n);
    out.insert(out.end(), best.begin(), best.end());
  });
  return out;
}

}  // namespace coach::worker
