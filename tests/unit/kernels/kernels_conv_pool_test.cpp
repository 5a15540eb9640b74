// kernels::backend's convolution and pooling on every backend of the build
// (tests/helpers/backend_fixture.hpp): against hand-computed values, a direct convolution in
// double and central differences; and the layer shapes' validation.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/layer_geometry.hpp"

#include "tests/helpers/backend_fixture.hpp"

namespace coach::kernels {
namespace {

using namespace backend_testing;

// --- convolution ----------------------------------------------------------------------------

/// Direct convolution in double (the definition, no im2col).
std::vector<double> reference_conv(const conv2d_shape& s, const std::vector<float>& x,
                                   const std::vector<float>& w, const std::vector<float>& b) {
  const int oh_n = s.out_h(), ow_n = s.out_w();
  std::vector<double> y(s.output_size());
  for (int n = 0; n < s.batch; ++n)
    for (int k = 0; k < s.filters; ++k)
      for (int oh = 0; oh < oh_n; ++oh)
        for (int ow = 0; ow < ow_n; ++ow) {
          double acc = b.empty() ? 0.0 : double(b[std::size_t(k)]);
          for (int c = 0; c < s.channels; ++c)
            for (int r = 0; r < s.kernel_h; ++r)
              for (int q = 0; q < s.kernel_w; ++q) {
                const int ih = oh * s.stride_h - s.pad_h + r;
                const int iw = ow * s.stride_w - s.pad_w + q;
                if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
                acc +=
                    double(x[((std::size_t(n) * s.channels + c) * s.height + ih) * s.width + iw]) *
                    double(
                        w[((std::size_t(k) * s.channels + c) * s.kernel_h + r) * s.kernel_w + q]);
              }
          y[((std::size_t(n) * s.filters + k) * oh_n + oh) * ow_n + ow] = acc;
        }
  return y;
}

conv2d_shape make_conv(int n, int c, int h, int w, int k, int r, int s, int stride_h, int stride_w,
                       int pad_h, int pad_w) {
  conv2d_shape out;
  out.batch = n;
  out.channels = c;
  out.height = h;
  out.width = w;
  out.filters = k;
  out.kernel_h = r;
  out.kernel_w = s;
  out.stride_h = stride_h;
  out.stride_w = stride_w;
  out.pad_h = pad_h;
  out.pad_w = pad_w;
  return out;
}

pool2d_shape make_pool(int n, int c, int h, int w, int wh, int ww, int sh, int sw, int ph, int pw) {
  pool2d_shape out;
  out.batch = n;
  out.channels = c;
  out.height = h;
  out.width = w;
  out.window_h = wh;
  out.window_w = ww;
  out.stride_h = sh;
  out.stride_w = sw;
  out.pad_h = ph;
  out.pad_w = pw;
  return out;
}

TEST_P(backend_test, conv2d_forward_matches_hand_computed_values) {
  // x = 1..9 as a 3 x 3 image; a 2 x 2 kernel of ones sums each 2 x 2 block, plus the bias.
  const std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto s = make_conv(1, 1, 3, 3, 1, 2, 2, 1, 1, 0, 0);
  float* y = dev(std::vector<float>(4, nan_f));
  be_->conv2d_forward(s, dev(x), dev({1, 1, 1, 1}), dev({0.5f}), y);
  EXPECT_EQ(host(y, 4), (std::vector<float>{12.5f, 16.5f, 24.5f, 28.5f}));
  // 3 x 3 kernel, stride 2, padding 1: each output sees a corner block of the image; a second
  // filter (all twos, no bias) doubles it.
  s = make_conv(1, 1, 3, 3, 2, 3, 3, 2, 2, 1, 1);
  std::vector<float> w(18, 1.0f);
  std::fill(w.begin() + 9, w.end(), 2.0f);
  float* y2 = dev(std::vector<float>(8, nan_f));
  be_->conv2d_forward(s, dev(x), dev(w), nullptr, y2);
  EXPECT_EQ(host(y2, 8), (std::vector<float>{12, 16, 24, 28, 24, 32, 48, 56}));
  // Two channels, a 1 x 1 kernel (the pointwise path): y = 2 x_0 - x_1 per position.
  s = make_conv(1, 2, 1, 3, 1, 1, 1, 1, 1, 0, 0);
  float* y3 = dev(std::vector<float>(3, nan_f));
  be_->conv2d_forward(s, dev({1, 2, 3, 10, 20, 30}), dev({2, -1}), nullptr, y3);
  EXPECT_EQ(host(y3, 3), (std::vector<float>{-8, -16, -24}));
}

TEST_P(backend_test, conv2d_backward_matches_hand_computed_values) {
  // 1 x 1 x 3 x 3 input, 2 x 2 kernel, stride 1: dy of ones spreads the kernel over the image.
  const auto s = make_conv(1, 1, 3, 3, 1, 2, 2, 1, 1, 0, 0);
  float* dx = dev(std::vector<float>(9, nan_f));
  be_->conv2d_backward_data(s, dev({1, 1, 1, 1}), dev({1, 2, 3, 4}), dx);
  // Input (h, w) gets w[r, q] for each output (h - r, w - q) in range.
  EXPECT_EQ(host(dx, 9), (std::vector<float>{1, 3, 2, 4, 10, 6, 3, 7, 4}));
  float* dw = dev(std::vector<float>(4, nan_f));
  float* db = dev(std::vector<float>(1, nan_f));
  be_->conv2d_backward_filter(s, dev({1, 2, 3, 4, 5, 6, 7, 8, 9}), dev({1, 0, 0, 2}), dw, db);
  // dw[r, q] = x[r, q] * 1 + x[r + 1, q + 1] * 2.
  EXPECT_EQ(host(dw, 4), (std::vector<float>{11, 14, 20, 23}));
  EXPECT_EQ(host(db, 1), (std::vector<float>{3}));
}

TEST_P(backend_test, conv2d_matches_direct_convolution_and_central_differences) {
  struct conv_case {
    conv2d_shape s;
    const char* name;
  };
  const conv_case cases[] = {
      {make_conv(2, 3, 5, 4, 2, 3, 2, 1, 1, 0, 0), "3x2 kernel, stride 1"},
      {make_conv(2, 2, 5, 6, 3, 3, 3, 2, 2, 1, 1), "stride 2, padding 1"},
      {make_conv(3, 2, 4, 7, 2, 2, 3, 1, 2, 1, 0), "non-square stride and padding"},
      {make_conv(2, 3, 3, 4, 2, 1, 1, 1, 1, 0, 0), "pointwise"},
      {make_conv(1, 1, 6, 6, 1, 3, 3, 3, 3, 0, 0), "stride equal to kernel"},
  };
  std::uint32_t seed = 300;
  for (const auto& cc : cases) {
    SCOPED_TRACE(cc.name);
    const auto& s = cc.s;
    ASSERT_TRUE(validate(s).has_value()) << validate(s).error().to_string();
    const auto x = random_floats(s.input_size(), ++seed);
    const auto w = random_floats(s.weight_size(), ++seed);
    const auto b = random_floats(std::size_t(s.filters), ++seed);
    const auto g = random_floats(s.output_size(), ++seed);  // dL/dy
    float* y = dev(std::vector<float>(s.output_size(), nan_f));
    be_->conv2d_forward(s, dev(x), dev(w), dev(b), y);
    const auto got = host(y, s.output_size());
    const auto want = reference_conv(s, x, w, b);
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * (1.0 + double(s.column_rows()))) << "y at " << i;

    float* dx = dev(std::vector<float>(s.input_size(), nan_f));
    float* dw = dev(std::vector<float>(s.weight_size(), nan_f));
    float* db = dev(std::vector<float>(std::size_t(s.filters), nan_f));
    float* dg = dev(g);
    be_->conv2d_backward_data(s, dg, dev(w), dx);
    be_->conv2d_backward_filter(s, dev(x), dg, dw, db);
    // L = <conv(x, w) + b, g> is linear in each argument: central differences have no
    // truncation error, so a wide step (h = 0.25) keeps the float rounding of the affected
    // outputs (~1e-6) small against 2h.
    float* px = dev(x);
    float* pw = dev(w);
    float* pb = dev(b);
    float* py = dev(std::vector<float>(s.output_size()));
    auto loss = [&](float* param, std::size_t n) {
      return [&, param, n](const std::vector<float>& v) {
        be_->upload(param, v.data(), n);
        be_->conv2d_forward(s, px, pw, pb, py);
        const double l = dot(host(py, s.output_size()), g);
        return l;
      };
    };
    auto restore = [&] {
      be_->upload(px, x.data(), x.size());
      be_->upload(pw, w.data(), w.size());
      be_->upload(pb, b.data(), b.size());
    };
    expect_matches_differences(loss(px, x.size()), x, host(dx, x.size()), 0.25f, 1e-4, 1e-4, "dx");
    restore();
    expect_matches_differences(loss(pw, w.size()), w, host(dw, w.size()), 0.25f, 1e-4, 1e-4, "dw");
    restore();
    expect_matches_differences(loss(pb, b.size()), b, host(db, b.size()), 0.25f, 1e-4, 1e-4, "db");
    if (HasFatalFailure()) return;
  }
}

TEST_P(backend_test, conv2d_backward_filter_skips_the_bias_gradient_when_db_is_null) {
  const auto s = make_conv(2, 2, 4, 4, 3, 3, 3, 1, 1, 1, 1);
  const auto x = random_floats(s.input_size(), 320);
  const auto dy = random_floats(s.output_size(), 321);
  float* dw1 = dev(std::vector<float>(s.weight_size(), nan_f));
  float* dw2 = dev(std::vector<float>(s.weight_size(), nan_f));
  float* db = dev(std::vector<float>(std::size_t(s.filters)));
  be_->conv2d_backward_filter(s, dev(x), dev(dy), dw1, nullptr);
  be_->conv2d_backward_filter(s, dev(x), dev(dy), dw2, db);
  EXPECT_EQ(host(dw1, s.weight_size()), host(dw2, s.weight_size()));  // and deterministic
}

TEST(layer_shapes, validate_rejects_impossible_shapes_naming_the_field) {
  auto s = make_conv(1, 1, 3, 3, 1, 3, 3, 1, 1, 0, 0);
  EXPECT_TRUE(validate(s).has_value());
  EXPECT_EQ(s.out_h(), 1);
  s.filters = 0;
  ASSERT_FALSE(validate(s).has_value());
  EXPECT_EQ(validate(s).error().code, errc::invalid_argument);
  EXPECT_NE(validate(s).error().message.find("'filters'"), std::string::npos);
  s = make_conv(1, 1, 2, 2, 1, 3, 3, 1, 1, 0, 0);  // kernel larger than the input
  EXPECT_FALSE(validate(s).has_value());
  s.pad_h = s.pad_w = 1;  // now it fits
  EXPECT_TRUE(validate(s).has_value());
  s.pad_h = 3;  // a window entirely in the padding
  EXPECT_FALSE(validate(s).has_value());
  s = make_conv(1 << 20, 1 << 10, 64, 64, 1, 1, 1, 1, 1, 0, 0);  // 2^42 elements
  ASSERT_FALSE(validate(s).has_value());
  EXPECT_NE(validate(s).error().message.find("int index range"), std::string::npos);
  auto p = make_pool(1, 1, 4, 4, 2, 2, 2, 2, 0, 0);
  EXPECT_TRUE(validate(p).has_value());
  EXPECT_EQ(p.out_h(), 2);
  p.pad_w = 2;
  EXPECT_FALSE(validate(p).has_value());
  batch_norm_shape bn;
  EXPECT_TRUE(validate(bn).has_value());
  bn.spatial = -1;
  EXPECT_FALSE(validate(bn).has_value());
}

// --- pooling --------------------------------------------------------------------------------

TEST_P(backend_test, max_and_avg_pool_match_hand_computed_values) {
  const std::vector<float> x{1,  2,  5, 3,   //
                             4,  0,  6, -1,  //
                             -2, -3, 7, 7,   //
                             -5, -4, 8, 9};
  const auto s = make_pool(1, 1, 4, 4, 2, 2, 2, 2, 0, 0);
  float* y = dev(std::vector<float>(4, nan_f));
  std::int32_t* arg = dev_indices(4);
  float* dx = dev(x);
  be_->max_pool2d_forward(s, dev(x), y, arg);
  EXPECT_EQ(host(y, 4), (std::vector<float>{4, 6, -2, 9}));
  EXPECT_EQ(host_indices(arg, 4), (std::vector<std::int32_t>{4, 6, 8, 15}));
  be_->max_pool2d_backward(s, dev({10, 20, 30, 40}), arg, dx);
  EXPECT_EQ(host(dx, 16), (std::vector<float>{0, 0, 0, 0, 10, 0, 20, 0, 30, 0, 0, 0, 0, 0, 0, 40}));
  be_->avg_pool2d_forward(s, dev(x), y);
  EXPECT_EQ(host(y, 4), (std::vector<float>{7.0f / 4, 13.0f / 4, -14.0f / 4, 31.0f / 4}));
  be_->avg_pool2d_backward(s, dev({4, 8, 12, 16}), dx);
  EXPECT_EQ(host(dx, 16), (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));

  // Ties go to the first maximum; a 3 x 3 window with stride 1 and padding 1 over a 2 x 2 image
  // never picks a pad even where every input is negative, and overlapping windows add up.
  const auto t = make_pool(1, 1, 2, 2, 3, 3, 1, 1, 1, 1);
  float* ty = dev(std::vector<float>(4, nan_f));
  std::int32_t* targ = dev_indices(4);
  be_->max_pool2d_forward(t, dev({-3, -1, -1, -2}), ty, targ);
  EXPECT_EQ(host(ty, 4), (std::vector<float>{-1, -1, -1, -1}));
  EXPECT_EQ(host_indices(targ, 4), (std::vector<std::int32_t>{1, 1, 1, 1}));
  float* tdx = dev(std::vector<float>(4, nan_f));
  be_->max_pool2d_backward(t, dev({1, 2, 3, 4}), targ, tdx);
  EXPECT_EQ(host(tdx, 4), (std::vector<float>{0, 10, 0, 0}));
  // Average with padding: pads count as zeros, the divisor is always 9.
  be_->avg_pool2d_forward(t, dev({9, 18, 27, 36}), ty);
  EXPECT_EQ(host(ty, 4), (std::vector<float>{10, 10, 10, 10}));
  // A NaN wins its window.
  be_->max_pool2d_forward(t, dev({1, nan_f, 3, 4}), ty, targ);
  for (float v : host(ty, 4)) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(host_indices(targ, 4), (std::vector<std::int32_t>{1, 1, 1, 1}));
}

TEST_P(backend_test, conv_backward_data_adds_in_the_gather_order_of_the_geometry) {
  // dx of each input is the sum of its column entries in geometry::col2im_sum's order (the
  // order the cuda kernel repeats): the cpu's scatter must give those bits exactly.
  for (const auto& s :
       {make_conv(2, 3, 9, 11, 4, 5, 3, 1, 1, 2, 1), make_conv(1, 2, 8, 7, 3, 3, 3, 2, 2, 1, 1),
        make_conv(1, 1, 6, 6, 2, 2, 2, 2, 1, 0, 1)}) {
    SCOPED_TRACE(testing::Message() << s.height << "x" << s.width << " kernel " << s.kernel_h << "x"
                                    << s.kernel_w << " stride " << s.stride_h << "," << s.stride_w);
    const auto w = random_floats(std::size_t(s.filters) * s.column_rows(), 31);
    const auto dy = random_floats(s.output_size(), 32);
    float* dx = dev(std::vector<float>(s.input_size(), nan_f));
    be_->conv2d_backward_data(s, dev(dy), dev(w), dx);
    const auto got = host(dx, s.input_size());
    const int plane = s.out_h() * s.out_w();
    const int crs = int(s.column_rows());
    const std::size_t image = std::size_t(s.channels) * s.height * s.width;
    for (int n = 0; n < s.batch; ++n) {
      // The columns W^T dy_n, from this backend's own product.
      float* col = dev(std::vector<float>(std::size_t(crs) * plane));
      be_->gemm(true, false, crs, plane, s.filters, 1.0f, dev(w), crs,
                dev(std::vector<float>(dy.begin() + std::ptrdiff_t(n) * s.filters * plane,
                                       dy.begin() + std::ptrdiff_t(n + 1) * s.filters * plane)),
                plane, 0.0f, col, plane);
      const auto cols = host(col, std::size_t(crs) * plane);
      for (int c = 0; c < s.channels; ++c)
        for (int ih = 0; ih < s.height; ++ih)
          for (int iw = 0; iw < s.width; ++iw) {
            const float want = geometry::col2im_sum(s, cols.data(), std::size_t(plane), c, ih, iw);
            const std::size_t i = n * image + (std::size_t(c) * s.height + ih) * s.width + iw;
            ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want))
                << "image " << n << " at " << c << "," << ih << "," << iw;
          }
    }
  }
}

TEST_P(backend_test, max_pool_2x2_equals_the_window_rule_with_ties_and_nans) {
  // The 2 x 2, stride 2 layer has a vector path four windows wide on the cpu: 13 columns give
  // six windows a row (one block of four and two alone) and one column never read. Values from
  // a small set make ties; a few NaNs must win their windows.
  const auto s = make_pool(2, 3, 9, 13, 2, 2, 2, 2, 0, 0);
  std::vector<float> x(s.input_size());
  std::mt19937 gen(77);
  for (auto& v : x) v = float(int(gen() % 5)) - 2.0f;
  for (std::size_t i = 0; i < x.size(); i += 37) x[i] = nan_f;
  float* y = dev(std::vector<float>(s.output_size(), 7.0f));
  std::int32_t* arg = dev_indices(s.output_size());
  be_->max_pool2d_forward(s, dev(x), y, arg);
  const auto got = host(y, s.output_size());
  const auto got_arg = host_indices(arg, s.output_size());
  const std::size_t in_plane = std::size_t(s.height) * s.width;
  const std::size_t out_plane = std::size_t(s.out_h()) * s.out_w();
  for (std::size_t nc = 0; nc < std::size_t(s.batch) * s.channels; ++nc)
    for (std::size_t o = 0; o < out_plane; ++o) {
      const auto want = geometry::max_window(s, x.data() + nc * in_plane, int(o));
      const std::size_t i = nc * out_plane + o;
      ASSERT_EQ(got_arg[i], want.index) << "plane " << nc << " output " << o;
      if (std::isnan(want.value))
        ASSERT_TRUE(std::isnan(got[i])) << "plane " << nc << " output " << o;
      else
        ASSERT_EQ(got[i], want.value) << "plane " << nc << " output " << o;
    }
}

TEST_P(backend_test, pooling_gradients_match_central_differences) {
  const pool2d_shape shapes[] = {
      make_pool(2, 3, 5, 6, 2, 2, 2, 2, 0, 0),  // disjoint windows, odd height
      make_pool(2, 2, 5, 5, 3, 3, 2, 2, 1, 1),  // overlapping, padded
      make_pool(1, 2, 4, 7, 3, 2, 1, 2, 1, 0),  // non-square window, stride and pad
  };
  std::uint32_t seed = 400;
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message()
                 << s.height << "x" << s.width << " window " << s.window_h << "x" << s.window_w);
    // Distinct inputs 0.1 apart (a shuffled ladder): a step of h = 0.01 never changes an argmax.
    std::vector<float> x(s.input_size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * float(i) - 3.0f;
    std::shuffle(x.begin(), x.end(), std::mt19937(++seed));
    const auto g = random_floats(s.output_size(), ++seed);
    float* dg = dev(g);
    float* probe = dev(x);
    float* y = dev(std::vector<float>(s.output_size()));
    std::int32_t* arg = dev_indices(s.output_size());
    float* dx = dev(std::vector<float>(s.input_size(), nan_f));

    be_->max_pool2d_forward(s, probe, y, arg);
    be_->max_pool2d_backward(s, dg, arg, dx);
    std::int32_t* scratch_arg = dev_indices(s.output_size());
    auto max_loss = [&](const std::vector<float>& v) {
      be_->upload(probe, v.data(), v.size());
      be_->max_pool2d_forward(s, probe, y, scratch_arg);
      return dot(host(y, s.output_size()), g);
    };
    expect_matches_differences(max_loss, x, host(dx, x.size()), 1e-2f, 1e-4, 1e-4, "max");

    be_->avg_pool2d_backward(s, dg, dx);
    auto avg_loss = [&](const std::vector<float>& v) {
      be_->upload(probe, v.data(), v.size());
      be_->avg_pool2d_forward(s, probe, y);
      return dot(host(y, s.output_size()), g);
    };
    // Linear: a wide step, as for the convolution.
    expect_matches_differences(avg_loss, x, host(dx, x.size()), 0.25f, 1e-4, 1e-4, "avg");
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(all, backend_test, ::testing::ValuesIn(tested_backends()), backend_name);

}  // namespace
}  // namespace coach::kernels
