#include "worker/mlp.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "common/enforce.hpp"

namespace coach::worker {

mlp::mlp(const model_config& cfg, int inputs, int classes) {
  COACH_ENFORCE(inputs >= 1 && classes >= 2, "mlp needs inputs >= 1 and classes >= 2");
  int in = inputs;
  std::size_t offset = 0;
  auto add = [&](int out) {
    COACH_ENFORCE(out >= 1, "layer width must be >= 1");
    layer_shape l{in, out, offset, offset + std::size_t(in) * std::size_t(out)};
    offset = l.b_offset + std::size_t(out);
    layers_.push_back(l);
    in = out;
  };
  for (int h : cfg.hidden) add(h);
  add(classes);
  num_params_ = offset;
}

int mlp::widest() const noexcept {
  int w = 0;
  for (const auto& l : layers_) w = std::max({w, l.out, l.in});
  return w;
}

void mlp::init_params(std::span<float> params, std::uint64_t seed) const {
  COACH_ENFORCE(params.size() == num_params_, "init_params: wrong size");
  // A pure function of (seed, layer): uniform in [-limit, limit] with limit = sqrt(6 / fan_in),
  // drawn from a 64-bit Mersenne Twister mapped to floats by hand (std::uniform_real_distribution
  // is implementation-defined, and runs must be reproducible across platforms).
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    const auto& l = layers_[li];
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + li + 1);
    const double limit = std::sqrt(6.0 / double(l.in));
    const std::size_t n = std::size_t(l.in) * std::size_t(l.out);
    for (std::size_t i = 0; i < n; ++i) {
      double u = double(rng() >> 11) * 0x1.0p-53;  // [0, 1)
      params[l.w_offset + i] = float((2.0 * u - 1.0) * limit);
    }
    std::fill_n(params.begin() + std::ptrdiff_t(l.b_offset), l.out, 0.0f);
  }
}

mlp_runner::mlp_runner(const mlp& model, kernels::backend& be, int max_batch)
    : model_(model), be_(be), max_batch_(max_batch) {
  COACH_ENFORCE(max_batch >= 1, "max_batch must be >= 1");
  const std::size_t rows = std::size_t(max_batch);
  staging_x_.resize(rows * std::size_t(model.inputs()));
  labels_.resize(rows);
  input_ = be_.alloc(rows * std::size_t(model.inputs()));
  for (const auto& l : model_.layers()) acts_.push_back(be_.alloc(rows * std::size_t(l.out)));
  delta_a_ = be_.alloc(rows * std::size_t(model_.widest()));
  delta_b_ = be_.alloc(rows * std::size_t(model_.widest()));
}

mlp_runner::~mlp_runner() {
  be_.free(input_);
  for (float* a : acts_) be_.free(a);
  be_.free(delta_a_);
  be_.free(delta_b_);
}

void mlp_runner::gather(const dataset& data, std::span<const std::uint32_t> indices) {
  COACH_ENFORCE(indices.size() <= std::size_t(max_batch_), "batch larger than max_batch");
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

void mlp_runner::forward(const float* params, int rows) {
  const auto& layers = model_.layers();
  const float* in = input_;
  for (std::size_t li = 0; li < layers.size(); ++li) {
    const auto& l = layers[li];
    float* out = acts_[li];
    be_.gemm(false, false, rows, l.out, l.in, 1.0f, in, l.in, params + l.w_offset, l.out, 0.0f, out,
             l.out);
    be_.bias_add(out, params + l.b_offset, rows, l.out);
    if (li + 1 < layers.size()) be_.relu(out, out, std::size_t(rows) * std::size_t(l.out));
    in = out;
  }
}

double mlp_runner::forward_backward(const float* params, const dataset& data,
                                    std::span<const std::uint32_t> indices, float* grad) {
  const int rows = int(indices.size());
  const auto& layers = model_.layers();
  if (rows == 0) {
    // No samples: a zero gradient, so a caller may still contribute to a synchronous step.
    const std::size_t n = model_.num_params();
    be_.scale(n, 0.0f, grad);
    return 0.0;
  }
  gather(data, indices);
  forward(params, rows);
  const auto& last = layers.back();
  // dlogits overwrite the logits (softmax_xent allows aliasing).
  float* dz = acts_.back();
  const double loss = be_.softmax_xent(dz, labels_.data(), rows, last.out, dz);
  float* spare = delta_a_;
  for (std::size_t li = layers.size(); li-- > 0;) {
    const auto& l = layers[li];
    const float* a_prev = li == 0 ? input_ : acts_[li - 1];
    // dW = a_prev^T dz (in x out); db = column sums of dz.
    be_.gemm(true, false, l.in, l.out, rows, 1.0f, a_prev, l.in, dz, l.out, 0.0f, grad + l.w_offset,
             l.out);
    be_.column_sum(dz, rows, l.out, 0.0f, grad + l.b_offset);
    if (li == 0) break;
    // da_prev = dz W^T (rows x in); dz_prev = da_prev * relu'(a_prev).
    be_.gemm(false, true, rows, l.in, l.out, 1.0f, dz, l.out, params + l.w_offset, l.out, 0.0f,
             spare, l.in);
    be_.relu_grad(a_prev, spare, spare, std::size_t(rows) * std::size_t(l.in));
    dz = spare;
    spare = spare == delta_a_ ? delta_b_ : delta_a_;
  }
  return loss;
}

mlp_runner::evaluation mlp_runner::evaluate(const float* params, const dataset& data) {
  evaluation ev;
  std::vector<std::uint32_t> idx(static_cast<std::size_t>(max_batch_));
  const auto& last = model_.layers().back();
  for (std::size_t begin = 0; begin < data.rows; begin += std::size_t(max_batch_)) {
    const std::size_t n = std::min(std::size_t(max_batch_), data.rows - begin);
    for (std::size_t i = 0; i < n; ++i) idx[i] = std::uint32_t(begin + i);
    gather(data, std::span(idx.data(), n));
    forward(params, int(n));
    ev.correct += be_.count_correct(acts_.back(), labels_.data(), int(n), last.out);
    ev.loss_sum += be_.softmax_xent(acts_.back(), labels_.data(), int(n), last.out, acts_.back());
    ev.total += std::int64_t(n);
  }
  return ev;
}

}  // namespace coach::worker
