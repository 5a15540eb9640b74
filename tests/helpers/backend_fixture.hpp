#pragma once
// The fixture of the kernels::backend suite (tests/unit/kernels/kernels_*_test.cpp): one backend
// per test, each backend this build and host can make, with backend memory freed when the test
// ends; and what the op tests share: random inputs, central differences, the parameter names.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/cpu_gemm.hpp"

// Not coach::kernels::testing: the tests name gtest's ::testing unqualified from coach::kernels.
namespace coach::kernels::backend_testing {

inline constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();

/// Backends the parameterized suite runs on. The cuda backend joins this list once it is built
/// (COACH_HAVE_CUDA) and make_backend(backend_kind::cuda) returns one.
/// Every op's finite-difference and reference checks run on each backend this host can make
/// (cuda where a device is visible: the GPU machine).
/// The cpu backend runs once per matrix product this CPU has (Eigen's, and the AVX2/FMA kernel
/// where the CPU has AVX2 and FMA), since convolutions and dense layers go through it.
struct tested_backend {
  backend_kind kind;
  cpu_gemm gemm;  ///< for the cpu backend
  std::string name;
};

inline std::vector<tested_backend> tested_backends() {
  std::vector<tested_backend> out{{backend_kind::cpu, cpu_gemm::eigen, "cpu_eigen"}};
  if (detail::cpu_has_avx2_fma())
    out.push_back({backend_kind::cpu, cpu_gemm::avx2_fma, "cpu_avx2_fma"});
  if (detail::cpu_has_avx512f()) out.push_back({backend_kind::cpu, cpu_gemm::avx512, "cpu_avx512"});
  if (cuda_device_present()) out.push_back({backend_kind::cuda, cpu_gemm::best, "cuda"});
  return out;
}

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& x : out) x = dist(gen);
  return out;
}

struct gemm_case {
  int m, n, k;
  int pad_a, pad_b, pad_c;  ///< leading dimension minus stored row length
};

/// Fixture: one backend per test, and backend memory that is freed when the test ends.
class backend_test : public ::testing::TestWithParam<tested_backend> {
 protected:
  void SetUp() override {
    if (GetParam().kind == backend_kind::cpu) {
      be_ = std::make_unique<cpu_backend>(GetParam().gemm);
      return;
    }
    auto made = make_backend(GetParam().kind);
    ASSERT_TRUE(made) << made.error().to_string();
    be_ = std::move(*made);
  }

  void TearDown() override {
    for (float* p : owned_) be_->free(p);
    for (std::int32_t* p : owned_indices_) be_->free_indices(p);
  }

  /// Backend memory holding a copy of `host`.
  float* dev(const std::vector<float>& host) {
    float* p = be_->alloc(host.size());
    owned_.push_back(p);
    be_->upload(p, host.data(), host.size());
    return p;
  }

  /// Host copy of n floats of backend memory.
  std::vector<float> host(const float* p, std::size_t n) {
    std::vector<float> out(n);
    be_->download(out.data(), p, n);
    return out;
  }

  /// Backend memory for n int32 indices, filled with -7 (a value no op writes).
  std::int32_t* dev_indices(std::size_t n) {
    std::int32_t* p = be_->alloc_indices(n);
    owned_indices_.push_back(p);
    const std::vector<std::int32_t> fill(n, -7);
    std::vector<float> bits(n);
    std::memcpy(bits.data(), fill.data(), n * sizeof(float));
    be_->upload(reinterpret_cast<float*>(p), bits.data(), n);  // a byte copy either way
    return p;
  }

  /// Host copy of n int32 indices of backend memory.
  std::vector<std::int32_t> host_indices(const std::int32_t* p, std::size_t n) {
    const auto bits = host(reinterpret_cast<const float*>(p), n);
    std::vector<std::int32_t> out(n);
    std::memcpy(out.data(), bits.data(), n * sizeof(float));
    return out;
  }

  /// Runs one gemm against a double reference (defined with the gemm tests,
  /// kernels_dense_test.cpp).
  void check_gemm(bool ta, bool tb, const gemm_case& g, float alpha, float beta,
                  std::uint32_t seed);

  /// Checks `analytic` against central differences of `loss` at x0, element by element:
  /// |analytic[i] - fd[i]| <= abs_tol + rel_tol * |fd[i]|.
  void expect_matches_differences(const std::function<double(const std::vector<float>&)>& loss,
                                  const std::vector<float>& x0, const std::vector<float>& analytic,
                                  float h, double abs_tol, double rel_tol, const std::string& what);

  std::unique_ptr<backend> be_;
  std::vector<float*> owned_;
  std::vector<std::int32_t*> owned_indices_;
};

inline void backend_test::expect_matches_differences(
    const std::function<double(const std::vector<float>&)>& loss, const std::vector<float>& x0,
    const std::vector<float>& analytic, float h, double abs_tol, double rel_tol,
    const std::string& what) {
  ASSERT_EQ(analytic.size(), x0.size()) << what;
  for (std::size_t i = 0; i < x0.size(); ++i) {
    auto plus = x0, minus = x0;
    plus[i] += h;
    minus[i] -= h;
    const double fd = (loss(plus) - loss(minus)) / (double(plus[i]) - double(minus[i]));
    ASSERT_NEAR(analytic[i], fd, abs_tol + rel_tol * std::abs(fd)) << what << " at " << i;
  }
}

/// sum_i y[i] g[i] in double: the scalar loss whose gradient with respect to y is g.
inline double dot(const std::vector<float>& y, const std::vector<float>& g) {
  double acc = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) acc += double(y[i]) * double(g[i]);
  return acc;
}

/// The parameterized suite's names: all/backend_test.TEST/BACKEND.
inline std::string backend_name(const ::testing::TestParamInfo<tested_backend>& info) {
  return info.param.name;
}

}  // namespace coach::kernels::backend_testing
