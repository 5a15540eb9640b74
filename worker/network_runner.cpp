// worker::network_runner (worker/network.hpp): a network's forward and backward passes and its
// evaluation on a kernels::backend; the architecture itself is network.cpp's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "common/enforce.hpp"
#include "common/format.hpp"
#include "worker/binary_metrics.hpp"
#include "worker/network.hpp"
#include "worker/network_shapes.hpp"

namespace coach::worker {

using detail::conv_of;
using detail::norm_of;
using detail::pool_of;

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
