// kernels::math_precision on the cpu backend, the reference the cuda backend is held to
// (cuda_backend_test): round_to's rounding on values whose answer is known, then gemm and the
// convolutions at tf32 and bf16 equal to the fp32 op on operands rounded beforehand, bit for bit;
// a network's gradient at bf16 near its fp32 gradient; and the spec's `precision` field.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/precision.hpp"
#include "spec/job_spec.hpp"
#include "worker/network.hpp"

namespace coach::kernels {
namespace {

using mp = math_precision;

float from_bits(std::uint32_t b) {
  return std::bit_cast<float>(b);
}

TEST(round_to, bf16_rounds_to_nearest_with_ties_to_even) {
  const float ulp = std::ldexp(1.0f, -7);  // bf16's spacing in [1, 2)
  EXPECT_EQ(round_to(mp::bf16, 1.0f), 1.0f);
  // Halfway between 1 and 1 + ulp: to the even one, 1.
  EXPECT_EQ(round_to(mp::bf16, 1.0f + ulp / 2), 1.0f);
  // Halfway between 1 + ulp (odd) and 1 + 2 ulp (even): up.
  EXPECT_EQ(round_to(mp::bf16, 1.0f + 1.5f * ulp), 1.0f + 2 * ulp);
  // Just past halfway: up; just below: down.
  EXPECT_EQ(round_to(mp::bf16, std::nextafter(1.0f + ulp / 2, 2.0f)), 1.0f + ulp);
  EXPECT_EQ(round_to(mp::bf16, std::nextafter(1.0f + ulp / 2, 0.0f)), 1.0f);
  // The sign is kept and the magnitude rounds alike.
  EXPECT_EQ(round_to(mp::bf16, -(1.0f + 1.5f * ulp)), -(1.0f + 2 * ulp));
  // A carry out of the mantissa moves the exponent: 2 - ulp/4 rounds to 2.
  EXPECT_EQ(round_to(mp::bf16, 2.0f - ulp / 4), 2.0f);
  // 0.1f = 0x3dcccccd: bf16 0x3dcd (the cut bits 0xcccd are past half).
  EXPECT_EQ(std::bit_cast<std::uint32_t>(round_to(mp::bf16, 0.1f)), 0x3dcd0000u);
  // Past bf16's largest finite value (0x7f7f0000) by half an ulp or more: infinity.
  EXPECT_EQ(round_to(mp::bf16, FLT_MAX), std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_to(mp::bf16, from_bits(0x7f7f7fffu)), from_bits(0x7f7f0000u));
  EXPECT_EQ(round_to(mp::bf16, -std::numeric_limits<float>::infinity()),
            -std::numeric_limits<float>::infinity());
  // A NaN whose payload lies in the cut bits stays a NaN.
  EXPECT_TRUE(std::isnan(round_to(mp::bf16, from_bits(0x7f800001u))));
  EXPECT_TRUE(std::isnan(round_to(mp::bf16, std::numeric_limits<float>::quiet_NaN())));
  // Subnormals round on the same grid of bits.
  EXPECT_EQ(round_to(mp::bf16, from_bits(0x00008001u)), from_bits(0x00010000u));
  EXPECT_EQ(round_to(mp::bf16, 0.0f), 0.0f);
}

TEST(round_to, tf32_keeps_ten_mantissa_bits_and_fp32_changes_nothing) {
  const float ulp = std::ldexp(1.0f, -10);
  EXPECT_EQ(round_to(mp::tf32, 1.0f + ulp / 2), 1.0f);
  EXPECT_EQ(round_to(mp::tf32, 1.0f + 1.5f * ulp), 1.0f + 2 * ulp);
  EXPECT_EQ(round_to(mp::tf32, std::nextafter(1.0f + ulp / 2, 2.0f)), 1.0f + ulp);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(round_to(mp::tf32, 0.1f)), 0x3dccc000u);
  for (float v : {0.1f, -3.3f, 1e-40f, FLT_MAX})
    EXPECT_EQ(std::bit_cast<std::uint32_t>(round_to(mp::fp32, v)), std::bit_cast<std::uint32_t>(v));
  // Every result lies on its format's grid, and rounding twice is rounding once.
  std::mt19937 gen(7);
  for (int i = 0; i < 10000; ++i) {
    const float v = std::bit_cast<float>(std::uint32_t(gen()) & 0xbfffffffu);  // finite
    const float t = round_to(mp::tf32, v), b = round_to(mp::bf16, v);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(t) & 0x1fffu, 0u);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(b) & 0xffffu, 0u);
    EXPECT_EQ(round_to(mp::bf16, b), b);
    // Within half an ulp of the value (an ulp of bf16 is 2^-7 of the leading power of two).
    if (std::isfinite(b) && std::isnormal(v)) {  // subnormals have a fixed spacing instead
      EXPECT_LE(std::abs(double(b) - v), std::ldexp(std::abs(double(v)), -8) * (1 + 1e-7));
    }
  }
}

TEST(math_precision, parses_its_three_names_and_refuses_others_with_the_choices) {
  EXPECT_EQ(*parse_math_precision("bf16"), mp::bf16);
  EXPECT_EQ(*parse_math_precision("tf32"), mp::tf32);
  EXPECT_EQ(*parse_math_precision("fp32"), mp::fp32);
  const auto bad = parse_math_precision("fp16");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "precision 'fp16' is not one of fp32, tf32, bf16");
  EXPECT_EQ(to_string(mp::bf16), "bf16");
}

std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

std::vector<float> rounded(mp p, std::vector<float> v) {
  round_into(p, v.data(), v.size(), v.data());
  return v;
}

void expect_bits_equal(const std::vector<float>& got, const std::vector<float>& want,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
        << what << " at " << i;
}

TEST(cpu_precision, gemm_equals_the_fp32_product_of_rounded_operands_for_every_transpose) {
  struct shape {
    int m, n, k, pad;
  };
  std::uint32_t seed = 11;
  for (mp p : {mp::tf32, mp::bf16})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const auto& s : {shape{3, 5, 7, 0}, shape{17, 9, 33, 2}, shape{64, 48, 300, 1}}) {
          SCOPED_TRACE(testing::Message() << to_string(p) << " ta=" << ta << " tb=" << tb
                                          << " m=" << s.m << " n=" << s.n << " k=" << s.k);
          const int lda = (ta ? s.m : s.k) + s.pad, ldb = (tb ? s.k : s.n) + s.pad;
          const auto a = random_floats(std::size_t(ta ? s.k : s.m) * lda, ++seed);
          const auto b = random_floats(std::size_t(tb ? s.n : s.k) * ldb, ++seed);
          const auto c0 = random_floats(std::size_t(s.m) * s.n, ++seed);
          cpu_backend low, ref;
          low.set_precision(p);
          auto got = c0, want = c0;
          low.gemm(ta, tb, s.m, s.n, s.k, 0.5f, a.data(), lda, b.data(), ldb, 1.0f, got.data(),
                   s.n);
          const auto ra = rounded(p, a), rb = rounded(p, b);
          ref.gemm(ta, tb, s.m, s.n, s.k, 0.5f, ra.data(), lda, rb.data(), ldb, 1.0f, want.data(),
                   s.n);
          expect_bits_equal(got, want, "C");
          // C itself (beta) and alpha are not rounded: the float C survives where k = 0.
          auto kept = c0;
          low.gemm(ta, tb, s.m, s.n, 0, 1.0f, a.data(), lda, b.data(), ldb, 1.0f, kept.data(), s.n);
          expect_bits_equal(kept, c0, "C with k = 0");
        }
}

TEST(cpu_precision, bf16_products_differ_from_fp32_by_bf16_rounding_not_more) {
  const int m = 32, n = 32, k = 256;
  const auto a = random_floats(std::size_t(m) * k, 1), b = random_floats(std::size_t(k) * n, 2);
  cpu_backend low, ref;
  low.set_precision(mp::bf16);
  EXPECT_EQ(low.precision(), mp::bf16);
  std::vector<float> got(std::size_t(m) * n), want(got.size());
  low.gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, got.data(), n);
  ref.gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, want.data(), n);
  double worst = 0, seen = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double magnitude = 0;
      for (int q = 0; q < k; ++q)
        magnitude += std::abs(double(a[std::size_t(i) * k + q]) * b[std::size_t(q) * n + j]);
      const double e = std::abs(double(got[std::size_t(i) * n + j]) - want[std::size_t(i) * n + j]);
      worst = std::max(worst, e / magnitude);
      seen += e;
    }
  // Each operand moves by at most 2^-8 of itself: a product by about 2^-7.
  EXPECT_LE(worst, std::ldexp(1.0, -7) + 4 * k * double(FLT_EPSILON));
  EXPECT_GT(seen, 0.0) << "bf16 operands left the product unchanged: nothing was rounded";
}

conv2d_shape conv(int n, int c, int h, int w, int k, int r, int stride, int pad) {
  conv2d_shape s;
  s.batch = n;
  s.channels = c;
  s.height = h;
  s.width = w;
  s.filters = k;
  s.kernel_h = r;
  s.kernel_w = r;
  s.stride_h = stride;
  s.stride_w = stride;
  s.pad_h = pad;
  s.pad_w = pad;
  return s;
}

TEST(cpu_precision, convolutions_equal_the_fp32_ops_on_rounded_inputs_bf16_outputs_rounded_too) {
  std::uint32_t seed = 40;
  for (mp p : {mp::tf32, mp::bf16})
    for (const auto& s : {conv(3, 4, 9, 9, 8, 3, 1, 1), conv(2, 3, 11, 7, 5, 3, 2, 0),
                          conv(2, 16, 6, 6, 8, 1, 1, 0), conv(2, 8, 16, 16, 16, 3, 1, 1)}) {
      SCOPED_TRACE(testing::Message() << to_string(p) << " C=" << s.channels << " K=" << s.filters
                                      << " R=" << s.kernel_h);
      const auto x = random_floats(s.input_size(), ++seed),
                 w = random_floats(s.weight_size(), ++seed);
      const auto bias = random_floats(std::size_t(s.filters), ++seed);
      const auto dy = random_floats(s.output_size(), ++seed);
      const auto rx = rounded(p, x), rw = rounded(p, w), rdy = rounded(p, dy);
      cpu_backend low, ref;
      low.set_precision(p);
      std::vector<float> got(s.output_size()), want(got.size());
      // bf16 rounds each output once more (cuDNN's bfloat16 tensors); tf32's stay float.
      auto out = [&](std::vector<float> v) { return p == mp::bf16 ? rounded(p, std::move(v)) : v; };
      low.conv2d_forward(s, x.data(), w.data(), bias.data(), got.data());
      ref.conv2d_forward(s, rx.data(), rw.data(), nullptr, want.data());
      want = out(std::move(want));
      const std::size_t plane = std::size_t(s.out_h()) * s.out_w();
      for (std::size_t i = 0; i < want.size(); ++i)
        want[i] = want[i] + bias[(i / plane) % std::size_t(s.filters)];
      expect_bits_equal(got, want, "y");
      got.assign(s.input_size(), 0), want.assign(s.input_size(), 0);
      low.conv2d_backward_data(s, dy.data(), w.data(), got.data());
      ref.conv2d_backward_data(s, rdy.data(), rw.data(), want.data());
      expect_bits_equal(got, out(want), "dx");
      std::vector<float> dw(s.weight_size()), dw_ref(dw.size()), db(std::size_t(s.filters)),
          db_ref(db.size());
      low.conv2d_backward_filter(s, x.data(), dy.data(), dw.data(), db.data());
      ref.conv2d_backward_filter(s, rx.data(), rdy.data(), dw_ref.data(), nullptr);
      expect_bits_equal(dw, out(dw_ref), "dw");
      ref.conv2d_backward_filter(s, x.data(), dy.data(), dw_ref.data(), db_ref.data());
      expect_bits_equal(db, db_ref, "db (float dy)");
    }
}

TEST(cpu_precision, a_cnn_gradient_at_bf16_stays_within_bf16_rounding_of_fp32) {
  auto spec = scheduler::parse_job_spec(R"(name: cnn
dataset: {format: csv, path: unused.csv}
model:
  layers:
    - {type: conv2d, channels: 8, kernel: 3, padding: 1}
    - relu
    - {type: max_pool2d, kernel: 2}
    - flatten
    - dense
optimizer: {type: sgd}
batch_size: 16
epochs: 1
)",
                                        "inline");
  ASSERT_TRUE(spec) << spec.error().message;
  const int batch = 16, classes = 10;
  worker::dataset data;
  data.rows = batch;
  data.features = 1 * 8 * 8;
  data.shape = {1, 8, 8};
  data.classes = classes;
  data.x = random_floats(std::size_t(batch) * data.features, 3);
  for (int i = 0; i < batch; ++i) data.y.push_back(std::int32_t(i % classes));
  auto model = worker::network::for_data(spec->model, data);
  ASSERT_TRUE(model) << model.error().message;
  std::vector<float> params(model->num_params());
  model->init_params(params, 5);
  std::vector<std::uint32_t> idx(batch);
  for (int i = 0; i < batch; ++i) idx[std::size_t(i)] = std::uint32_t(i);
  auto gradient = [&](mp p, double& loss) {
    cpu_backend be;
    be.set_precision(p);
    std::vector<float> g(params.size());
    worker::network_runner run(*model, be, batch);
    loss = run.forward_backward(params.data(), data, idx, g.data());
    return g;
  };
  double loss32 = 0, loss16 = 0;
  const auto g32 = gradient(mp::fp32, loss32), g16 = gradient(mp::bf16, loss16);
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < g32.size(); ++i) {
    diff += (double(g16[i]) - g32[i]) * (double(g16[i]) - g32[i]);
    norm += double(g32[i]) * g32[i];
  }
  // The relative error of the whole gradient: a few bf16 roundings (2^-8 each), not more.
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(std::sqrt(diff / norm), 0.03);
  EXPECT_NEAR(loss16, loss32, 0.01 * loss32);
}

}  // namespace
}  // namespace coach::kernels

namespace coach::scheduler {
namespace {

TEST(job_spec_precision, defaults_to_fp32_reads_each_name_and_refuses_others_with_the_line) {
  const std::string head =
      "name: p\ndataset: {format: csv, path: x.csv}\nmodel: {type: mlp}\noptimizer: {type: sgd}\n"
      "batch_size: 8\nepochs: 1\n";
  auto plain = parse_job_spec(head, "job.yaml");
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(plain->precision, kernels::math_precision::fp32);
  auto low = parse_job_spec(head + "precision: bf16\n", "job.yaml");
  ASSERT_TRUE(low) << low.error().message;
  EXPECT_EQ(low->precision, kernels::math_precision::bf16);
  auto bad = parse_job_spec(head + "precision: half\n", "job.yaml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("job.yaml:7"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("fp32, tf32, bf16"), std::string::npos) << bad.error().message;
  auto function = parse_job_spec(head + "precision: bf16\nfunction: {deadline_s: 5}\n", "job.yaml");
  ASSERT_FALSE(function);
  EXPECT_NE(function.error().message.find("function workers compute in fp32 only"),
            std::string::npos)
      << function.error().message;
}

}  // namespace
}  // namespace coach::scheduler
