// kernels' backend factory and the CUDA plugin (kernels/cuda_plugin.hpp): without the plugin
// the cuda backend is refused with the reason and how to get it, and auto is the cpu; a build
// with CUDA finds its plugin beside the program. The plugin is looked for once per process, so
// each case runs in a child process of its own (a death test that exits 0).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/backend.hpp"

namespace coach::kernels {
namespace {

/// In the child: the backends, then make_backend(cuda)'s error (or "made"), and auto's name.
[[noreturn]] void report_and_exit() {
  auto cuda = make_backend(backend_kind::cuda);
  auto any = make_backend(backend_kind::auto_select);
  std::fprintf(stderr, "backends %s; cuda: %s; auto: %s; devices %d\n",
               std::string(compiled_backends()).c_str(),
               cuda ? "made" : cuda.error().message.c_str(),
               any ? std::string((*any)->name()).c_str() : "none", device_count());
  std::exit(cuda || cuda.error().code == errc::unsupported ? 0 : 1);
}

/// In the child, with COACH_CUDA_PLUGIN set to `plugin`: report_and_exit().
[[noreturn]] void with_plugin(const char* plugin) {
  ::setenv("COACH_CUDA_PLUGIN", plugin, 1);
  report_and_exit();
}

TEST(cuda_plugin, set_empty_it_is_off_and_auto_is_the_cpu) {
  EXPECT_EXIT(with_plugin(""), ::testing::ExitedWithCode(0),
              "^backends cpu; cuda: COACH_CUDA_PLUGIN is set empty: the CUDA backend is off; "
              "auto: cpu; devices 0\n$");
}

TEST(cuda_plugin, a_plugin_that_is_not_there_is_named_with_the_loaders_reason) {
  EXPECT_EXIT(with_plugin("/nonexistent/libcoach_cuda.so"), ::testing::ExitedWithCode(0),
              "^backends cpu; cuda: the CUDA backend /nonexistent/libcoach_cuda.so cannot be "
              "loaded: /nonexistent/libcoach_cuda.so: cannot open shared object file: No such "
              "file or directory; auto: cpu; devices 0\n$");
}

TEST(cuda_plugin, a_library_that_is_not_the_plugin_is_refused) {
  EXPECT_EXIT(with_plugin("libz.so.1"), ::testing::ExitedWithCode(0),
              "^backends cpu; cuda: libz.so.1 is not a Coach CUDA backend \\(no "
              "coach_cuda_plugin\\); auto: cpu; devices 0\n$");
}

TEST(cuda_plugin, the_default_finds_the_plugin_of_a_cuda_build_beside_the_program) {
#ifndef COACH_CUDA_PLUGIN_BUILT
  GTEST_SKIP() << "this build has no CUDA plugin (configured without COACH_ENABLE_CUDA)";
#else
  // Loaded from build/lib. Without a GPU (this machine) the backend is refused naming the
  // runtime's reason and auto is the cpu; on a GPU machine both are cuda.
  EXPECT_EXIT(
      {
        ::unsetenv("COACH_CUDA_PLUGIN");
        report_and_exit();
      },
      ::testing::ExitedWithCode(0),
      "^backends cpu,cuda; cuda: (made; auto: cuda; devices [1-9][0-9]*|no CUDA device .*; "
      "auto: cpu; devices 0)\n$");
#endif
}

}  // namespace
}  // namespace coach::kernels
