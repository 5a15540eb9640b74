#include "common/huge_pages.hpp"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace coach {
namespace {

std::atomic<bool> g_keeping{false};
/// When warm_memory last ran (steady clock, nanoseconds since its epoch; 0: never).
std::atomic<std::int64_t> g_warmed_at{0};

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void use_huge_pages(char** argv) noexcept {
  const char* off = std::getenv("COACH_HUGE_PAGES");
  if (off && std::strcmp(off, "0") == 0) return;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::strstr(tunables, "glibc.malloc.hugetlb")) return;  // set (or chosen)
  std::string value = tunables && *tunables ? std::string(tunables) + ":" : std::string();
  value += "glibc.malloc.hugetlb=1";
  if (::setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // Not possible (no /proc, say): go on with ordinary pages.
}

bool keep_freed_memory() noexcept {
  const char* off = std::getenv("COACH_KEEP_MEMORY");
  if (off && std::strcmp(off, "0") == 0) return false;
  // Threads of other arenas would allocate large blocks with mmap whatever M_MMAP_MAX says
  // (glibc falls back to it when a block does not fit an arena's 64 MiB heaps): one arena.
  const bool ok = ::mallopt(M_ARENA_MAX, 1) == 1 && ::mallopt(M_MMAP_MAX, 0) == 1 &&
                  ::mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  g_keeping = ok;
  return ok;
}

std::size_t warm_memory(std::span<const std::size_t> blocks) noexcept {
  if (!g_keeping) return 0;
  g_warmed_at = now_ns();
  std::vector<void*> held;
  held.reserve(blocks.size());
  std::size_t bytes = 0;
  const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
  for (const auto n : blocks) {
    if (n == 0) continue;
    auto* p = static_cast<volatile char*>(std::malloc(n));
    if (!p) break;
    held.push_back(const_cast<char*>(p));
    // A write, not a read: a read maps the shared zero page and leaves the real fault for later.
    for (std::size_t i = 0; i < n; i += page) p[i] = 0;
    p[n - 1] = 0;
    bytes += n;
  }
  const bool all = held.size() == std::size_t(std::count_if(blocks.begin(), blocks.end(),
                                                            [](auto n) { return n > 0; }));
  for (auto* p : held) std::free(p);
  return all ? bytes : 0;
}

namespace {

/// Anonymous memory resident in this process (bytes): /proc/self/statm's resident less shared.
std::size_t resident_anonymous() noexcept {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, resident = 0, shared = 0;
  const int n = std::fscanf(f, "%lu %lu %lu", &size, &resident, &shared);
  std::fclose(f);
  if (n != 3 || resident < shared) return 0;
  return std::size_t(resident - shared) * std::size_t(::sysconf(_SC_PAGESIZE));
}

}  // namespace

std::size_t trim_freed_memory(std::size_t floor, double after_warm) noexcept {
  if (!g_keeping) return 0;
  const auto warmed = g_warmed_at.load();
  if (warmed != 0 && double(now_ns() - warmed) < after_warm * 1e9) return 0;
  // Free and resident: what the heap keeps mapped beyond what is in use (the heap's free bytes
  // count address space too, of which trimmed pages are no longer resident).
  const std::size_t used = ::mallinfo2().uordblks;
  const std::size_t before = resident_anonymous();
  if (before <= used || before - used <= std::max(floor, used)) return 0;
  ::malloc_trim(0);
  const std::size_t after = resident_anonymous();
  return before > after ? before - after : 0;
}

}  // namespace coach
