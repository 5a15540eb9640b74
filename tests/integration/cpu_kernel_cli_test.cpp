// COACH_CPU_KERNEL as a user sets it for `coach train` (issue 42): a bad value is one line and
// exit 2 before anything runs, the chosen kernel is the line the job logs, and a small CNN trains
// to the same bits with the AVX2 and the AVX-512 kernel.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "kernels/cpu/cpu_backend.hpp"
#include "tests/helpers/run_coach.hpp"

namespace {

using coach::testing::run_coach;
using coach::testing::temp_file;

/// `coach ARGS` with COACH_CPU_KERNEL=kernel in its environment.
coach::testing::run_result with_kernel(const char* kernel, const std::string& args) {
  ::setenv("COACH_CPU_KERNEL", kernel, 1);
  auto r = run_coach(args);
  ::unsetenv("COACH_CPU_KERNEL");
  return r;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(cpu_kernel_cli, a_bad_value_is_one_line_and_exit_2) {
  auto r = with_kernel("fast", "train examples/digits-mlp.yaml");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "coach: COACH_CPU_KERNEL: 'fast' is not a CPU kernel (auto, avx512, avx2 or eigen)\n");
}

TEST(cpu_kernel_cli, a_kernel_this_cpu_lacks_is_one_line_and_exit_2) {
  const auto here = coach::kernels::this_cpu();
  if (here.avx512f) GTEST_SKIP() << "this CPU runs every kernel";
  auto r = with_kernel("avx512", "train examples/digits-mlp.yaml");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output, std::string("coach: COACH_CPU_KERNEL=avx512: this CPU has no AVX-512F (it "
                                  "runs ") +
                          (here.avx2_fma ? "avx2 and eigen" : "eigen") + ")\n");
}

TEST(cpu_kernel_cli, a_small_cnn_trains_to_the_same_bits_with_avx2_and_avx512) {
  if (!coach::kernels::this_cpu().avx512f) GTEST_SKIP() << "this CPU has no AVX-512F";
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no Fashion-MNIST";
  // The fashion CNN's layers (same-padded 5 x 5 convolutions: the columns packed from the image)
  // on 256 images, one epoch, one worker.
  const auto spec = temp_file("tiny-cnn.yaml", R"(name: tiny-cnn
dataset: {format: idx, path: /usr/share/datasets/fashion-mnist, train_limit: 256, test_limit: 64}
model:
  layers:
    - {type: conv2d, channels: 16, kernel: 5, padding: 2}
    - relu
    - {type: max_pool2d, kernel: 2}
    - {type: conv2d, channels: 32, kernel: 5, padding: 2}
    - relu
    - {type: max_pool2d, kernel: 2}
    - flatten
    - {type: dense, units: 32}
    - relu
    - dense
optimizer: {type: adam, learning_rate: 0.001}
batch_size: 32
epochs: 1
seed: 7
workers: {min: 1, max: 1, initial: 1}
shards: {min: 1, max: 1, initial: 1}
backend: cpu
)");
  const auto dir = spec.parent_path();
  std::string saved[2];
  const char* kernels[] = {"avx2", "avx512"};
  for (int i = 0; i < 2; ++i) {
    const auto out = dir / (std::string("tiny-cnn-") + kernels[i] + ".safetensors");
    auto r = with_kernel(kernels[i], "train " + spec.string() + " --save " + out.string());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string("workers on the cpu, ") + kernels[i] + " kernel"),
              std::string::npos)
        << r.output;
    saved[i] = slurp(out);
  }
  ASSERT_GT(saved[0].size(), 100000u);
  EXPECT_TRUE(saved[0] == saved[1]) << "the AVX2 and AVX-512 runs' parameters differ";
}

}  // namespace
