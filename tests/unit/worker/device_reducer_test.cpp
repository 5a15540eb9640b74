// worker::device_reducer: host reduction of gradients held in backend memory. Driven here with
// cpu backends (and cpu backends that report device numbers, with an all-reduce in host memory,
// for the grouping by device); cuda_backend_test runs the same sums on a GPU with NCCL.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"
#include "worker/device_reducer.hpp"
#include "worker/host_reducer.hpp"

namespace coach::worker {
namespace {

constexpr std::size_t n = 1000;

std::vector<float> gradient(std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen) * float(1 << (seed % 7));  // magnitudes that round differently
  return v;
}

/// A cpu backend that says its memory is on device `d` (host memory all the same).
class fake_device final : public kernels::cpu_backend {
 public:
  explicit fake_device(int d) : d_(d) {}
  int device() const noexcept override { return d_; }

 private:
  int d_;
};

/// Sums host buffers in order into each, as NCCL's all-reduce leaves every rank's buffer.
class host_all_reduce final : public kernels::device_all_reduce {
 public:
  explicit host_all_reduce(int* calls) : calls_(calls) {}
  void sum(std::span<float* const> bufs, std::size_t len) override {
    ++*calls_;
    std::vector<float> total(bufs[0], bufs[0] + len);
    for (std::size_t b = 1; b < bufs.size(); ++b)
      for (std::size_t i = 0; i < len; ++i) total[i] += bufs[b][i];
    for (auto* buf : bufs) std::copy(total.begin(), total.end(), buf);
  }

 private:
  int* calls_;
};

device_reducer cpu_reducer() {
  return device_reducer(
      n, [](int) { return kernels::make_backend(kernels::backend_kind::cpu); }, nullptr);
}

TEST(device_reducer, equals_host_reducer_bit_for_bit_in_every_deposit_order) {
  const std::vector<std::uint32_t> members = {0, 1, 2};
  std::vector<std::vector<float>> g = {gradient(1), gradient(2), gradient(3)};
  host_reducer host(n);
  host_reducer::outcome expected;
  for (std::uint32_t r = 0; r < 3; ++r) {
    auto out = host.deposit(0, members, r, 10 + r, std::make_shared<const float_buffer>(g[r]));
    ASSERT_TRUE(out);
    if (out->complete) expected = *out;
  }
  ASSERT_TRUE(expected.sum);
  std::vector<std::uint32_t> order = {0, 1, 2};
  std::int64_t step = 0;
  do {
    auto red = cpu_reducer();
    std::vector<std::unique_ptr<kernels::cpu_backend>> be;
    for (int i = 0; i < 3; ++i) be.push_back(std::make_unique<kernels::cpu_backend>());
    for (std::size_t i = 0; i < order.size(); ++i) {
      const std::uint32_t r = order[i];
      auto mine = g[r];
      auto out = red.deposit(step, members, r, 10 + r, *be[r], mine.data());
      ASSERT_TRUE(out) << out.error().message;
      // The worker may overwrite its gradient as soon as the deposit returns.
      std::fill(mine.begin(), mine.end(), 1e30f);
      EXPECT_EQ(out->leader, 0u);
      EXPECT_EQ(out->complete, i + 1 == order.size());
      if (!out->complete) continue;
      EXPECT_EQ(out->samples, expected.samples);
      ASSERT_TRUE(out->sum);
      EXPECT_EQ(0, std::memcmp(out->sum->data(), expected.sum->data(), n * sizeof(float)))
          << "order " << order[0] << order[1] << order[2];
    }
    EXPECT_EQ(red.open_steps(), 0u);
    EXPECT_EQ(red.all_reduces(), 0u);  // no devices, no all-reduce
    ++step;
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(device_reducer, members_without_samples_are_waited_for_and_add_nothing) {
  auto red = cpu_reducer();
  kernels::cpu_backend be;
  const std::vector<std::uint32_t> members = {4, 7};
  auto g = gradient(9);
  auto first = red.deposit(3, members, 7, 0, be, nullptr);
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->complete);
  EXPECT_EQ(first->leader, 4u);
  auto second = red.deposit(3, members, 4, 5, be, g.data());
  ASSERT_TRUE(second);
  ASSERT_TRUE(second->complete);
  EXPECT_EQ(second->samples, 5u);
  ASSERT_TRUE(second->sum);
  EXPECT_EQ(0, std::memcmp(second->sum->data(), g.data(), n * sizeof(float)));

  // No member with samples: complete, nothing to push.
  auto a = red.deposit(4, members, 4, 0, be, nullptr);
  auto b = red.deposit(4, members, 7, 0, be, nullptr);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(b->complete);
  EXPECT_EQ(b->samples, 0u);
  EXPECT_FALSE(b->sum);
}

TEST(device_reducer, bad_deposits_are_refused_with_the_reason) {
  auto red = cpu_reducer();
  kernels::cpu_backend be;
  const std::vector<std::uint32_t> members = {0, 1};
  auto g = gradient(4);
  auto stranger = red.deposit(0, members, 2, 1, be, g.data());
  ASSERT_FALSE(stranger);
  EXPECT_EQ(stranger.error().message, "host reduction: rank 2 is not a local member of step 0");
  auto none = red.deposit(0, members, 0, 3, be, nullptr);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().message, "host reduction: rank 0 deposits 3 samples but no gradient");
  ASSERT_TRUE(red.deposit(0, members, 0, 1, be, g.data()));
  auto twice = red.deposit(0, members, 0, 1, be, g.data());
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().message, "host reduction: rank 0 deposits step 0 twice");
  EXPECT_EQ(red.open_steps(), 1u);  // the first deposit still waits for rank 1
}

TEST(device_reducer, sums_per_device_in_rank_order_then_all_reduces_across_devices) {
  // Ranks 0 and 2 on device 0, ranks 1 and 3 on device 1.
  int calls = 0;
  std::vector<int> made;
  device_reducer red(
      n,
      [&made](int d) -> result<std::unique_ptr<kernels::backend>> {
        made.push_back(d);
        return std::unique_ptr<kernels::backend>(std::make_unique<fake_device>(d));
      },
      [&calls](std::span<kernels::backend* const> ranks)
          -> result<std::unique_ptr<kernels::device_all_reduce>> {
        EXPECT_EQ(ranks.size(), 2u);
        EXPECT_EQ(ranks[0]->device(), 0);
        EXPECT_EQ(ranks[1]->device(), 1);
        return std::unique_ptr<kernels::device_all_reduce>(
            std::make_unique<host_all_reduce>(&calls));
      });
  fake_device d0(0), d1(1);
  const std::vector<std::uint32_t> members = {0, 1, 2, 3};
  std::vector<std::vector<float>> g = {gradient(1), gradient(2), gradient(3), gradient(4)};
  std::vector<float> expected(n);
  for (std::size_t i = 0; i < n; ++i) expected[i] = (g[0][i] + g[2][i]) + (g[1][i] + g[3][i]);
  for (std::int64_t step = 0; step < 3; ++step) {
    result<device_reducer::outcome> out;
    for (std::uint32_t r : {3u, 0u, 2u, 1u})
      out = red.deposit(step, members, r, 1, r % 2 ? d1 : d0, g[r].data());
    ASSERT_TRUE(out) << out.error().message;
    ASSERT_TRUE(out->complete);
    EXPECT_EQ(out->samples, 4u);
    ASSERT_TRUE(out->sum);
    EXPECT_EQ(0, std::memcmp(out->sum->data(), expected.data(), n * sizeof(float)))
        << "step " << step;
  }
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(red.all_reduces(), 3u);
  EXPECT_EQ(made, (std::vector<int>{1, 0}));  // one backend per device, made once
}

TEST(device_reducer, gradients_on_several_devices_without_an_all_reduce_are_an_error) {
  device_reducer red(
      n,
      [](int d) -> result<std::unique_ptr<kernels::backend>> {
        return std::unique_ptr<kernels::backend>(std::make_unique<fake_device>(d));
      },
      nullptr);
  fake_device d0(0), d1(1);
  const std::vector<std::uint32_t> members = {0, 1};
  auto g = gradient(5);
  ASSERT_TRUE(red.deposit(0, members, 0, 1, d0, g.data()));
  auto out = red.deposit(0, members, 1, 1, d1, g.data());
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().message, "host reduction: gradients on 2 devices and no all-reduce");
  EXPECT_EQ(red.open_steps(), 0u);
}

TEST(device_reducer, a_device_without_a_backend_is_reported) {
  device_reducer red(
      n,
      [](int d) -> result<std::unique_ptr<kernels::backend>> {
        return fail(errc::unsupported, "device {} is gone", d);
      },
      nullptr);
  fake_device d3(3);
  const std::vector<std::uint32_t> members = {0};
  auto g = gradient(6);
  auto out = red.deposit(0, members, 0, 1, d3, g.data());
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().message, "host reduction: no backend on device 3: device 3 is gone");
}

}  // namespace
}  // namespace coach::worker
