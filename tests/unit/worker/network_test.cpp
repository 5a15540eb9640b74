// worker::network: layers resolved against their input, the flat layout and PyTorch's names,
// gradients of whole networks against finite differences, batch norm's statistics in the
// gradient, evaluation mode, and the one-line errors of shapes that do not fit.
#include <gtest/gtest.h>

#include <algorithm>

#include <cstring>

#include <cmath>
#include <random>

#include "worker/network.hpp"

namespace coach::worker {
namespace {

std::unique_ptr<kernels::backend> cpu() {
  return std::move(*kernels::make_backend(kernels::backend_kind::cpu));
}

dataset random_images(std::size_t rows, sample_shape shape, int classes, unsigned seed) {
  dataset d;
  d.rows = rows;
  d.features = std::size_t(shape[0]) * shape[1] * shape[2];
  d.classes = classes;
  d.shape = shape;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  d.x.resize(rows * d.features);
  for (auto& v : d.x) v = u(rng);
  for (std::size_t i = 0; i < rows; ++i) d.y.push_back(std::int32_t(i % std::size_t(classes)));
  return d;
}

layer_config conv(int channels, int kernel, int padding = 0, int stride = 1) {
  return {.kind = layer_kind::conv2d,
          .channels = channels,
          .kernel = kernel,
          .stride = stride,
          .padding = padding};
}
layer_config of(layer_kind k) {
  return {.kind = k};
}
layer_config dense(int units = 0) {
  return {.kind = layer_kind::dense, .units = units};
}

model_config layers(std::vector<layer_config> list) {
  model_config m;
  m.type = "layers";
  m.layers = std::move(list);
  return m;
}

/// Checks every `stride`-th gradient entry outside the statistic ranges against central
/// differences of the summed loss, where two step sizes agree (kinks of relu and max pooling
/// are skipped). Returns how many entries were compared.
std::size_t check_gradient(const network& net, const dataset& data, std::size_t stride,
                           std::uint64_t noise = 7) {
  auto be = cpu();
  network_runner run(net, *be, int(data.rows));
  std::vector<float> params(net.num_params()), grad(net.num_params()), scratch(net.num_params());
  net.init_params(params, 3);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] += 0.01f * float(i % 5);
  std::vector<std::uint32_t> idx(data.rows);
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = std::uint32_t(i);
  run.forward_backward(params.data(), data, idx, grad.data(), noise);
  const auto loss_at = [&](std::size_t i, float h) {
    auto p = params;
    p[i] += h;
    return run.forward_backward(p.data(), data, idx, scratch.data(), noise);
  };
  const auto is_statistic = [&](std::size_t i) {
    for (const auto& s : net.statistic_ranges())
      if (i >= s.keys.begin && i < s.keys.end) return true;
    return false;
  };
  std::size_t checked = 0;
  for (std::size_t i = 0; i < params.size(); i += stride) {
    if (is_statistic(i)) continue;
    const auto fd_at = [&](float h) { return (loss_at(i, h) - loss_at(i, -h)) / (2.0 * h); };
    const double fd = fd_at(1e-2f), fd_half = fd_at(5e-3f);
    if (std::abs(fd - fd_half) > 2e-3 + 2e-3 * std::abs(fd)) continue;
    EXPECT_NEAR(grad[i], fd, 5e-3 + 1e-2 * std::abs(fd)) << "param " << i;
    ++checked;
  }
  return checked;
}

TEST(network, a_cnn_resolves_its_shapes_and_names_its_tensors_as_pytorch) {
  auto net = network::build(layers({conv(4, 3, 1),
                                    of(layer_kind::batch_norm),
                                    of(layer_kind::relu),
                                    {.kind = layer_kind::max_pool2d},
                                    of(layer_kind::flatten),
                                    dense(16),
                                    of(layer_kind::gelu),
                                    dense()}),
                            {1, 8, 8}, 10);
  ASSERT_TRUE(net) << net.error().message;
  const auto& l = net->layers();
  EXPECT_EQ(l[0].out, (sample_shape{4, 8, 8}));
  EXPECT_EQ(l[3].out, (sample_shape{4, 4, 4}));
  EXPECT_EQ(l[3].cfg.stride, 2);  // a pool's stride defaults to its kernel
  EXPECT_EQ(l[4].out, (sample_shape{64, 1, 1}));
  EXPECT_EQ(l[7].out, (sample_shape{10, 1, 1}));
  const std::size_t conv_params = 4 * 1 * 3 * 3 + 4, bn = 4 * 4, d1 = 64 * 16 + 16,
                    d2 = 16 * 10 + 10;
  EXPECT_EQ(net->num_params(), conv_params + bn + d1 + d2);
  const auto t = net->tensors();
  std::vector<std::string> names;
  for (const auto& x : t) names.push_back(x.name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias",
                                             "1.running_mean", "1.running_var", "5.weight",
                                             "5.bias", "7.weight", "7.bias"}));
  EXPECT_EQ(t[0].shape, (std::vector<std::int64_t>{4, 1, 3, 3}));
  EXPECT_EQ(t[4].offset, conv_params + 8);
  EXPECT_EQ(t[6].shape, (std::vector<std::int64_t>{16, 64}));
  EXPECT_TRUE(t[6].transposed);
  ASSERT_EQ(net->statistic_ranges().size(), 1u);
  EXPECT_EQ(net->statistic_ranges()[0].keys.begin, conv_params + 8);
  EXPECT_EQ(net->statistic_ranges()[0].keys.end, conv_params + 16);
}

TEST(network, shapes_that_do_not_fit_are_one_line_errors_naming_the_layer) {
  const auto error_of = [](model_config m, sample_shape in, int classes) {
    auto net = network::build(m, in, classes);
    return net ? std::string("built") : net.error().message;
  };
  EXPECT_EQ(error_of(layers({conv(4, 3), of(layer_kind::relu), conv(4, 9), dense()}), {1, 9, 9}, 3),
            "layers[2] conv2d: input 7x7 is smaller than kernel 9");
  EXPECT_EQ(error_of(layers({conv(4, 9, 1), dense()}), {1, 6, 6}, 3),
            "layers[0] conv2d: input 6x6 (8x8 padded) is smaller than kernel 9");
  EXPECT_EQ(error_of(layers({dense(8), of(layer_kind::relu)}), {1, 1, 4}, 3),
            "layers[1] relu: the last layer must be dense (its outputs are the class scores; "
            "softmax cross-entropy follows it)");
  EXPECT_EQ(error_of(layers({dense(8), dense(5)}), {1, 1, 4}, 3),
            "layers[1] dense: the last layer gives the class scores, so its units must be the "
            "data set's 3 classes, got 5");
  EXPECT_EQ(error_of(layers({dense(), dense()}), {1, 1, 4}, 3),
            "layers[0] dense: units is required (only the last dense layer may leave it out: it "
            "gets the classes)");
  auto shaped = layers({conv(2, 3), dense()});
  shaped.input_shape = {1, 5, 5};
  EXPECT_EQ(error_of(shaped, {1, 1, 24}, 3),
            "model.input_shape 1x5x5 holds 25 values but the data set's samples have 24");
  shaped.input_shape = {2, 3, 4};
  EXPECT_EQ(error_of(shaped, {1, 1, 24}, 3), "built");
}

TEST(network, the_mlp_shorthand_keeps_the_layout_and_the_initial_values) {
  model_config m;
  m.hidden = {5};
  auto a = network::build(m, {1, 1, 3}, 2).value();
  auto b = network::build(layers({dense(5), of(layer_kind::relu), dense()}), {1, 1, 3}, 2).value();
  std::vector<float> pa(a.num_params()), pb(b.num_params());
  a.init_params(pa, 9);
  b.init_params(pb, 9);
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(a.num_params(), 3u * 5 + 5 + 5 * 2 + 2);
}

TEST(network, cnn_gradients_match_finite_differences) {
  const auto data = random_images(3, {2, 6, 6}, 3, 1);
  auto net = network::build(layers({conv(3, 3, 1),
                                    of(layer_kind::tanh),
                                    {.kind = layer_kind::max_pool2d},
                                    conv(2, 2, 0, 1),
                                    of(layer_kind::sigmoid),
                                    of(layer_kind::flatten),
                                    dense(5),
                                    of(layer_kind::gelu),
                                    dense()}),
                            {2, 6, 6}, 3)
                 .value();
  EXPECT_GT(check_gradient(net, data, 3), 40u);
}

// Issue 37, item 6: a worker's runner was sized for the whole global batch up front. It now
// starts at its share and grows when a larger batch comes, to the same results.
TEST(network_runner, grows_for_a_larger_batch_and_computes_what_a_large_one_would) {
  const auto data = random_images(24, {2, 6, 6}, 3, 7);
  auto net = network::build(layers({conv(3, 3, 1),
                                    of(layer_kind::relu),
                                    {.kind = layer_kind::max_pool2d},
                                    of(layer_kind::flatten),
                                    dense()}),
                            {2, 6, 6}, 3)
                 .value();
  std::vector<float> params(net.num_params());
  net.init_params(params, 3);
  std::vector<std::uint32_t> small(4), large(20);
  for (std::uint32_t i = 0; i < 20; ++i) (i < 4 ? small[i] : large[i]) = i;
  for (std::uint32_t i = 0; i < 4; ++i) large[i] = i;
  auto be = cpu(), be_big = cpu();
  network_runner grown(net, *be, 4), sized(net, *be_big, 32);
  EXPECT_EQ(grown.capacity(), 4);
  std::vector<float> g1(params.size()), g2(params.size());
  grown.forward_backward(params.data(), data, small, g1.data());
  const double loss = grown.forward_backward(params.data(), data, large, g1.data());
  EXPECT_EQ(grown.capacity(), 20);
  EXPECT_EQ(loss, sized.forward_backward(params.data(), data, large, g2.data()));
  EXPECT_EQ(g1, g2);
  // And back to a small batch without shrinking.
  grown.forward_backward(params.data(), data, small, g1.data());
  EXPECT_EQ(grown.capacity(), 20);
}

TEST(network, pooling_dropout_and_batch_norm_gradients_match_finite_differences) {
  const auto data = random_images(4, {2, 4, 4}, 3, 2);
  auto net = network::build(layers({conv(3, 3, 1),
                                    of(layer_kind::batch_norm),
                                    {.kind = layer_kind::avg_pool2d},
                                    of(layer_kind::relu),
                                    of(layer_kind::flatten),
                                    {.kind = layer_kind::dropout, .p = 0.3f},
                                    dense(6),
                                    of(layer_kind::batch_norm),
                                    dense()}),
                            {2, 4, 4}, 3)
                 .value();
  EXPECT_GT(check_gradient(net, data, 2), 40u);
}

TEST(network, each_gradient_range_is_announced_once_with_its_final_values) {
  // A device worker copies each range to the host when it is announced, while the layers
  // before it compute: the ranges must cover the vector once and hold their final values.
  const auto data = random_images(5, {2, 4, 4}, 3, 7);
  auto net = network::build(layers({conv(3, 3, 1),
                                    of(layer_kind::batch_norm),
                                    {.kind = layer_kind::max_pool2d},
                                    of(layer_kind::relu),
                                    of(layer_kind::flatten),
                                    dense(6),
                                    of(layer_kind::batch_norm),
                                    dense()}),
                            {2, 4, 4}, 3)
                 .value();
  const std::size_t n = net.num_params();
  std::vector<float> params(n);
  net.init_params(params, 3);
  auto be = cpu();
  network_runner run(net, *be, 5);
  std::vector<float> grad(n, 0.0f), copied(n, std::nanf(""));
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  run.on_gradient_ready([&](std::size_t offset, std::size_t count) {
    ranges.emplace_back(offset, count);
    std::copy_n(grad.begin() + std::ptrdiff_t(offset), count,
                copied.begin() + std::ptrdiff_t(offset));
  });
  std::vector<std::uint32_t> idx{0, 1, 2, 3, 4};
  run.forward_backward(params.data(), data, idx, grad.data(), 9);
  ASSERT_EQ(ranges.size(), 5u);  // conv, batch norm, dense, batch norm, dense
  for (std::size_t i = 1; i < ranges.size(); ++i)
    EXPECT_LT(ranges[i].first, ranges[i - 1].first) << "last layer first";
  auto sorted = ranges;
  std::sort(sorted.begin(), sorted.end());
  std::size_t next = 0;
  for (const auto& [offset, count] : sorted) {
    EXPECT_EQ(offset, next);
    next = offset + count;
  }
  EXPECT_EQ(next, n);
  EXPECT_EQ(0, std::memcmp(copied.data(), grad.data(), n * sizeof(float)));

  // A step without rows: the whole (zero) vector at once.
  ranges.clear();
  run.forward_backward(params.data(), data, {}, grad.data(), 10);
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0], (std::pair<std::size_t, std::size_t>{0, n}));
}

TEST(network, batch_norm_pushes_its_batch_statistics_times_the_rows) {
  // One batch norm over 2 features after a pass-through dense layer set to the identity.
  const auto net =
      network::build(layers({dense(2), of(layer_kind::batch_norm), dense()}), {1, 1, 2}, 2).value();
  dataset d;
  d.rows = 3;
  d.features = 2;
  d.classes = 2;
  d.x = {1, 10, 2, 20, 6, 60};
  d.y = {0, 1, 0};
  std::vector<float> params(net.num_params(), 0.0f);
  net.init_params(params, 1);
  // dense 0: W = identity, b = 0.
  std::fill_n(params.begin(), 6, 0.0f);
  params[0] = params[3] = 1.0f;
  auto be = cpu();
  network_runner run(net, *be, 3);
  std::vector<float> grad(net.num_params());
  std::vector<std::uint32_t> idx{0, 1, 2};
  run.forward_backward(params.data(), d, idx, grad.data());
  const auto& s = net.statistic_ranges().at(0).keys;
  ASSERT_EQ(s.size(), 4u);
  // Means 3 and 30, unbiased variances 7 and 700, each times 3 rows.
  EXPECT_FLOAT_EQ(grad[s.begin + 0], 9.0f);
  EXPECT_FLOAT_EQ(grad[s.begin + 1], 90.0f);
  EXPECT_FLOAT_EQ(grad[s.begin + 2], 21.0f);
  EXPECT_FLOAT_EQ(grad[s.begin + 3], 2100.0f);
}

TEST(network, evaluation_uses_the_running_statistics_and_no_dropout) {
  const auto data = random_images(20, {1, 6, 6}, 4, 5);
  auto net = network::build(layers({conv(2, 3),
                                    of(layer_kind::batch_norm),
                                    {.kind = layer_kind::dropout, .p = 0.5f},
                                    dense()}),
                            {1, 6, 6}, 4)
                 .value();
  EXPECT_TRUE(net.has_training_mode());
  std::vector<float> params(net.num_params());
  net.init_params(params, 2);
  auto be = cpu();
  network_runner run(net, *be, 8);
  std::vector<std::int64_t> confusion;
  const auto a = run.evaluate(params.data(), data, &confusion);
  const auto b = run.evaluate(params.data(), data);
  EXPECT_EQ(a.correct, b.correct);
  EXPECT_EQ(a.loss_sum, b.loss_sum);  // deterministic: no mask, fixed statistics
  std::int64_t diagonal = 0, total = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      total += confusion[std::size_t(i * 4 + j)];
      if (i == j) diagonal += confusion[std::size_t(i * 4 + j)];
    }
  EXPECT_EQ(total, 20);
  EXPECT_EQ(diagonal, a.correct);
  const auto predicted = run.predict(params.data(), data);
  ASSERT_EQ(predicted.size(), 20u);
  std::int64_t agree = 0;
  for (std::size_t i = 0; i < 20; ++i) agree += predicted[i] == data.y[i];
  EXPECT_EQ(agree, a.correct);
}

TEST(network, dropout_masks_differ_by_noise_and_repeat_for_the_same_noise) {
  const auto data = random_images(4, {1, 1, 8}, 2, 3);
  auto net = network::build(layers({dense(16), {.kind = layer_kind::dropout, .p = 0.5f}, dense()}),
                            {1, 1, 8}, 2)
                 .value();
  std::vector<float> params(net.num_params());
  net.init_params(params, 4);
  auto be = cpu();
  network_runner run(net, *be, 4);
  std::vector<float> g1(net.num_params()), g2(net.num_params()), g3(net.num_params());
  std::vector<std::uint32_t> idx{0, 1, 2, 3};
  run.forward_backward(params.data(), data, idx, g1.data(), noise_key(0, 5));
  run.forward_backward(params.data(), data, idx, g2.data(), noise_key(0, 5));
  run.forward_backward(params.data(), data, idx, g3.data(), noise_key(1, 5));
  EXPECT_EQ(g1, g2);
  EXPECT_NE(g1, g3);
}

}  // namespace
}  // namespace coach::worker
