// The cpu backend's kernel choice (COACH_CPU_KERNEL: auto, avx512, avx2, eigen) and the packed
// convolutions of both tiles: columns read from the image and weights packed once per batch give
// the bits of im2col and a plain product, the AVX2 tile's the AVX-512 tile's.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/cpu_gemm.hpp"

namespace coach::kernels {
namespace {

std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> out(n);
  for (float& x : out) x = dist(gen);
  return out;
}

conv2d_shape conv(int n, int c, int h, int w, int k, int r, int s, int stride, int pad_h,
                  int pad_w) {
  return {.batch = n,
          .channels = c,
          .height = h,
          .width = w,
          .filters = k,
          .kernel_h = r,
          .kernel_w = s,
          .stride_h = stride,
          .stride_w = stride,
          .pad_h = pad_h,
          .pad_w = pad_w};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// --- the choice -----------------------------------------------------------------------------

TEST(cpu_kernel_choice, parses_every_name_and_prints_it_back) {
  for (cpu_gemm g : {cpu_gemm::best, cpu_gemm::avx512, cpu_gemm::avx2_fma, cpu_gemm::eigen}) {
    auto parsed = parse_cpu_kernel(to_string(g));
    ASSERT_TRUE(parsed) << parsed.error().message;
    EXPECT_EQ(*parsed, g);
  }
  EXPECT_EQ(to_string(cpu_gemm::best), "auto");
  EXPECT_EQ(to_string(cpu_gemm::avx2_fma), "avx2");
  EXPECT_EQ(to_string(cpu_gemm::avx512), "avx512");
  EXPECT_EQ(to_string(cpu_gemm::eigen), "eigen");
}

TEST(cpu_kernel_choice, a_bad_name_is_one_line_naming_the_choices) {
  for (const char* bad : {"AVX2", "avx2_fma", "sse", " avx2"}) {
    auto parsed = parse_cpu_kernel(bad);
    ASSERT_FALSE(parsed) << bad;
    EXPECT_EQ(parsed.error().code, errc::invalid_argument);
    EXPECT_EQ(parsed.error().message, std::string("COACH_CPU_KERNEL: '") + bad +
                                          "' is not a CPU kernel (auto, avx512, avx2 or eigen)");
  }
  auto from_value = cpu_kernel_from("fast");
  ASSERT_FALSE(from_value);
  EXPECT_EQ(from_value.error().message,
            "COACH_CPU_KERNEL: 'fast' is not a CPU kernel (auto, avx512, avx2 or eigen)");
}

TEST(cpu_kernel_choice, a_kernel_the_cpu_lacks_is_unsupported_saying_what_it_runs) {
  const cpu_features avx2_only{.avx2_fma = true, .avx512f = false}, bare{};
  auto wide = runnable_cpu_kernel(cpu_gemm::avx512, avx2_only);
  ASSERT_FALSE(wide);
  EXPECT_EQ(wide.error().code, errc::unsupported);
  EXPECT_EQ(wide.error().message,
            "COACH_CPU_KERNEL=avx512: this CPU has no AVX-512F (it runs avx2 and eigen)");
  auto narrow = runnable_cpu_kernel(cpu_gemm::avx2_fma, bare);
  ASSERT_FALSE(narrow);
  EXPECT_EQ(narrow.error().message,
            "COACH_CPU_KERNEL=avx2: this CPU has no AVX2 and FMA (it runs eigen)");
  // auto takes the widest the CPU has; eigen runs everywhere.
  EXPECT_EQ(*runnable_cpu_kernel(cpu_gemm::best, avx2_only), cpu_gemm::avx2_fma);
  EXPECT_EQ(*runnable_cpu_kernel(cpu_gemm::best, bare), cpu_gemm::eigen);
  EXPECT_EQ(*runnable_cpu_kernel(cpu_gemm::best, {true, true}), cpu_gemm::avx512);
  EXPECT_EQ(*runnable_cpu_kernel(cpu_gemm::eigen, bare), cpu_gemm::eigen);
  EXPECT_EQ(*runnable_cpu_kernel(cpu_gemm::avx2_fma, {true, true}), cpu_gemm::avx2_fma);
}

TEST(cpu_kernel_choice, unset_or_empty_is_auto_on_this_cpu) {
  const cpu_gemm widest = *runnable_cpu_kernel(cpu_gemm::best);
  EXPECT_EQ(*cpu_kernel_from(nullptr), widest);
  EXPECT_EQ(*cpu_kernel_from(""), widest);
  EXPECT_EQ(*cpu_kernel_from("auto"), widest);
  EXPECT_EQ(*cpu_kernel_from("eigen"), cpu_gemm::eigen);
  EXPECT_EQ(cpu_backend().gemm_kind(), widest);
  const cpu_features here = this_cpu();
  EXPECT_EQ(here.avx2_fma, detail::cpu_has_avx2_fma());
  EXPECT_EQ(here.avx512f, detail::cpu_has_avx512f());
}

TEST(cpu_kernel_choice, make_backend_runs_the_kernel_the_environment_names) {
  // The variable is read once per process: what this process's make_backend made is what
  // cpu_kernel_from_environment says (the ctest entries cpu_kernel_test.env_avx2 and env_fast set
  // it).
  const auto& chosen = cpu_kernel_from_environment();
  const char* value = std::getenv("COACH_CPU_KERNEL");
  auto expected = cpu_kernel_from(value);
  ASSERT_EQ(chosen.has_value(), expected.has_value());
  if (!chosen) {
    auto be = make_backend(backend_kind::cpu);
    ASSERT_FALSE(be);
    EXPECT_EQ(be.error().message, chosen.error().message);
    return;
  }
  EXPECT_EQ(*chosen, *expected);
  auto be = make_backend(backend_kind::cpu);
  ASSERT_TRUE(be) << be.error().message;
  EXPECT_EQ(dynamic_cast<cpu_backend&>(**be).gemm_kind(), *chosen);
}

// --- the packed convolutions ----------------------------------------------------------------

/// im2col of image n, in plain loops (the reference the packed columns must equal).
std::vector<float> columns_of(const conv2d_shape& s, const float* x) {
  std::vector<float> col(s.column_size());
  const int oh_n = s.out_h(), ow_n = s.out_w();
  std::size_t i = 0;
  for (int c = 0; c < s.channels; ++c)
    for (int r = 0; r < s.kernel_h; ++r)
      for (int q = 0; q < s.kernel_w; ++q)
        for (int oh = 0; oh < oh_n; ++oh)
          for (int ow = 0; ow < ow_n; ++ow, ++i) {
            const int ih = oh * s.stride_h - s.pad_h + r, iw = ow * s.stride_w - s.pad_w + q;
            if (ih >= 0 && ih < s.height && iw >= 0 && iw < s.width)
              col[i] = x[(std::size_t(c) * s.height + ih) * s.width + iw];
          }
  return col;
}

struct packed_conv_case {
  conv2d_shape s;
  bool from_image;  ///< columns_packed_from_image
};

/// Shapes with planes not a multiple of 8, 16 or 32, more than one packed panel (a 64 x 64 plane
/// is 4096 > 3072 columns), more than one 256-term block (C R S = 400), kernels taller than the
/// padding (out_h < H), filters not a multiple of 6 or 8, and two that take the im2col path.
const packed_conv_case packed_cases[] = {
    {conv(3, 16, 14, 14, 32, 5, 5, 1, 2, 2), true}, {conv(2, 1, 28, 28, 16, 5, 5, 1, 2, 2), true},
    {conv(2, 3, 9, 7, 5, 3, 3, 1, 1, 1), true},     {conv(1, 2, 64, 64, 4, 3, 3, 1, 1, 1), true},
    {conv(2, 4, 10, 13, 7, 3, 5, 1, 0, 2), true},   {conv(2, 3, 9, 9, 4, 3, 3, 2, 1, 1), false},
    {conv(2, 3, 5, 5, 4, 1, 1, 1, 0, 0), false},
};

class packed_conv_test : public ::testing::TestWithParam<cpu_gemm> {};

TEST_P(packed_conv_test, forward_and_filter_gradient_are_im2col_and_a_plain_product_bit_for_bit) {
  const cpu_gemm kernel = GetParam();
  if (!runnable_cpu_kernel(kernel)) GTEST_SKIP() << "this CPU does not run " << to_string(kernel);
  const auto isa = kernel == cpu_gemm::avx512 ? detail::tile_isa::avx512 : detail::tile_isa::avx2;
  cpu_backend be(kernel);
  std::uint32_t seed = 300;
  for (const auto& [s, from_image] : packed_cases) {
    EXPECT_EQ(detail::columns_packed_from_image(isa, s), from_image);
    const auto x = random_floats(s.input_size(), ++seed);
    const auto w = random_floats(s.weight_size(), ++seed);
    const auto bias = random_floats(std::size_t(s.filters), ++seed);
    const auto dy = random_floats(s.output_size(), ++seed);
    const int k = s.filters, crs = int(s.column_rows()), plane = s.out_plane();
    std::vector<float> y(s.output_size()), y_ref(s.output_size());
    std::vector<float> dw(s.weight_size()), dw_ref(s.weight_size()), db(s.filters);
    be.conv2d_forward(s, x.data(), w.data(), bias.data(), y.data());
    be.conv2d_backward_filter(s, x.data(), dy.data(), dw.data(), db.data());
    for (int n = 0; n < s.batch; ++n) {
      const auto col = columns_of(s, x.data() + std::size_t(n) * s.channels * s.height * s.width);
      float* yn = y_ref.data() + std::size_t(n) * k * plane;
      be.gemm(false, false, k, plane, crs, 1.0f, w.data(), crs, col.data(), plane, 0.0f, yn, plane);
      for (int f = 0; f < k; ++f)
        for (int p = 0; p < plane; ++p) yn[f * plane + p] = yn[f * plane + p] + bias[f];
      be.gemm(false, true, k, crs, plane, 1.0f, dy.data() + std::size_t(n) * k * plane, plane,
              col.data(), plane, n == 0 ? 0.0f : 1.0f, dw_ref.data(), crs);
    }
    EXPECT_TRUE(same_bits(y, y_ref)) << "forward, plane " << s.out_h() << "x" << s.out_w();
    EXPECT_TRUE(same_bits(dw, dw_ref))
        << "filter gradient, plane " << s.out_h() << "x" << s.out_w();
  }
}

INSTANTIATE_TEST_SUITE_P(tiles, packed_conv_test,
                         ::testing::Values(cpu_gemm::avx2_fma, cpu_gemm::avx512),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(packed_conv, the_avx2_tile_gives_the_avx512_tiles_bits_in_every_convolution_op) {
  if (!detail::cpu_has_avx512f()) GTEST_SKIP() << "this CPU has no AVX-512F";
  cpu_backend avx2(cpu_gemm::avx2_fma), avx512(cpu_gemm::avx512);
  std::uint32_t seed = 700;
  for (const auto& [s, from_image] : packed_cases) {
    const auto x = random_floats(s.input_size(), ++seed);
    const auto w = random_floats(s.weight_size(), ++seed);
    const auto dy = random_floats(s.output_size(), ++seed);
    std::vector<float> y2(s.output_size()), y5(s.output_size());
    avx2.conv2d_forward(s, x.data(), w.data(), nullptr, y2.data());
    avx512.conv2d_forward(s, x.data(), w.data(), nullptr, y5.data());
    EXPECT_TRUE(same_bits(y2, y5)) << "forward, plane " << s.out_h() << "x" << s.out_w();
    std::vector<float> dx2(s.input_size()), dx5(s.input_size());
    avx2.conv2d_backward_data(s, dy.data(), w.data(), dx2.data());
    avx512.conv2d_backward_data(s, dy.data(), w.data(), dx5.data());
    EXPECT_TRUE(same_bits(dx2, dx5)) << "data gradient, plane " << s.out_h() << "x" << s.out_w();
    std::vector<float> dw2(s.weight_size()), dw5(s.weight_size());
    avx2.conv2d_backward_filter(s, x.data(), dy.data(), dw2.data(), nullptr);
    avx512.conv2d_backward_filter(s, x.data(), dy.data(), dw5.data(), nullptr);
    EXPECT_TRUE(same_bits(dw2, dw5)) << "filter gradient, plane " << s.out_h() << "x" << s.out_w();
  }
}

}  // namespace
}  // namespace coach::kernels
