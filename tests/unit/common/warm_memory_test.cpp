// The memory policy of a node (common/huge_pages.hpp): what a process frees stays mapped and is
// reused as it is, and memory touched ahead of time (warm_memory) serves later allocations of
// other threads without a page fault. Each test runs in a process of its own (ctest), and the
// policy is set before the test starts any thread, as a node does first thing in main.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/huge_pages.hpp"

namespace coach {
namespace {

constexpr std::size_t mib = std::size_t(1) << 20;

/// Page faults taken so far by the calling thread.
long faults_here() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt + u.ru_majflt;
}

/// On another thread: allocates `bytes`, writes every byte, and reports the faults that took.
long faults_to_fill(std::size_t bytes, void** where = nullptr, bool keep = false) {
  long faults = -1;
  std::thread([&] {
    const long before = faults_here();
    auto* p = static_cast<char*>(std::malloc(bytes));
    std::memset(p, 7, bytes);
    faults = faults_here() - before;
    if (where) *where = p;
    if (!keep) std::free(p);
  }).join();
  return faults;
}

bool policy_off() {
  const char* off = std::getenv("COACH_KEEP_MEMORY");
  return off && std::strcmp(off, "0") == 0;
}

TEST(warm_memory, warms_nothing_where_freed_memory_would_go_back_to_the_kernel) {
  // First (a run of the whole binary sets the policy in the tests after this one). No
  // keep_freed_memory() in this process yet: the pages would be unmapped on free, so touching
  // them would cost the time and keep nothing.
  const std::size_t blocks[] = {8 * mib};
  EXPECT_EQ(warm_memory(blocks), 0u);
}

TEST(warm_memory, warmed_memory_serves_another_threads_allocation_without_faults) {
  if (policy_off()) GTEST_SKIP() << "COACH_KEEP_MEMORY=0 turns the policy off";
  ASSERT_TRUE(keep_freed_memory());
  // 64 MiB are 16384 pages of 4 KiB (32 huge pages): written fresh, each faults once.
  std::size_t warmed = 0;
  const std::size_t blocks[] = {64 * mib, 32 * mib};
  std::thread([&] { warmed = warm_memory(blocks); }).join();
  EXPECT_EQ(warmed, 96 * mib);
  // Two buffers alive at once, as a shard's values and a push beside them.
  void* first = nullptr;
  EXPECT_LT(faults_to_fill(64 * mib, &first, true), 16)
      << "the warmed pages were given back to the kernel";
  EXPECT_LT(faults_to_fill(32 * mib), 16);
  std::free(first);
}

TEST(warm_memory, a_freed_buffer_is_reused_as_it_is_not_mapped_again) {
  if (policy_off()) GTEST_SKIP() << "COACH_KEEP_MEMORY=0 turns the policy off";
  ASSERT_TRUE(keep_freed_memory());
  void* first = nullptr;
  void* second = nullptr;
  // Larger than anything the tests before it touched (96 MiB in one piece): at least some of it
  // is fresh memory, which faults in.
  const long cold = faults_to_fill(128 * mib, &first);
  EXPECT_GE(cold, 8) << "fresh memory faults its pages in";
  const long again = faults_to_fill(128 * mib, &second);
  EXPECT_EQ(second, first) << "the freed buffer is reused";
  EXPECT_LT(again, 16) << "reused without faulting its pages in again";
}

TEST(warm_memory, blocks_reuse_free_pieces_that_one_block_of_their_sum_could_not) {
  if (policy_off()) GTEST_SKIP() << "COACH_KEEP_MEMORY=0 turns the policy off";
  ASSERT_TRUE(keep_freed_memory());
  // Two 160 MiB buffers freed with a live allocation between them (larger than anything the
  // tests before touched): the heap holds 320 MiB of touched memory, in two pieces.
  void* a = nullptr;
  void* b = nullptr;
  faults_to_fill(160 * mib, &a, true);
  void* between = std::malloc(64);
  faults_to_fill(160 * mib, &b, true);
  std::free(a);
  std::free(b);
  long faults = -1;
  std::size_t warmed = 0;
  std::thread([&] {
    const long before = faults_here();
    const std::size_t blocks[] = {150 * mib, 150 * mib};
    warmed = warm_memory(blocks);
    faults = faults_here() - before;
  }).join();
  EXPECT_EQ(warmed, 300 * mib);
  EXPECT_LT(faults, 16) << "each block took a free piece; nothing new was faulted in";
  std::free(between);
}

}  // namespace
}  // namespace coach
