// kernels' backend factory in a build without CUDA: the cuda backend is refused with the reason
// and how to get it, and auto falls back to the cpu. tests/CMakeLists.txt compiles the kernels
// again for this binary without CUDA, so a CUDA build (CI's) runs it too.
#include <gtest/gtest.h>

#include <string>

#include "kernels/backend.hpp"

namespace coach::kernels {
namespace {

#ifdef COACH_HAVE_CUDA
#error "backend_factory_test must be compiled without COACH_HAVE_CUDA"
#endif

TEST(backend_factory_without_cuda, refuses_cuda_saying_how_to_get_it_and_auto_is_the_cpu) {
  EXPECT_EQ(compiled_backends(), "cpu");
  EXPECT_FALSE(cuda_device_present());
  EXPECT_EQ(device_count(), 0);
  auto cuda = make_backend(backend_kind::cuda);
  ASSERT_FALSE(cuda);
  EXPECT_EQ(cuda.error().code, errc::unsupported);
  EXPECT_EQ(cuda.error().message,
            "this build has no CUDA backend (configure with COACH_ENABLE_CUDA=ON on a host with "
            "the CUDA toolkit)");
  auto any = make_backend(backend_kind::auto_select);
  ASSERT_TRUE(any) << any.error().to_string();
  EXPECT_EQ((*any)->name(), "cpu");
}

}  // namespace
}  // namespace coach::kernels
