// kernels::cuda_backend against the cpu backend (which the kernels_*_test files hold to double
// references), op by op on random inputs of several shapes, then a training run on the digits and
// the NCCL group. Every test that needs a device skips, saying why, when none is visible; the
// factories' answers without a device are checked on every build.
//
// Tolerances (docs/cuda.md): elementwise ops, column_sum, count_correct and the optimizer updates
// must equal the cpu bit for bit (the kernels do the cpu's operations in the cpu's order, without
// FMA; cuda_kernels.hpp). GEMM: within 2 (k + 2) FLT_EPSILON sum_p |a_ip b_pj| of the exact
// product, as kernels_dense_test holds the cpu. sum and sum_squares: within 1e-12 of sum |x| (both
// accumulate in double). softmax_xent: row sums of exponentials may round differently, so the loss
// is within (cols + 4) FLT_EPSILON per row and each gradient entry within (cols + 8) FLT_EPSILON of
// its probability. Layers: pooling, dropout, batch norm inference and the activation gradients from
// equal outputs equal the cpu bit for bit (kernels/layer_geometry.hpp is compiled on both sides);
// tanh, sigmoid and gelu within 8 FLT_EPSILON (|y| + |x| + 1) (libm against CUDA's tanhf/expf);
// conv2d within 4 (depth + 2) FLT_EPSILON times the same op on |inputs|; batch norm statistics
// within an ulp or two (double sums in different orders), its outputs within 1e-5 (|y| + 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/embedded_cluster.hpp"
#include "common/format.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "master/chunk_dispenser.hpp"
#include "spec/job_spec.hpp"
#include "worker/device_reducer.hpp"
#include "worker/host_reducer.hpp"
#include "worker/network.hpp"

#ifdef COACH_HAVE_CUDA
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_error.hpp"
#include "kernels/cuda/nccl_group.hpp"
#endif

namespace coach::kernels {
namespace {

constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();

/// Empty when a CUDA device can run the device tests, else why it cannot.
std::string no_device_reason() {
#ifdef COACH_HAVE_CUDA
  if (cuda_device_present()) return "";
  return "no CUDA device visible (" + std::string(cuda_unavailable_reason()) +
         "): run on a GPU host (docs/cuda.md)";
#else
  return "this build has no CUDA backend (configured with COACH_ENABLE_CUDA=OFF)";
#endif
}

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                 float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& x : out) x = dist(gen);
  return out;
}

std::vector<std::int32_t> random_labels(std::size_t n, int classes, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::int32_t> out(n);
  for (auto& l : out) l = std::int32_t(gen() % unsigned(classes));
  return out;
}

/// Asserts a == b element by element, bit for bit up to the sign of zero (float ==).
void expect_same(const std::vector<float>& gpu, const std::vector<float>& cpu,
                 const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (std::size_t i = 0; i < gpu.size(); ++i)
    ASSERT_EQ(gpu[i], cpu[i]) << what << " differs at " << i;
}

// --- factories: on every build, with or without a device -------------------------------------

TEST(cuda_factory, names_cuda_in_the_build_and_explains_a_missing_device) {
#ifdef COACH_HAVE_CUDA
  EXPECT_EQ(compiled_backends(), "cpu,cuda");
  auto cuda = make_backend(backend_kind::cuda);
  auto any = make_backend(backend_kind::auto_select);
  ASSERT_TRUE(any) << any.error().to_string();
  if (cuda_device_present()) {
    ASSERT_TRUE(cuda) << cuda.error().to_string();
    EXPECT_EQ((*cuda)->name(), "cuda");
    EXPECT_EQ((*any)->name(), "cuda");
    EXPECT_GT(cuda_device_count(), 0);
    EXPECT_EQ(cuda_unavailable_reason(), "");
  } else {
    ASSERT_FALSE(cuda);
    EXPECT_EQ(cuda.error().code, errc::unsupported);
    EXPECT_NE(cuda.error().message.find("no CUDA device visible"), std::string::npos)
        << cuda.error().message;
    // The runtime's own words say why (no driver, no device), not only that it failed.
    EXPECT_NE(cuda.error().message.find(std::string(cuda_unavailable_reason())), std::string::npos)
        << cuda.error().message;
    EXPECT_FALSE(cuda_unavailable_reason().empty());
    EXPECT_EQ((*any)->name(), "cpu");  // auto falls back
    EXPECT_EQ(cuda_device_count(), 0);
  }
#else
  EXPECT_EQ(compiled_backends(), "cpu");
  EXPECT_FALSE(cuda_device_present());
  auto cuda = make_backend(backend_kind::cuda);
  ASSERT_FALSE(cuda);
  EXPECT_EQ(cuda.error().code, errc::unsupported);
  EXPECT_NE(cuda.error().message.find("COACH_ENABLE_CUDA"), std::string::npos);
#endif
}

#ifdef COACH_HAVE_CUDA
TEST(cuda_factory, rejects_a_device_index_that_does_not_exist) {
  for (int device : {-1, cuda_device_count(), 1 << 20}) {
    auto made = cuda_backend::make(device);
    ASSERT_FALSE(made) << "device " << device;
    if (cuda_device_present()) {
      EXPECT_EQ(made.error().code, errc::invalid_argument);
      EXPECT_NE(made.error().message.find("CUDA device " + std::to_string(device)),
                std::string::npos)
          << made.error().message;
    } else {
      EXPECT_EQ(made.error().code, errc::unsupported) << made.error().message;
    }
  }
}

TEST(nccl_group_factory, refuses_what_it_cannot_do_with_a_reason) {
  const std::vector<int> none;
  const std::vector<int> first{0};
  if (!nccl_group::available()) {
    auto g = nccl_group::make(first);
    ASSERT_FALSE(g);
    EXPECT_EQ(g.error().code, errc::unsupported);
    EXPECT_NE(g.error().message.find("no NCCL"), std::string::npos) << g.error().message;
    GTEST_SKIP() << "this build has no NCCL: only its refusal was checked";
  }
  auto empty = nccl_group::make(none);
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, errc::invalid_argument);
  if (!cuda_device_present()) {
    auto g = nccl_group::make(first);
    ASSERT_FALSE(g);
    EXPECT_EQ(g.error().code, errc::unsupported);
    EXPECT_NE(g.error().message.find("no CUDA device visible"), std::string::npos)
        << g.error().message;
    GTEST_SKIP() << "no CUDA device here: the refusals without one were checked, not a group's "
                    "own checks (bench/gpu_check.sh runs them on a GPU machine)";
  }
  const std::vector<int> twice{0, 0};
  auto dup = nccl_group::make(twice);
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, errc::invalid_argument);
  EXPECT_NE(dup.error().message.find("named twice"), std::string::npos) << dup.error().message;
  const std::vector<int> missing{cuda_device_count()};
  auto bad = nccl_group::make(missing);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, errc::invalid_argument);
}
#endif

// --- the cuda backend against the cpu backend -----------------------------------------------

/// Host and device copies side by side.
struct pair_ptr {
  float* cpu = nullptr;
  float* gpu = nullptr;
};

/// Fixture: a cpu and a cuda backend, and memory on both that is freed when the test ends.
class cuda_vs_cpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = no_device_reason(); !why.empty()) GTEST_SKIP() << why;
    auto made = make_backend(backend_kind::cuda);
    ASSERT_TRUE(made) << made.error().to_string();
    gpu_ = std::move(*made);
    ASSERT_EQ(gpu_->name(), "cuda");
  }

  void TearDown() override {
    for (auto p : owned_) {
      cpu_.free(p.cpu);
      gpu_->free(p.gpu);
    }
  }

  /// The cuDNN convolutions limited to GEMM-like algorithms, whose rounding the GEMM bound of
  /// the conv tests covers (the default also takes Winograd and FFT; tested apart).
  void gemm_like_convolutions() {
#ifdef COACH_HAVE_CUDA
    static_cast<cuda_backend&>(*gpu_).set_gemm_like_convolutions(true);
#endif
  }

  /// A copy of `host` in each backend's memory.
  pair_ptr both(const std::vector<float>& host) {
    pair_ptr p{cpu_.alloc(host.size()), gpu_->alloc(host.size())};
    owned_.push_back(p);
    cpu_.upload(p.cpu, host.data(), host.size());
    gpu_->upload(p.gpu, host.data(), host.size());
    return p;
  }

  std::vector<float> from_gpu(const float* p, std::size_t n) {
    std::vector<float> out(n);
    gpu_->download(out.data(), p, n);
    return out;
  }
  std::vector<float> from_cpu(const float* p, std::size_t n) {
    std::vector<float> out(n);
    cpu_.download(out.data(), p, n);
    return out;
  }

  /// Downloads both copies and asserts they are equal bit for bit.
  void expect_same_memory(const pair_ptr& p, std::size_t n, const std::string& what) {
    expect_same(from_gpu(p.gpu, n), from_cpu(p.cpu, n), what);
  }

  cpu_backend cpu_;
  std::unique_ptr<backend> gpu_;
  std::vector<pair_ptr> owned_;
};

// --- memory ---------------------------------------------------------------------------------

TEST_F(cuda_vs_cpu, alloc_is_zeroed_and_copies_round_trip_across_staging_chunks) {
  // 3 Mi + 5 floats take three 4 MiB staging chunks and a partial one.
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, (std::size_t{3} << 20) + 5}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    float* p = gpu_->alloc(n);
    ASSERT_NE(p, nullptr);
    for (float x : from_gpu(p, n)) ASSERT_EQ(x, 0.0f);
    const auto data = random_floats(n, 1 + std::uint32_t(n));
    gpu_->upload(p, data.data(), n);
    EXPECT_EQ(from_gpu(p, n), data);
    // Offsets: a piece of a buffer, as the worker uploads parameter pieces.
    const auto piece = random_floats(n / 2 + 1, 7);
    gpu_->upload(p + n / 3, piece.data(), std::min(piece.size(), n - n / 3));
    auto want = data;
    std::copy_n(piece.begin(), std::min(piece.size(), n - n / 3), want.begin() + n / 3);
    EXPECT_EQ(from_gpu(p, n), want);
    gpu_->free(p);
  }
  float* a = gpu_->alloc(0);
  float* b = gpu_->alloc(0);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(a, b);
  gpu_->free(a);
  gpu_->free(b);
  gpu_->free(nullptr);
  gpu_->download(nullptr, nullptr, 0);  // only waits
}

TEST_F(cuda_vs_cpu, back_to_back_uploads_reuse_staging_without_corrupting_each_other) {
  // Many uploads before any wait: each staging buffer is rewritten only after its copy is done,
  // and the host buffer may be changed as soon as upload returns.
  std::vector<float*> bufs;
  std::vector<std::vector<float>> want;
  std::vector<float> host;
  for (std::uint32_t i = 0; i < 12; ++i) {
    const std::size_t n = i % 3 == 0 ? (std::size_t{1} << 20) + 17 : 100 + i;
    host = random_floats(n, 100 + i);
    bufs.push_back(gpu_->alloc(n));
    gpu_->upload(bufs.back(), host.data(), n);
    want.push_back(host);
    std::fill(host.begin(), host.end(), nan_f);  // the caller reuses its buffer at once
  }
  // The same buffer twice in a row: the later upload wins.
  const auto later = random_floats(want[1].size(), 999);
  gpu_->upload(bufs[1], later.data(), later.size());
  want[1] = later;
  // Work between copies is ordered with them.
  gpu_->scale(want[2].size(), 2.0f, bufs[2]);
  for (float& x : want[2]) x *= 2.0f;
  for (std::size_t i = 0; i < bufs.size(); ++i) {
    EXPECT_EQ(from_gpu(bufs[i], want[i].size()), want[i]) << "buffer " << i;
    gpu_->free(bufs[i]);
  }
}

#ifdef COACH_HAVE_CUDA
TEST_F(cuda_vs_cpu, async_downloads_copy_what_was_enqueued_before_them_while_later_ops_run) {
  const std::size_t n = 3000017;
  auto host = random_floats(n, 77);
  float* d = gpu_->alloc(n);
  float* other = gpu_->alloc(n);
  gpu_->upload(d, host.data(), n);
  float* pinned = gpu_->alloc_host(n);
  // Two halves, each copied once the op that wrote it is done, while the ops after it run:
  // the second half's scaling, then work on another buffer (the copies read nothing it writes).
  gpu_->scale(n / 2, 2.0f, d);
  gpu_->download_async(pinned, d, n / 2);
  gpu_->scale(n - n / 2, 3.0f, d + n / 2);
  gpu_->download_async(pinned + n / 2, d + n / 2, n - n / 2);
  for (int i = 0; i < 20; ++i) gpu_->axpy(n, 0.5f, d, other);
  gpu_->finish_downloads();
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(pinned[i], host[i] * (i < n / 2 ? 2.0f : 3.0f)) << i;
  gpu_->free_host(pinned);
  gpu_->free(d);
  gpu_->free(other);
}

TEST_F(cuda_vs_cpu, a_failed_allocation_throws_a_clear_error_and_the_backend_still_works) {
  // 2^44 floats (64 TiB): more than any device has.
  try {
    float* p = gpu_->alloc(std::size_t{1} << 44);
    gpu_->free(p);
    FAIL() << "a 64 TiB allocation succeeded";
  } catch (const cuda_error& e) {
    EXPECT_EQ(e.error().code, errc::resource_exhausted) << e.what();
    EXPECT_NE(std::string(e.what()).find("cudaMalloc"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("device 0"), std::string::npos) << e.what();
  }
  const auto x = random_floats(1000, 3);
  auto p = both(x);
  gpu_->scale(x.size(), 0.5f, p.gpu);
  cpu_.scale(x.size(), 0.5f, p.cpu);
  expect_same_memory(p, x.size(), "scale after a failed alloc");
}
#endif

// --- gemm -----------------------------------------------------------------------------------

struct gemm_case {
  int m, n, k;
  int pad_a, pad_b, pad_c;  ///< leading dimension minus stored row length
};

TEST_F(cuda_vs_cpu, gemm_matches_exact_product_and_cpu_for_all_transposes_shapes_and_scalars) {
  const std::vector<gemm_case> cases{
      {1, 1, 1, 0, 0, 0},      {3, 5, 7, 0, 0, 0},       {5, 3, 7, 2, 1, 3},
      {1, 40, 3, 0, 4, 0},     {40, 1, 3, 1, 0, 2},      {17, 9, 33, 3, 5, 1},
      {64, 48, 80, 0, 0, 0},   {65, 31, 129, 7, 2, 4},   {128, 10, 784, 0, 0, 0},
      {64, 256, 784, 0, 0, 0}, {257, 129, 255, 1, 0, 3}, {784, 256, 64, 0, 0, 0}};
  const std::vector<std::pair<float, float>> scalars{
      {1.0f, 0.0f}, {0.5f, 0.0f}, {1.0f, 1.0f}, {-2.0f, 0.25f}, {1.5f, -1.0f}};
  std::uint32_t seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& g : cases)
        for (auto [alpha, beta] : scalars) {
          SCOPED_TRACE(testing::Message()
                       << "trans_a=" << ta << " trans_b=" << tb << " m=" << g.m << " n=" << g.n
                       << " k=" << g.k << " alpha=" << alpha << " beta=" << beta);
          seed += 3;
          const int a_rows = ta ? g.k : g.m, a_cols = ta ? g.m : g.k;
          const int b_rows = tb ? g.n : g.k, b_cols = tb ? g.k : g.n;
          const int lda = a_cols + g.pad_a, ldb = b_cols + g.pad_b, ldc = g.n + g.pad_c;
          // Padding holds NaN, and so does C when beta == 0: reading either poisons the result.
          auto fill = [](int rows, int cols, int ld, std::uint32_t s, bool all_nan) {
            auto v = random_floats(std::size_t(rows) * ld, s);
            for (int r = 0; r < rows; ++r)
              for (int c = 0; c < ld; ++c)
                if (c >= cols || all_nan) v[std::size_t(r) * ld + c] = nan_f;
            return v;
          };
          const auto a = fill(a_rows, a_cols, lda, seed, false);
          const auto b = fill(b_rows, b_cols, ldb, seed + 1, false);
          const auto c0 = fill(g.m, g.n, ldc, seed + 2, beta == 0.0f);
          auto da = both(a), db = both(b), dc = both(c0);
          gpu_->gemm(ta, tb, g.m, g.n, g.k, alpha, da.gpu, lda, db.gpu, ldb, beta, dc.gpu, ldc);
          cpu_.gemm(ta, tb, g.m, g.n, g.k, alpha, da.cpu, lda, db.cpu, ldb, beta, dc.cpu, ldc);
          const auto got = from_gpu(dc.gpu, c0.size());
          const auto cpu = from_cpu(dc.cpu, c0.size());
          for (int i = 0; i < g.m; ++i) {
            for (int j = 0; j < g.n; ++j) {
              double dot = 0.0, magnitude = 0.0;
              for (int p = 0; p < g.k; ++p) {
                const double x = ta ? a[std::size_t(p) * lda + i] : a[std::size_t(i) * lda + p];
                const double y = tb ? b[std::size_t(j) * ldb + p] : b[std::size_t(p) * ldb + j];
                dot += x * y;
                magnitude += std::abs(x * y);
              }
              const std::size_t at = std::size_t(i) * ldc + j;
              const double old = beta == 0.0f ? 0.0 : double(c0[at]);
              const double want = double(alpha) * dot + double(beta) * old;
              const double bound =
                  std::abs(double(alpha)) * magnitude + std::abs(double(beta) * old);
              const double tol = 2.0 * (g.k + 2) * FLT_EPSILON * bound + 1e-30;
              ASSERT_NEAR(got[at], want, tol) << "at C[" << i << ", " << j << "]";
              ASSERT_NEAR(got[at], cpu[at], 2 * tol)
                  << "cpu differs at C[" << i << ", " << j << "]";
            }
            for (int j = g.n; j < ldc; ++j)
              ASSERT_TRUE(std::isnan(got[std::size_t(i) * ldc + j]))
                  << "padding of C written at row " << i;
          }
        }
}

TEST_F(cuda_vs_cpu, gemm_with_empty_inner_dimension_only_scales_c_and_keeps_padding) {
  const std::vector<float> c0{1, 2, 3, nan_f, 4, 5, 6, nan_f};  // 2 x 3, ldc 4
  auto c = both(c0);
  auto a = both({0.0f});
  gpu_->gemm(false, false, 2, 3, 0, 1.0f, a.gpu, 1, a.gpu, 3, 0.5f, c.gpu, 4);
  auto got = from_gpu(c.gpu, 8);
  const std::vector<float> half{0.5f, 1, 1.5f, 2, 2.5f, 3};
  for (int r = 0; r < 2; ++r) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(got[r * 4 + j], half[r * 3 + j]);
    EXPECT_TRUE(std::isnan(got[r * 4 + 3]));
  }
  gpu_->upload(c.gpu, std::vector<float>(8, nan_f).data(), 8);
  gpu_->gemm(true, true, 2, 3, 0, 1.0f, a.gpu, 2, a.gpu, 1, 0.0f, c.gpu, 4);  // NaN not read
  got = from_gpu(c.gpu, 8);
  for (int r = 0; r < 2; ++r) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(got[r * 4 + j], 0.0f);
    EXPECT_TRUE(std::isnan(got[r * 4 + 3]));
  }
}

// --- rows and columns -----------------------------------------------------------------------

const std::vector<std::pair<int, int>> row_col_shapes{{1, 1},    {5, 37},   {64, 10},  {300, 257},
                                                      {1, 1000}, {1000, 1}, {33, 4097}};

TEST_F(cuda_vs_cpu, bias_add_equals_cpu_bit_for_bit) {
  std::uint32_t seed = 200;
  for (auto [rows, cols] : row_col_shapes) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    auto y = both(random_floats(std::size_t(rows) * cols, ++seed));
    auto bias = both(random_floats(std::size_t(cols), ++seed));
    gpu_->bias_add(y.gpu, bias.gpu, rows, cols);
    cpu_.bias_add(y.cpu, bias.cpu, rows, cols);
    expect_same_memory(y, std::size_t(rows) * cols, "bias_add");
  }
}

TEST_F(cuda_vs_cpu, column_sum_equals_cpu_bit_for_bit_for_every_beta) {
  std::uint32_t seed = 300;
  for (auto [rows, cols] : row_col_shapes)
    for (float beta : {0.0f, 1.0f, 0.5f, -2.0f}) {
      SCOPED_TRACE(testing::Message() << rows << " x " << cols << " beta=" << beta);
      auto x = both(random_floats(std::size_t(rows) * cols, ++seed));
      // beta == 0 must not read out: NaN there must not survive.
      auto out = both(beta == 0.0f ? std::vector<float>(cols, nan_f) : random_floats(cols, ++seed));
      gpu_->column_sum(x.gpu, rows, cols, beta, out.gpu);
      cpu_.column_sum(x.cpu, rows, cols, beta, out.cpu);
      expect_same_memory(out, std::size_t(cols), "column_sum");
    }
}

// --- elementwise ----------------------------------------------------------------------------

/// Sizes around the block size (256) and past the grid cap of the grid-stride loops.
const std::vector<std::size_t> elementwise_sizes{0, 1, 7, 255, 256, 257, 1029, 100003, 3000017};

TEST_F(cuda_vs_cpu, relu_and_relu_grad_equal_cpu_out_of_place_and_in_place) {
  std::uint32_t seed = 400;
  for (std::size_t n : elementwise_sizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    auto xs = random_floats(n, ++seed);
    if (n > 4) {
      xs[0] = 0.0f;
      xs[1] = -0.0f;
      xs[2] = 1e-30f;
      xs[3] = -1e-30f;
    }
    auto x = both(xs);
    auto y = both(std::vector<float>(n, nan_f));
    gpu_->relu(x.gpu, y.gpu, n);
    cpu_.relu(x.cpu, y.cpu, n);
    expect_same_memory(y, n, "relu");
    expect_same(from_gpu(x.gpu, n), xs, "relu input");
    auto dy = both(random_floats(n, ++seed));
    auto dx = both(std::vector<float>(n, nan_f));
    gpu_->relu_grad(y.gpu, dy.gpu, dx.gpu, n);
    cpu_.relu_grad(y.cpu, dy.cpu, dx.cpu, n);
    expect_same_memory(dx, n, "relu_grad");
    gpu_->relu_grad(y.gpu, dy.gpu, dy.gpu, n);  // dx aliasing dy
    cpu_.relu_grad(y.cpu, dy.cpu, dy.cpu, n);
    expect_same_memory(dy, n, "relu_grad in place");
    gpu_->relu(x.gpu, x.gpu, n);  // y aliasing x
    cpu_.relu(x.cpu, x.cpu, n);
    expect_same_memory(x, n, "relu in place");
  }
}

TEST_F(cuda_vs_cpu, axpy_and_scale_equal_cpu_bit_for_bit) {
  std::uint32_t seed = 500;
  for (std::size_t n : elementwise_sizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    auto x = both(random_floats(n, ++seed, -3.0f, 3.0f));
    auto y = both(random_floats(n, ++seed));
    gpu_->axpy(n, -1.5f, x.gpu, y.gpu);
    cpu_.axpy(n, -1.5f, x.cpu, y.cpu);
    expect_same_memory(y, n, "axpy");
    gpu_->scale(n, 0.3f, y.gpu);
    cpu_.scale(n, 0.3f, y.cpu);
    expect_same_memory(y, n, "scale");
    gpu_->scale(n, 0.0f, y.gpu);
    for (float v : from_gpu(y.gpu, n)) ASSERT_EQ(v, 0.0f);
  }
}

TEST_F(cuda_vs_cpu, sum_and_sum_squares_match_cpu_and_repeat_exactly) {
  std::uint32_t seed = 600;
  for (std::size_t n : elementwise_sizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const auto xs = random_floats(n, ++seed, -3.0f, 2.0f);
    double magnitude = 0.0, squares = 0.0;
    for (float v : xs) {
      magnitude += std::abs(v);
      squares += double(v) * v;
    }
    auto x = both(xs);
    const double s = gpu_->sum(x.gpu, n), ss = gpu_->sum_squares(x.gpu, n);
    EXPECT_NEAR(s, cpu_.sum(x.cpu, n), 1e-12 * magnitude);
    EXPECT_NEAR(ss, cpu_.sum_squares(x.cpu, n), 1e-12 * squares);
    // The order of the additions depends on n only: the same call gives the same bits.
    EXPECT_EQ(gpu_->sum(x.gpu, n), s);
    EXPECT_EQ(gpu_->sum_squares(x.gpu, n), ss);
  }
  // In float, 1e8 + 1 == 1e8: a float accumulator anywhere would lose the ones.
  std::vector<float> ones(100001, 1.0f);
  ones[50000] = 1e8f;
  auto x = both(ones);
  EXPECT_EQ(gpu_->sum(x.gpu, ones.size()), 1e8 + 100000.0);
  ones[50000] = 1e4f;
  gpu_->upload(x.gpu, ones.data(), ones.size());
  EXPECT_EQ(gpu_->sum_squares(x.gpu, ones.size()), 1e8 + 100000.0);
}

// --- softmax cross-entropy and accuracy -----------------------------------------------------

TEST_F(cuda_vs_cpu, softmax_xent_loss_and_gradient_match_cpu_for_many_shapes) {
  // (rows, cols): odd counts, a row count not a multiple of the 8 rows per block, wide rows that
  // take several passes of a warp; rows grow and shrink, so the label buffer grows and is reused.
  const std::vector<std::pair<int, int>> shapes{{1, 2},    {7, 10},   {64, 10}, {300, 33},
                                                {5, 1000}, {1025, 3}, {9, 10}};
  std::uint32_t seed = 700;
  for (auto [rows, cols] : shapes)
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(testing::Message() << rows << " x " << cols << (in_place ? " in place" : ""));
      const std::size_t size = std::size_t(rows) * cols;
      const auto xs = random_floats(size, ++seed, -4.0f, 4.0f);
      const auto labels = random_labels(std::size_t(rows), cols, ++seed);
      auto x = both(xs);
      auto d = in_place ? x : both(std::vector<float>(size, nan_f));
      const double gpu_loss = gpu_->softmax_xent(x.gpu, labels.data(), rows, cols, d.gpu);
      const double cpu_loss = cpu_.softmax_xent(x.cpu, labels.data(), rows, cols, d.cpu);
      EXPECT_NEAR(gpu_loss, cpu_loss, rows * (cols + 4) * FLT_EPSILON + 1e-9 * cpu_loss);
      const auto g = from_gpu(d.gpu, size);
      const auto c = from_cpu(d.cpu, size);
      for (std::size_t i = 0; i < size; ++i) {
        const bool is_label = int(i % cols) == labels[i / cols];
        const double prob = double(c[i]) + (is_label ? 1.0 : 0.0);
        ASSERT_NEAR(g[i], c[i], (cols + 8) * FLT_EPSILON * prob + FLT_EPSILON) << "entry " << i;
      }
      if (!in_place) expect_same(from_gpu(x.gpu, size), xs, "logits");  // input untouched
    }
}

TEST_F(cuda_vs_cpu, softmax_xent_gradient_matches_central_differences) {
  const int rows = 3, cols = 5;
  const auto xs = random_floats(std::size_t(rows) * cols, 13, -2.0f, 2.0f);
  const std::vector<std::int32_t> labels{4, 0, 2};
  auto x = both(xs);
  auto grad = both(std::vector<float>(xs.size()));
  gpu_->softmax_xent(x.gpu, labels.data(), rows, cols, grad.gpu);
  const auto g = from_gpu(grad.gpu, xs.size());
  auto scratch = both(std::vector<float>(xs.size()));
  auto loss_at = [&](const std::vector<float>& v) {
    gpu_->upload(x.gpu, v.data(), v.size());
    return gpu_->softmax_xent(x.gpu, labels.data(), rows, cols, scratch.gpu);
  };
  const float h = 1e-2f;  // as in kernels_activation_test: truncation and rounding both below 1e-5
  for (std::size_t i = 0; i < xs.size(); ++i) {
    auto plus = xs, minus = xs;
    plus[i] += h;
    minus[i] -= h;
    const double fd = (loss_at(plus) - loss_at(minus)) / (double(plus[i]) - double(minus[i]));
    EXPECT_NEAR(g[i], fd, 2e-4) << "logit " << i;
  }
}

TEST_F(cuda_vs_cpu, softmax_xent_is_stable_for_large_logits) {
  const std::vector<float> xs{1000,  1000,  -1000,   // label 0: loss log 2
                              1000,  0,     -5,      // label 1: loss 1000
                              -1000, -1000, -1000};  // label 2: loss log 3
  const std::vector<std::int32_t> labels{0, 1, 2};
  auto x = both(xs);
  const double loss = gpu_->softmax_xent(x.gpu, labels.data(), 3, 3, x.gpu);
  ASSERT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, std::log(2.0) + 1000.0 + std::log(3.0), 1e-9 * 1000);
  const auto g = from_gpu(x.gpu, xs.size());
  const std::vector<double> want{-0.5, 0.5, 0, 1, -1, 0, 1.0 / 3, 1.0 / 3, -2.0 / 3};
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-6) << i;
}

TEST_F(cuda_vs_cpu, count_correct_equals_cpu_with_ties_to_the_first) {
  std::uint32_t seed = 800;
  for (auto [rows, cols] :
       std::vector<std::pair<int, int>>{{1, 2}, {5, 3}, {300, 10}, {70001, 7}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    auto xs = random_floats(std::size_t(rows) * cols, ++seed);
    // Quantized logits make ties common; a tie goes to the first largest logit.
    for (float& v : xs) v = std::round(v * 2.0f);
    const auto labels = random_labels(std::size_t(rows), cols, ++seed);
    auto x = both(xs);
    const auto want = cpu_.count_correct(x.cpu, labels.data(), rows, cols);
    EXPECT_EQ(gpu_->count_correct(x.gpu, labels.data(), rows, cols), want);
    if (rows >= 300) {
      EXPECT_GT(want, 0);  // the comparison is not vacuous
    }
  }
  auto x = both({1.0f, 2.0f});
  EXPECT_EQ(gpu_->count_correct(x.gpu, nullptr, 0, 2), 0);
  const std::vector<std::int32_t> one{1};
  EXPECT_EQ(gpu_->count_correct(x.gpu, one.data(), 1, 2), 1);
}

// --- optimizers -----------------------------------------------------------------------------

constexpr std::size_t opt_n = 100003;  // odd, not a multiple of the block size

TEST_F(cuda_vs_cpu, sgd_and_momentum_equal_cpu_bit_for_bit_over_five_steps) {
  struct variant {
    float momentum, weight_decay;
  };
  for (variant var :
       {variant{0.0f, 0.0f}, variant{0.0f, 0.01f}, variant{0.9f, 0.0f}, variant{0.9f, 0.01f}}) {
    SCOPED_TRACE(testing::Message()
                 << "momentum=" << var.momentum << " weight_decay=" << var.weight_decay);
    sgd_options opt;
    opt.learning_rate = 0.1f;
    opt.momentum = var.momentum;
    opt.weight_decay = var.weight_decay;
    auto w = both(random_floats(opt_n, 20));
    // With momentum 0, v must be neither read nor written: a sentinel, or nullptr.
    auto v = both(std::vector<float>(opt_n, var.momentum == 0.0f ? 42.0f : 0.0f));
    for (std::uint32_t step = 1; step <= 5; ++step) {
      auto g = both(random_floats(opt_n, 30 + step, -4.0f, 4.0f));
      const bool null_v = var.momentum == 0.0f && step == 2;
      gpu_->sgd_update(w.gpu, null_v ? nullptr : v.gpu, g.gpu, opt_n, 0.25f, opt);
      cpu_.sgd_update(w.cpu, null_v ? nullptr : v.cpu, g.cpu, opt_n, 0.25f, opt);
      expect_same_memory(w, opt_n, "w at step " + std::to_string(step));
      expect_same_memory(v, opt_n, "v at step " + std::to_string(step));
    }
    if (var.momentum == 0.0f) {
      for (float x : from_gpu(v.gpu, opt_n)) ASSERT_EQ(x, 42.0f) << "v touched";
    }
  }
}

TEST_F(cuda_vs_cpu, adam_equals_cpu_bit_for_bit_over_five_steps) {
  for (float weight_decay : {0.0f, 0.01f}) {
    SCOPED_TRACE(testing::Message() << "weight_decay=" << weight_decay);
    adam_options opt;
    opt.learning_rate = 0.01f;
    opt.weight_decay = weight_decay;
    auto w = both(random_floats(opt_n, 40));
    auto m = both(std::vector<float>(opt_n, 0.0f));
    auto v = both(std::vector<float>(opt_n, 0.0f));
    for (std::int64_t t = 1; t <= 5; ++t) {
      auto g = both(random_floats(opt_n, 50 + std::uint32_t(t), -2.0f, 2.0f));
      gpu_->adam_update(w.gpu, m.gpu, v.gpu, g.gpu, opt_n, 0.5f, t, opt);
      cpu_.adam_update(w.cpu, m.cpu, v.cpu, g.cpu, opt_n, 0.5f, t, opt);
      const std::string at = " at t=" + std::to_string(t);
      expect_same_memory(w, opt_n, "w" + at);
      expect_same_memory(m, opt_n, "m" + at);
      expect_same_memory(v, opt_n, "v" + at);
    }
  }
}

TEST_F(cuda_vs_cpu, optimizer_updates_in_pieces_equal_one_update_bit_for_bit) {
  // Shards cut the vector anywhere, unaligned: the result must not depend on the cuts.
  const auto w0 = random_floats(opt_n, 60);
  const auto g0 = random_floats(opt_n, 61);
  const std::vector<std::size_t> cuts{0, 1, 13, 1500, 1501, 65537, opt_n};
  sgd_options sgd;
  sgd.momentum = 0.9f;
  sgd.weight_decay = 0.01f;
  adam_options adam;
  adam.weight_decay = 0.01f;
  auto run = [&](bool pieces, bool use_adam) {
    auto w = both(w0), a = both(std::vector<float>(opt_n)), b = both(std::vector<float>(opt_n));
    auto g = both(g0);
    for (std::int64_t t = 1; t <= 2; ++t)
      for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
        const std::size_t off = pieces ? cuts[c] : 0;
        const std::size_t n = pieces ? cuts[c + 1] - cuts[c] : (c == 0 ? opt_n : 0);
        if (use_adam)
          gpu_->adam_update(w.gpu + off, a.gpu + off, b.gpu + off, g.gpu + off, n, 0.5f, t, adam);
        else
          gpu_->sgd_update(w.gpu + off, a.gpu + off, g.gpu + off, n, 0.5f, sgd);
      }
    return from_gpu(w.gpu, opt_n);
  };
  expect_same(run(true, false), run(false, false), "momentum in pieces");
  expect_same(run(true, true), run(false, true), "adam in pieces");
}

// --- layers ---------------------------------------------------------------------------------

/// |x| elementwise: the magnitudes that bound a sum's rounding error.
std::vector<float> absolute(std::vector<float> v) {
  for (float& x : v) x = std::abs(x);
  return v;
}

TEST_F(cuda_vs_cpu, activations_match_cpu_bitwise_or_within_a_few_ulp) {
  auto xs = random_floats(100003, 900, -8.0f, 8.0f);
  xs[0] = 0.0f;
  xs[1] = 50.0f;
  xs[2] = -100.0f;
  const std::size_t n = xs.size();
  auto x = both(xs);
  auto dy = both(random_floats(n, 901));
  auto y = both(std::vector<float>(n, nan_f));
  auto dx = both(std::vector<float>(n, nan_f));
  // tanhf / expf on the device and glibc's on the host are each within 2 ulp: outputs within
  // 8 FLT_EPSILON (|y| + 1) of each other; gelu and its slope take 0.5 x (1 + t), hence |x|.
  auto near = [&](const std::string& what) {
    const auto g = from_gpu(y.gpu, n), c = from_cpu(y.cpu, n);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_NEAR(g[i], c[i], 8 * FLT_EPSILON * (std::abs(c[i]) + 1 + std::abs(xs[i])))
          << what << " at x = " << xs[i];
  };
  gpu_->tanh(x.gpu, y.gpu, n);
  cpu_.tanh(x.cpu, y.cpu, n);
  near("tanh");
  // The gradients from the same y are bitwise: multiplications and subtractions only.
  cpu_.download(xs.data(), y.cpu, n);
  auto same_y = both(xs);
  gpu_->tanh_grad(same_y.gpu, dy.gpu, dx.gpu, n);
  cpu_.tanh_grad(same_y.cpu, dy.cpu, dx.cpu, n);
  expect_same_memory(dx, n, "tanh_grad");
  xs = from_cpu(x.cpu, n);
  gpu_->sigmoid(x.gpu, y.gpu, n);
  cpu_.sigmoid(x.cpu, y.cpu, n);
  near("sigmoid");
  auto sig = both(from_cpu(y.cpu, n));
  gpu_->sigmoid_grad(sig.gpu, dy.gpu, dx.gpu, n);
  cpu_.sigmoid_grad(sig.cpu, dy.cpu, dx.cpu, n);
  expect_same_memory(dx, n, "sigmoid_grad");
  gpu_->gelu(x.gpu, y.gpu, n);
  cpu_.gelu(x.cpu, y.cpu, n);
  near("gelu");
  gpu_->gelu_grad(x.gpu, dy.gpu, y.gpu, n);
  cpu_.gelu_grad(x.cpu, dy.cpu, y.cpu, n);
  near("gelu_grad");
}

TEST_F(cuda_vs_cpu, conv2d_matches_cpu_within_gemm_rounding_on_every_path) {
  gemm_like_convolutions();
  struct conv_case {
    conv2d_shape s;
    const char* name;
  };
  auto shape = [](int n, int c, int h, int w, int k, int r, int q, int sh, int sw, int ph, int pw) {
    conv2d_shape s;
    s.batch = n;
    s.channels = c;
    s.height = h;
    s.width = w;
    s.filters = k;
    s.kernel_h = r;
    s.kernel_w = q;
    s.stride_h = sh;
    s.stride_w = sw;
    s.pad_h = ph;
    s.pad_w = pw;
    return s;
  };
  const conv_case cases[] = {
      {shape(2, 3, 5, 4, 2, 3, 2, 1, 1, 0, 0), "small, 3x2 kernel"},
      {shape(4, 8, 17, 13, 16, 3, 3, 2, 2, 1, 1), "stride 2, padding 1"},
      {shape(3, 5, 9, 11, 7, 2, 3, 1, 2, 1, 0), "non-square"},
      {shape(5, 16, 8, 8, 32, 1, 1, 1, 1, 0, 0), "pointwise, batched in one GEMM"},
      // 40 images of 64 x 9 x 32 x 32 columns (576 K floats each): several workspace chunks.
      {shape(40, 64, 32, 32, 8, 3, 3, 1, 1, 1, 1), "chunked workspace"},
  };
  std::uint32_t seed = 910;
  for (const auto& cc : cases) {
    SCOPED_TRACE(cc.name);
    const auto& s = cc.s;
    const auto xs = random_floats(s.input_size(), ++seed);
    const auto ws = random_floats(s.weight_size(), ++seed);
    const auto bs = random_floats(std::size_t(s.filters), ++seed);
    const auto dys = random_floats(s.output_size(), ++seed);
    auto x = both(xs), w = both(ws), b = both(bs), dy = both(dys);
    // Magnitudes: the same ops on |inputs| (on the cpu) bound each output's rounding error.
    auto ax = both(absolute(xs)), aw = both(absolute(ws)), ab = both(absolute(bs)),
         ady = both(absolute(dys));
    auto check = [&](const pair_ptr& out, const float* magnitude, std::size_t n, double depth,
                     const std::string& what) {
      const auto g = from_gpu(out.gpu, n), c = from_cpu(out.cpu, n);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_NEAR(g[i], c[i], 4 * (depth + 2) * FLT_EPSILON * magnitude[i] + 1e-30)
            << what << " at " << i;
    };
    std::vector<float> mag(std::max(s.output_size(), std::max(s.input_size(), s.weight_size())));
    float* m = cpu_.alloc(mag.size());

    auto y = both(std::vector<float>(s.output_size(), nan_f));
    gpu_->conv2d_forward(s, x.gpu, w.gpu, b.gpu, y.gpu);
    cpu_.conv2d_forward(s, x.cpu, w.cpu, b.cpu, y.cpu);
    cpu_.conv2d_forward(s, ax.cpu, aw.cpu, ab.cpu, m);
    check(y, m, s.output_size(), double(s.column_rows()), "y");

    auto dx = both(std::vector<float>(s.input_size(), nan_f));
    gpu_->conv2d_backward_data(s, dy.gpu, w.gpu, dx.gpu);
    cpu_.conv2d_backward_data(s, dy.cpu, w.cpu, dx.cpu);
    cpu_.conv2d_backward_data(s, ady.cpu, aw.cpu, m);
    check(dx, m, s.input_size(), double(s.filters) * s.kernel_h * s.kernel_w, "dx");

    auto dw = both(std::vector<float>(s.weight_size(), nan_f));
    auto db = both(std::vector<float>(std::size_t(s.filters), nan_f));
    gpu_->conv2d_backward_filter(s, x.gpu, dy.gpu, dw.gpu, db.gpu);
    cpu_.conv2d_backward_filter(s, x.cpu, dy.cpu, dw.cpu, db.cpu);
    cpu_.conv2d_backward_filter(s, ax.cpu, ady.cpu, m, nullptr);
    check(dw, m, s.weight_size(), double(s.batch) * s.out_h() * s.out_w(), "dw");
    // db: both sum in double, rounding once to float.
    const auto gdb = from_gpu(db.gpu, std::size_t(s.filters));
    const auto cdb = from_cpu(db.cpu, std::size_t(s.filters));
    for (int k = 0; k < s.filters; ++k)
      ASSERT_NEAR(gdb[std::size_t(k)], cdb[std::size_t(k)], 2 * FLT_EPSILON * std::abs(cdb[k]))
          << "db at " << k;
    cpu_.free(m);
    if (HasFatalFailure()) return;
  }
}

// --- reduced precision (backend::set_precision) ---------------------------------------------

/// v with no value on a tie of tf32's or bf16's rounding (the cut bits exactly half an ulp):
/// cuBLAS's conversion may break ties away from zero where the cpu breaks them to even, and the
/// two then differ by an ulp of the format, which no float tolerance covers.
std::vector<float> untied(std::vector<float> v) {
  for (float& x : v) {
    auto b = std::bit_cast<std::uint32_t>(x);
    if ((b & 0xffffu) == 0x8000u || (b & 0x1fffu) == 0x1000u) b ^= 1u;
    x = std::bit_cast<float>(b);
  }
  return v;
}

TEST_F(cuda_vs_cpu, tf32_and_bf16_products_match_the_cpu_rounding_of_their_operands) {
  gemm_like_convolutions();
  struct gemm_shape {
    int m, n, k;
  };
  const gemm_shape gemms[] = {{64, 48, 80}, {128, 10, 784}, {257, 129, 255}, {784, 256, 64}};
  auto shape = [](int n, int c, int h, int w, int k, int r, int stride, int pad) {
    conv2d_shape s;
    s.batch = n, s.channels = c, s.height = h, s.width = w, s.filters = k;
    s.kernel_h = s.kernel_w = r, s.stride_h = s.stride_w = stride, s.pad_h = s.pad_w = pad;
    return s;
  };
  const conv2d_shape convs[] = {shape(4, 8, 17, 13, 16, 3, 2, 1), shape(5, 16, 8, 8, 32, 1, 1, 0),
                                shape(40, 64, 32, 32, 8, 3, 1, 1),
                                shape(8, 64, 28, 28, 128, 3, 1, 1)};
  std::uint32_t seed = 5000;
  for (math_precision p : {math_precision::tf32, math_precision::bf16}) {
    SCOPED_TRACE(std::string(to_string(p)));
    gpu_->set_precision(p);
    cpu_.set_precision(p);
    cpu_backend fp32;  // what the products would be without the rounding
    int rounded = 0, in_float = 0;
    double worst_low = 0, worst_fp32 = 0;
    // One output of the device against the cpu at p (`low`) and at fp32 (`full`): within the
    // float tolerance of `low` (rounded like the cpu) or, where cuBLAS or cuDNN kept a float
    // kernel for a small product, of `full`. `out_ulp`: bf16 convolutions round their output, so
    // two float sums a rounding apart may land a bf16 ulp apart. `must_round`: a product large
    // enough that the library puts it on the tensor cores.
    auto compare = [&](const std::vector<float>& g, const std::vector<float>& low,
                       const std::vector<float>& full, const std::vector<float>& magnitude,
                       double depth, bool out_ulp, bool must_round, const std::string& what) {
      bool near_low = true, near_full = true;
      double e_low = 0, e_full = 0;
      for (std::size_t i = 0; i < g.size(); ++i) {
        const double tol = 4 * (depth + 2) * FLT_EPSILON * (double(magnitude[i]) + 1e-30) +
                           (out_ulp ? std::ldexp(std::abs(double(low[i])), -7) : 0.0);
        const double dl = std::abs(double(g[i]) - low[i]), df = std::abs(double(g[i]) - full[i]);
        near_low = near_low && dl <= tol;
        near_full = near_full && df <= tol;
        e_low = std::max(e_low, dl / (double(magnitude[i]) + 1e-30));
        e_full = std::max(e_full, df / (double(magnitude[i]) + 1e-30));
      }
      // Rounded like the cpu: near its result, and nearer it than the float one (a long sum's
      // float rounding can put the device within the tolerance of both). A bf16 convolution's
      // output shows it directly: every value a bfloat16 (the low 16 bits zero).
      bool bf16_values = out_ulp;
      for (std::size_t i = 0; bf16_values && i < g.size(); ++i)
        bf16_values = (std::bit_cast<std::uint32_t>(g[i]) & 0xffffu) == 0;
      if (out_ulp) {
        EXPECT_TRUE(bf16_values) << what << ": a bf16 convolution's output holds values that are "
                                 << "not bfloat16";
      }
      const bool like_cpu = near_low && (out_ulp ? bf16_values : !near_full || e_low < e_full);
      std::printf("[ precision ] %s %s: |gpu - cpu %s| %.3g, |gpu - cpu fp32| %.3g%s\n",
                  std::string(to_string(p)).c_str(), what.c_str(),
                  std::string(to_string(p)).c_str(), e_low, e_full,
                  like_cpu    ? ""
                  : near_full ? " (ran in float)"
                              : " (NEITHER)");
      EXPECT_TRUE(near_low || near_full) << what << ": the device matches neither reference";
      if (must_round) {
        EXPECT_TRUE(like_cpu) << what << ": a large product at " << to_string(p)
                              << " did not round like the cpu";
      }
      if (like_cpu) {
        ++rounded;
        if (!out_ulp) {  // a rounded output's ulp would hide the operands' rounding
          worst_low = std::max(worst_low, e_low);
          worst_fp32 = std::max(worst_fp32, e_full);
        }
      } else {
        ++in_float;
      }
    };
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const auto& gs : gemms) {
          const auto a = untied(random_floats(std::size_t(gs.m) * gs.k, ++seed));
          const auto b = untied(random_floats(std::size_t(gs.k) * gs.n, ++seed));
          const int lda = ta ? gs.m : gs.k, ldb = tb ? gs.k : gs.n;
          const std::size_t cn = std::size_t(gs.m) * gs.n;
          auto da = both(a), db = both(b), dc = both(std::vector<float>(cn, nan_f));
          gpu_->gemm(ta, tb, gs.m, gs.n, gs.k, 1.0f, da.gpu, lda, db.gpu, ldb, 0.0f, dc.gpu, gs.n);
          cpu_.gemm(ta, tb, gs.m, gs.n, gs.k, 1.0f, da.cpu, lda, db.cpu, ldb, 0.0f, dc.cpu, gs.n);
          std::vector<float> full(cn), magnitude(cn);
          fp32.gemm(ta, tb, gs.m, gs.n, gs.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, full.data(),
                    gs.n);
          fp32.gemm(ta, tb, gs.m, gs.n, gs.k, 1.0f, absolute(a).data(), lda, absolute(b).data(),
                    ldb, 0.0f, magnitude.data(), gs.n);
          compare(from_gpu(dc.gpu, cn), from_cpu(dc.cpu, cn), full, magnitude, gs.k, false,
                  gs.m >= 256 && gs.n >= 128,
                  coach::format("gemm {}x{}x{} ta={} tb={}", gs.m, gs.n, gs.k, ta, tb));
        }
    for (const auto& s : convs) {
      const std::string name = coach::format("conv N={} C={} {}x{} K={} {}x{}", s.batch, s.channels,
                                             s.height, s.width, s.filters, s.kernel_h, s.kernel_w);
      const bool big = s.channels >= 64 && s.filters >= 128;
      const bool out_ulp = p == math_precision::bf16;
      const auto xs = untied(random_floats(s.input_size(), ++seed));
      const auto ws = untied(random_floats(s.weight_size(), ++seed));
      const auto dys = untied(random_floats(s.output_size(), ++seed));
      auto x = both(xs), w = both(ws), dy = both(dys);
      std::vector<float> full, magnitude;
      auto run_fp32 = [&](std::size_t n, auto op) {
        full.assign(n, 0), magnitude.assign(n, 0);
        op(xs, ws, dys, full.data());
        op(absolute(xs), absolute(ws), absolute(dys), magnitude.data());
      };
      auto y = both(std::vector<float>(s.output_size(), nan_f));
      gpu_->conv2d_forward(s, x.gpu, w.gpu, nullptr, y.gpu);
      cpu_.conv2d_forward(s, x.cpu, w.cpu, nullptr, y.cpu);
      run_fp32(s.output_size(), [&](const auto& xv, const auto& wv, const auto&, float* out) {
        fp32.conv2d_forward(s, xv.data(), wv.data(), nullptr, out);
      });
      compare(from_gpu(y.gpu, s.output_size()), from_cpu(y.cpu, s.output_size()), full, magnitude,
              double(s.column_rows()), out_ulp, big, name + " y");
      auto dx = both(std::vector<float>(s.input_size(), nan_f));
      gpu_->conv2d_backward_data(s, dy.gpu, w.gpu, dx.gpu);
      cpu_.conv2d_backward_data(s, dy.cpu, w.cpu, dx.cpu);
      run_fp32(s.input_size(), [&](const auto&, const auto& wv, const auto& dyv, float* out) {
        fp32.conv2d_backward_data(s, dyv.data(), wv.data(), out);
      });
      compare(from_gpu(dx.gpu, s.input_size()), from_cpu(dx.cpu, s.input_size()), full, magnitude,
              double(s.filters) * s.kernel_h * s.kernel_w, out_ulp, big, name + " dx");
      auto dw = both(std::vector<float>(s.weight_size(), nan_f));
      gpu_->conv2d_backward_filter(s, x.gpu, dy.gpu, dw.gpu, nullptr);
      cpu_.conv2d_backward_filter(s, x.cpu, dy.cpu, dw.cpu, nullptr);
      run_fp32(s.weight_size(), [&](const auto& xv, const auto&, const auto& dyv, float* out) {
        fp32.conv2d_backward_filter(s, xv.data(), dyv.data(), out, nullptr);
      });
      // dw sums over every image and position: its float rounding hides the operands' (both
      // references are as near), so it is never required to show the rounding.
      compare(from_gpu(dw.gpu, s.weight_size()), from_cpu(dw.cpu, s.weight_size()), full, magnitude,
              double(s.batch) * s.out_h() * s.out_w(), out_ulp, false, name + " dw");
    }
    // Where the device rounded as the cpu does, the rounding shows: against fp32 it is off by
    // far more than against the cpu at the same precision.
    std::printf("[ precision ] %s: %d outputs rounded like the cpu, %d ran in float\n",
                std::string(to_string(p)).c_str(), rounded, in_float);
    EXPECT_GT(rounded, 0);
    EXPECT_GT(worst_fp32, 8 * worst_low);
  }
}

TEST_F(cuda_vs_cpu, conv2d_with_any_deterministic_algorithm_stays_near_the_cpu_and_repeats) {
  // The default choice may take Winograd or FFT, whose transforms round beyond the GEMM bound:
  // held to 2e-4 of the magnitude (the same ops on |inputs|), and to the same bits when repeated.
  auto shape = [](int n, int c, int h, int w, int k) {
    conv2d_shape s;
    s.batch = n, s.channels = c, s.height = h, s.width = w, s.filters = k;
    s.kernel_h = s.kernel_w = 3, s.stride_h = s.stride_w = 1, s.pad_h = s.pad_w = 1;
    return s;
  };
  std::uint32_t seed = 7000;
  for (const auto& s : {shape(32, 64, 28, 28, 128), shape(32, 128, 14, 14, 256),
                        shape(32, 256, 7, 7, 256), shape(32, 1, 28, 28, 64)}) {
    SCOPED_TRACE(testing::Message() << "C=" << s.channels << " K=" << s.filters);
    const auto xs = random_floats(s.input_size(), ++seed),
               ws = random_floats(s.weight_size(), ++seed);
    const auto dys = random_floats(s.output_size(), ++seed);
    auto x = both(xs), w = both(ws), dy = both(dys);
    auto ax = both(absolute(xs)), aw = both(absolute(ws)), ady = both(absolute(dys));
    double worst = 0;
    auto check = [&](const pair_ptr& out, std::size_t n, auto again) {
      const auto g = from_gpu(out.gpu, n), c = from_cpu(out.cpu, n);
      std::vector<float> mag(n);
      again(mag);
      for (std::size_t i = 0; i < n; ++i)
        worst = std::max(worst, std::abs(double(g[i]) - c[i]) / (double(mag[i]) + 1e-30));
      auto second = both(std::vector<float>(n, nan_f));
      return std::make_pair(g, second);
    };
    auto y = both(std::vector<float>(s.output_size(), nan_f));
    gpu_->conv2d_forward(s, x.gpu, w.gpu, nullptr, y.gpu);
    cpu_.conv2d_forward(s, x.cpu, w.cpu, nullptr, y.cpu);
    auto [gy, y2] = check(y, s.output_size(), [&](std::vector<float>& m) {
      cpu_.conv2d_forward(s, ax.cpu, aw.cpu, nullptr, m.data());
    });
    gpu_->conv2d_forward(s, x.gpu, w.gpu, nullptr, y2.gpu);
    expect_same(from_gpu(y2.gpu, s.output_size()), gy, "y repeated");
    auto dx = both(std::vector<float>(s.input_size(), nan_f));
    gpu_->conv2d_backward_data(s, dy.gpu, w.gpu, dx.gpu);
    cpu_.conv2d_backward_data(s, dy.cpu, w.cpu, dx.cpu);
    auto [gdx, dx2] = check(dx, s.input_size(), [&](std::vector<float>& m) {
      cpu_.conv2d_backward_data(s, ady.cpu, aw.cpu, m.data());
    });
    gpu_->conv2d_backward_data(s, dy.gpu, w.gpu, dx2.gpu);
    expect_same(from_gpu(dx2.gpu, s.input_size()), gdx, "dx repeated");
    auto dw = both(std::vector<float>(s.weight_size(), nan_f));
    gpu_->conv2d_backward_filter(s, x.gpu, dy.gpu, dw.gpu, nullptr);
    cpu_.conv2d_backward_filter(s, x.cpu, dy.cpu, dw.cpu, nullptr);
    auto [gdw, dw2] = check(dw, s.weight_size(), [&](std::vector<float>& m) {
      cpu_.conv2d_backward_filter(s, ax.cpu, ady.cpu, m.data(), nullptr);
    });
    gpu_->conv2d_backward_filter(s, x.gpu, dy.gpu, dw2.gpu, nullptr);
    expect_same(from_gpu(dw2.gpu, s.weight_size()), gdw, "dw repeated");
#ifdef COACH_HAVE_CUDA
    std::printf("[ algorithms ] C=%d K=%d %dx%d: %s; worst |gpu - cpu| %.3g of the magnitude\n",
                s.channels, s.filters, s.height, s.width,
                static_cast<cuda_backend&>(*gpu_).describe_convolution(s).c_str(), worst);
#endif
    EXPECT_LT(worst, 2e-4);
  }
}

TEST_F(cuda_vs_cpu, pooling_equals_cpu_bit_for_bit_indices_included) {
  auto pool = [](int n, int c, int h, int w, int wh, int ww, int sh, int sw, int ph, int pw) {
    pool2d_shape s;
    s.batch = n;
    s.channels = c;
    s.height = h;
    s.width = w;
    s.window_h = wh;
    s.window_w = ww;
    s.stride_h = sh;
    s.stride_w = sw;
    s.pad_h = ph;
    s.pad_w = pw;
    return s;
  };
  const pool2d_shape shapes[] = {pool(8, 16, 32, 32, 2, 2, 2, 2, 0, 0),
                                 pool(4, 8, 33, 29, 3, 3, 2, 2, 1, 1),
                                 pool(3, 5, 12, 17, 3, 2, 1, 2, 1, 0)};
  std::uint32_t seed = 950;
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message()
                 << s.height << "x" << s.width << " window " << s.window_h << "x" << s.window_w);
    auto xs = random_floats(s.input_size(), ++seed);
    for (std::size_t i = 0; i < xs.size(); i += 7) xs[i] = std::round(xs[i]);  // ties
    auto x = both(xs);
    auto dy = both(random_floats(s.output_size(), ++seed));
    auto y = both(std::vector<float>(s.output_size(), nan_f));
    auto dx = both(std::vector<float>(s.input_size(), nan_f));
    std::int32_t* garg = gpu_->alloc_indices(s.output_size());
    std::int32_t* carg = cpu_.alloc_indices(s.output_size());
    gpu_->max_pool2d_forward(s, x.gpu, y.gpu, garg);
    cpu_.max_pool2d_forward(s, x.cpu, y.cpu, carg);
    expect_same_memory(y, s.output_size(), "max y");
    std::vector<float> bits(s.output_size());
    gpu_->download(bits.data(), reinterpret_cast<const float*>(garg), bits.size());
    EXPECT_EQ(std::memcmp(bits.data(), carg, bits.size() * sizeof(float)), 0) << "argmax";
    gpu_->max_pool2d_backward(s, dy.gpu, garg, dx.gpu);
    cpu_.max_pool2d_backward(s, dy.cpu, carg, dx.cpu);
    expect_same_memory(dx, s.input_size(), "max dx");
    gpu_->free_indices(garg);
    cpu_.free_indices(carg);
    gpu_->avg_pool2d_forward(s, x.gpu, y.gpu);
    cpu_.avg_pool2d_forward(s, x.cpu, y.cpu);
    expect_same_memory(y, s.output_size(), "avg y");
    gpu_->avg_pool2d_backward(s, dy.gpu, dx.gpu);
    cpu_.avg_pool2d_backward(s, dy.cpu, dx.cpu);
    expect_same_memory(dx, s.input_size(), "avg dx");
  }
}

TEST_F(cuda_vs_cpu, dropout_mask_and_values_equal_cpu_bit_for_bit) {
  const std::size_t n = 1000003;
  auto x = both(random_floats(n, 970));
  auto y = both(std::vector<float>(n, nan_f));
  for (float p : {0.0f, 0.1f, 0.5f, 0.9f})
    for (std::uint64_t step : {0ull, 1ull, 123456789ull}) {
      SCOPED_TRACE(testing::Message() << "p=" << p << " step=" << step);
      gpu_->dropout_forward(x.gpu, y.gpu, n, p, 2024, step);
      cpu_.dropout_forward(x.cpu, y.cpu, n, p, 2024, step);
      expect_same_memory(y, n, "dropout forward");
      gpu_->dropout_backward(x.gpu, y.gpu, n, p, 2024, step);
      cpu_.dropout_backward(x.cpu, y.cpu, n, p, 2024, step);
      expect_same_memory(y, n, "dropout backward");
    }
}

TEST_F(cuda_vs_cpu, batch_norm_matches_cpu_to_double_rounding_and_inference_bitwise) {
  const batch_norm_shape shapes[] = {{32, 16, 64}, {128, 100, 1}, {3, 7, 1001}};
  std::uint32_t seed = 990;
  for (const auto& s : shapes) {
    SCOPED_TRACE(testing::Message() << s.batch << " x " << s.channels << " x " << s.spatial);
    const std::size_t total = s.size(), c_n = std::size_t(s.channels);
    auto xs = random_floats(total, ++seed, -3.0f, 5.0f);
    auto x = both(xs);
    auto gamma = both(random_floats(c_n, ++seed, 0.5f, 2.0f));
    auto beta = both(random_floats(c_n, ++seed));
    auto rm = both(random_floats(c_n, ++seed));
    auto rv = both(random_floats(c_n, ++seed, 0.5f, 2.0f));
    auto sm = both(std::vector<float>(c_n, nan_f));
    auto si = both(std::vector<float>(c_n, nan_f));
    auto y = both(std::vector<float>(total, nan_f));
    const batch_norm_options o;
    gpu_->batch_norm_forward_train(s, o, x.gpu, gamma.gpu, beta.gpu, y.gpu, rm.gpu, rv.gpu, sm.gpu,
                                   si.gpu);
    cpu_.batch_norm_forward_train(s, o, x.cpu, gamma.cpu, beta.cpu, y.cpu, rm.cpu, rv.cpu, sm.cpu,
                                  si.cpu);
    // The statistics are double sums in different orders, rounded to float once: equal, or one
    // ulp apart when a sum sits on a rounding boundary.
    auto near_ulp = [&](const pair_ptr& p, std::size_t count, double rel, const std::string& what) {
      const auto g = from_gpu(p.gpu, count), c = from_cpu(p.cpu, count);
      for (std::size_t i = 0; i < count; ++i)
        ASSERT_NEAR(g[i], c[i], rel * (std::abs(c[i]) + 1e-30)) << what << " at " << i;
    };
    near_ulp(sm, c_n, FLT_EPSILON, "saved mean");
    near_ulp(si, c_n, FLT_EPSILON, "saved inverse std");
    near_ulp(rm, c_n, 2 * FLT_EPSILON, "running mean");
    near_ulp(rv, c_n, 2 * FLT_EPSILON, "running var");
    {
      // y from (possibly one-ulp different) statistics: within a few ulp of |gamma xhat| + |beta|.
      const auto g = from_gpu(y.gpu, total), c = from_cpu(y.cpu, total);
      for (std::size_t i = 0; i < total; ++i)
        ASSERT_NEAR(g[i], c[i], 1e-5 * (std::abs(c[i]) + 1)) << "y at " << i;
    }
    // Inference from equal running statistics: bit for bit.
    auto stats = both(from_cpu(rv.cpu, c_n));
    auto means = both(from_cpu(rm.cpu, c_n));
    gpu_->batch_norm_forward_inference(s, o, x.gpu, gamma.gpu, beta.gpu, means.gpu, stats.gpu,
                                       y.gpu);
    cpu_.batch_norm_forward_inference(s, o, x.cpu, gamma.cpu, beta.cpu, means.cpu, stats.cpu,
                                      y.cpu);
    expect_same_memory(y, total, "inference y");
    // Backward from the cpu's saved statistics on both: sums to double rounding, dx close.
    auto saved_mean = both(from_cpu(sm.cpu, c_n));
    auto saved_inv = both(from_cpu(si.cpu, c_n));
    auto dy = both(random_floats(total, ++seed));
    auto dx = both(std::vector<float>(total, nan_f));
    auto dgamma = both(std::vector<float>(c_n, nan_f));
    auto dbeta = both(std::vector<float>(c_n, nan_f));
    gpu_->batch_norm_backward(s, x.gpu, dy.gpu, gamma.gpu, saved_mean.gpu, saved_inv.gpu, dx.gpu,
                              dgamma.gpu, dbeta.gpu);
    cpu_.batch_norm_backward(s, x.cpu, dy.cpu, gamma.cpu, saved_mean.cpu, saved_inv.cpu, dx.cpu,
                             dgamma.cpu, dbeta.cpu);
    // dbeta, dgamma cancel (random signs): bound by the sum of |terms| (about m / 2 for dy in
    // [-1, 1]) times a float rounding.
    const double m = double(s.per_channel());
    {
      const auto g = from_gpu(dbeta.gpu, c_n), c = from_cpu(dbeta.cpu, c_n);
      for (std::size_t i = 0; i < c_n; ++i)
        ASSERT_NEAR(g[i], c[i], FLT_EPSILON * (std::abs(c[i]) + 1e-9 * m)) << i;
    }
    {
      const auto g = from_gpu(dgamma.gpu, c_n), c = from_cpu(dgamma.cpu, c_n);
      for (std::size_t i = 0; i < c_n; ++i)
        ASSERT_NEAR(g[i], c[i], FLT_EPSILON * (std::abs(c[i]) + 1e-9 * m)) << i;
    }
    {
      const auto g = from_gpu(dx.gpu, total), c = from_cpu(dx.cpu, total);
      for (std::size_t i = 0; i < total; ++i)
        ASSERT_NEAR(g[i], c[i], 1e-5 * (std::abs(c[i]) + 1)) << "dx at " << i;
    }
  }
}

// --- training -------------------------------------------------------------------------------

bool have_digits() {
  return std::filesystem::exists("data/digits.csv.gz");
}

scheduler::job_spec digits_spec() {
  auto spec = scheduler::load_job_spec("examples/digits-mlp.yaml");
  EXPECT_TRUE(spec) << (spec ? "" : spec.error().to_string());
  return spec ? *spec : scheduler::job_spec{};
}

struct plain_run {
  double first_epoch_loss = 0;
  double last_epoch_loss = 0;
  double test_accuracy = 0;
};

/// Trains `spec` on one backend in a plain loop (train_bench's reference loop: forward/backward,
/// then the optimizer over the whole vector), over the dispenser's shuffled chunks.
plain_run train_plain(backend& be, const scheduler::job_spec& spec,
                      const worker::dataset_pair& data) {
  const auto model = worker::network::for_data(spec.model, data.train).value();
  const std::size_t n = model.num_params();
  std::vector<float> host(n);
  model.init_params(host, spec.seed);
  float* w = be.alloc(n);
  float* g = be.alloc(n);
  float* m = be.alloc(n);
  float* v = be.alloc(n);
  be.upload(w, host.data(), n);
  plain_run out;
  {
    worker::network_runner run(model, be, spec.batch_size);
    master::chunk_dispenser d(data.train.rows, std::size_t(spec.batch_size), spec.seed);
    std::int64_t t = 0;
    for (int epoch = 0; epoch < spec.epochs; ++epoch) {
      d.begin_epoch(std::uint32_t(epoch));
      double loss = 0;
      while (auto c = d.take()) {
        const auto idx = d.indices(*c);
        loss += run.forward_backward(w, data.train, idx, g);
        const float scale = 1.0f / float(idx.size());
        switch (spec.optimizer.kind) {
          case ps::optimizer_kind::sgd: {
            auto o = spec.optimizer.sgd;
            o.momentum = 0;
            be.sgd_update(w, nullptr, g, n, scale, o);
            break;
          }
          case ps::optimizer_kind::momentum:
            be.sgd_update(w, m, g, n, scale, spec.optimizer.sgd);
            break;
          case ps::optimizer_kind::adam:
            be.adam_update(w, m, v, g, n, scale, ++t, spec.optimizer.adam);
            break;
        }
        d.complete(*c);
      }
      if (epoch == 0) out.first_epoch_loss = loss;
      out.last_epoch_loss = loss;
    }
    out.test_accuracy = run.evaluate(w, data.test).accuracy();
  }
  for (float* p : {w, g, m, v}) be.free(p);
  return out;
}

TEST_F(cuda_vs_cpu, mlp_gradient_on_digits_matches_cpu) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  const auto spec = digits_spec();
  auto data = worker::load_dataset(spec.dataset, spec.seed);
  ASSERT_TRUE(data) << data.error().to_string();
  const auto model = worker::network::for_data(spec.model, data->train).value();
  const std::size_t n = model.num_params();
  std::vector<float> params(n);
  model.init_params(params, spec.seed);
  for (std::size_t i = 0; i < n; ++i) params[i] += 0.01f * float(i % 7);  // non-zero biases
  auto w = both(params);
  auto g = both(std::vector<float>(n, nan_f));
  worker::network_runner on_gpu(model, *gpu_, spec.batch_size);
  worker::network_runner on_cpu(model, cpu_, spec.batch_size);
  std::vector<std::uint32_t> idx(std::size_t(spec.batch_size));
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = std::uint32_t(i * 11 % data->train.rows);
  const double gpu_loss = on_gpu.forward_backward(w.gpu, data->train, idx, g.gpu);
  const double cpu_loss = on_cpu.forward_backward(w.cpu, data->train, idx, g.cpu);
  EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 * cpu_loss);
  const auto gg = from_gpu(g.gpu, n);
  const auto cg = from_cpu(g.cpu, n);
  double largest = 0;
  for (float x : cg) largest = std::max(largest, double(std::abs(x)));
  ASSERT_GT(largest, 0.0);
  // GEMMs of depth <= 64 in float: a wrong transpose or offset would be off by O(largest).
  for (std::size_t i = 0; i < n; ++i) ASSERT_NEAR(gg[i], cg[i], 1e-4 * largest) << "param " << i;
  // Evaluation over the whole test set: the same predictions and loss.
  const auto ge = on_gpu.evaluate(w.gpu, data->test);
  const auto ce = on_cpu.evaluate(w.cpu, data->test);
  EXPECT_EQ(ge.total, ce.total);
  EXPECT_NEAR(double(ge.correct), double(ce.correct), 2.0);  // near-ties may flip
  EXPECT_NEAR(ge.loss_sum, ce.loss_sum, 1e-5 * ce.loss_sum);
}

TEST_F(cuda_vs_cpu, plain_training_on_digits_reaches_the_cpu_accuracy) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  const auto spec = digits_spec();
  auto data = worker::load_dataset(spec.dataset, spec.seed);
  ASSERT_TRUE(data) << data.error().to_string();
  const auto cpu = train_plain(cpu_, spec, *data);
  const auto gpu = train_plain(*gpu_, spec, *data);
  EXPECT_GE(cpu.test_accuracy, 0.95);
  EXPECT_GE(gpu.test_accuracy, 0.95);
  // The same steps in the same order: only rounding separates the runs.
  EXPECT_NEAR(gpu.test_accuracy, cpu.test_accuracy, 0.02);
  EXPECT_LT(gpu.last_epoch_loss, 0.25 * gpu.first_epoch_loss);
  EXPECT_NEAR(gpu.first_epoch_loss, cpu.first_epoch_loss, 1e-3 * cpu.first_epoch_loss);
}

/// Trains digits on `workers` cuda workers and 2 shards through the embedded cluster: every
/// epoch sees every sample, and the cpu run's accuracy is reached.
void expect_digits_on_cuda_workers(std::uint32_t workers, bool host_reduce) {
  auto spec = digits_spec();
  spec.host_reduce = host_reduce;
  actors::train_options opt;
  opt.workers = workers;
  opt.shards = 2;
  opt.backend = backend_kind::cuda;
  auto r = actors::train_embedded(spec, opt);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->backend, "cuda");
  ASSERT_EQ(r->epochs.size(), std::size_t(spec.epochs));
  for (const auto& e : r->epochs) EXPECT_EQ(e.samples, 1438u) << "epoch " << e.epoch;
  EXPECT_GE(r->test_accuracy, 0.95);
  EXPECT_LT(r->epochs.back().train_loss, r->epochs.front().train_loss);
}

TEST_F(cuda_vs_cpu, embedded_cluster_trains_digits_on_cuda_workers) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  expect_digits_on_cuda_workers(2, false);
}

TEST_F(cuda_vs_cpu, embedded_cluster_trains_digits_at_bf16_to_the_fp32_accuracy) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  auto spec = digits_spec();
  actors::train_options opt;
  opt.workers = 2;
  opt.shards = 2;
  opt.backend = backend_kind::cuda;
  auto full = actors::train_embedded(spec, opt);
  ASSERT_TRUE(full) << full.error().to_string();
  opt.precision = math_precision::bf16;
  auto low = actors::train_embedded(spec, opt);
  ASSERT_TRUE(low) << low.error().to_string();
  EXPECT_GE(low->test_accuracy, 0.95);
  EXPECT_NEAR(low->test_accuracy, full->test_accuracy, 0.02);
  // The rounding shows in the losses, a little: bf16 products are not the fp32 run's.
  EXPECT_NE(low->epochs.front().train_loss, full->epochs.front().train_loss);
  EXPECT_NEAR(low->epochs.front().train_loss, full->epochs.front().train_loss,
              0.02 * full->epochs.front().train_loss);
}

TEST_F(cuda_vs_cpu, embedded_cluster_reduces_three_cuda_workers_on_the_device) {
  if (!have_digits()) GTEST_SKIP() << "data/digits.csv.gz missing: run scripts/setup.sh";
  // host_reduce on cuda: the workers' gradients summed on the device(s) and all-reduced with
  // NCCL (worker::device_reducer), one download, one push per shard. (That this path, not the
  // host-memory one, ran is shown by the reducer's own test below, not here.)
  expect_digits_on_cuda_workers(3, true);
}

// --- NCCL -----------------------------------------------------------------------------------

#ifdef COACH_HAVE_CUDA

/// Skips unless NCCL is built in and `ranks` devices are visible.
std::string nccl_skip_reason(int ranks) {
  if (auto why = no_device_reason(); !why.empty()) return why;
  if (!nccl_group::available()) return "this build has no NCCL (see kernels/CMakeLists.txt)";
  if (cuda_device_count() < ranks)
    return "needs " + std::to_string(ranks) + " CUDA devices, " +
           std::to_string(cuda_device_count()) + " visible";
  return "";
}

/// Backends on devices 0..ranks-1 and their gradient-like buffers: rank r holds r + 1 + i % 5
/// (small integers: every sum is exact in float).
struct nccl_fixture {
  std::vector<std::unique_ptr<cuda_backend>> backends;
  std::vector<float*> bufs;
  std::size_t n = 0;

  void make(int ranks, std::size_t floats) {
    n = floats;
    for (int r = 0; r < ranks; ++r) {
      auto be = cuda_backend::make(r);
      ASSERT_TRUE(be) << be.error().to_string();
      std::vector<float> host(n);
      for (std::size_t i = 0; i < n; ++i) host[i] = float(r + 1) + float(i % 5);
      bufs.push_back((*be)->alloc(n));
      (*be)->upload(bufs.back(), host.data(), n);
      backends.push_back(std::move(*be));
    }
  }
  /// Asserts every rank's buffer holds the sum over ranks.
  void expect_sums() {
    const int ranks = int(backends.size());
    const float rank_sum = float(ranks * (ranks + 1) / 2);
    for (int r = 0; r < ranks; ++r) {
      std::vector<float> host(n);
      backends[std::size_t(r)]->download(host.data(), bufs[std::size_t(r)], n);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(host[i], rank_sum + float(ranks) * float(i % 5)) << "rank " << r << " at " << i;
    }
  }
  ~nccl_fixture() {
    for (std::size_t r = 0; r < backends.size(); ++r) backends[r]->free(bufs[r]);
  }
};

TEST(nccl_group_test, one_rank_on_a_single_gpu_takes_the_same_path) {
  if (auto why = nccl_skip_reason(1); !why.empty()) GTEST_SKIP() << why;
  const std::vector<int> devices{0};
  auto group = nccl_group::make(devices);
  ASSERT_TRUE(group) << group.error().to_string();
  EXPECT_EQ((*group)->size(), 1);
  EXPECT_EQ((*group)->device(0), 0);
  nccl_fixture f;
  ASSERT_NO_FATAL_FAILURE(f.make(1, 1000003));
  // The gradient comes from work on the backend's stream; the all-reduce is ordered after it.
  f.backends[0]->scale(f.n, 1.0f, f.bufs[0]);
  (*group)->all_reduce_sum(0, f.bufs[0], f.n, f.backends[0]->stream());
  f.expect_sums();
  std::vector<float*> bufs{f.bufs[0]};
  std::vector<CUstream_st*> streams{f.backends[0]->stream()};
  (*group)->all_reduce_sum_all(bufs, f.n, streams);
  f.expect_sums();
  (*group)->all_reduce_sum(0, f.bufs[0], 0, f.backends[0]->stream());  // n == 0: nothing
}

TEST(nccl_group_test, all_visible_devices_sum_from_one_thread_each_and_from_one_thread) {
  const int ranks = cuda_device_present() ? cuda_device_count() : 2;
  if (auto why = nccl_skip_reason(std::max(ranks, 2)); !why.empty()) GTEST_SKIP() << why;
  std::vector<int> devices;
  for (int r = 0; r < ranks; ++r) devices.push_back(r);
  auto group = nccl_group::make(devices);
  ASSERT_TRUE(group) << group.error().to_string();
  ASSERT_EQ((*group)->size(), ranks);
  {
    // One thread per rank, as one worker per device calls it.
    nccl_fixture f;
    ASSERT_NO_FATAL_FAILURE(f.make(ranks, 777777));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] {
        (*group)->all_reduce_sum(r, f.bufs[std::size_t(r)], f.n,
                                 f.backends[std::size_t(r)]->stream());
        f.backends[std::size_t(r)]->synchronize();
      });
    for (auto& t : threads) t.join();
    f.expect_sums();
  }
  {
    nccl_fixture f;
    ASSERT_NO_FATAL_FAILURE(f.make(ranks, 4099));
    std::vector<CUstream_st*> streams;
    for (auto& be : f.backends) streams.push_back(be->stream());
    (*group)->all_reduce_sum_all(f.bufs, f.n, streams);
    f.expect_sums();
  }
}

TEST(nccl_group_test, device_reduction_with_one_rank_equals_host_reduction_bit_for_bit) {
  if (auto why = nccl_skip_reason(1); !why.empty()) GTEST_SKIP() << why;
  // Three workers on the one GPU: summed on it in rank order, then the NCCL all-reduce of one
  // rank, then one download. The same bits as worker::host_reducer on the cpu.
  const std::size_t n = 300007;
  worker::device_reducer red(
      n, [](int d) { return make_backend(backend_kind::cuda, d); },
      [](std::span<backend* const> ranks) { return make_device_all_reduce(ranks); });
  const std::vector<std::uint32_t> members = {0, 1, 2};
  std::vector<std::unique_ptr<cuda_backend>> be;
  std::vector<float*> grad;
  for (int r = 0; r < 3; ++r) {
    auto made = cuda_backend::make(0);
    ASSERT_TRUE(made) << made.error().to_string();
    grad.push_back((*made)->alloc(n));
    be.push_back(std::move(*made));
  }
  for (std::int64_t step = 0; step < 3; ++step) {
    worker::host_reducer host(n);
    std::shared_ptr<const float_buffer> expected;
    result<worker::device_reducer::outcome> out;
    for (std::uint32_t r : {2u, 0u, 1u}) {
      // Magnitudes that round differently, so the order of the sum shows in the bits.
      auto g = random_floats(n, 100 * std::uint32_t(step) + r, -1.0f, 1.0f);
      for (std::size_t i = 0; i < n; i += 3) g[i] *= float(1 << (i % 11));
      be[r]->upload(grad[r], g.data(), n);
      out = red.deposit(step, members, r, 7 + r, *be[r], grad[r]);
      ASSERT_TRUE(out) << out.error().to_string();
      auto h = host.deposit(step, members, r, 7 + r, std::make_shared<const float_buffer>(g));
      ASSERT_TRUE(h) << h.error().to_string();
      if (h->complete) expected = h->sum;
    }
    ASSERT_TRUE(out->complete);
    EXPECT_EQ(out->leader, 0u);
    EXPECT_EQ(out->samples, 7u + 8u + 9u);
    ASSERT_TRUE(out->sum && expected);
    EXPECT_EQ(0, std::memcmp(out->sum->data(), expected->data(), n * sizeof(float)))
        << "step " << step;
  }
  EXPECT_EQ(red.all_reduces(), 3u);
  for (int r = 0; r < 3; ++r) be[std::size_t(r)]->free(grad[std::size_t(r)]);
}

#endif  // COACH_HAVE_CUDA

}  // namespace
}  // namespace coach::kernels
