// A child for tests/unit/worker/bounded_process_test.cpp: does one thing its arguments say, then
// exits.
//   bounded_child exit N      exits with N
//   bounded_child sleep MS    sleeps MS milliseconds, then exits 0
//   bounded_child alloc MB    allocates and touches MB MiB, then exits 0; exits 3
//                             (worker::exit_out_of_memory) when an allocation fails
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const std::string mode = argv[1];
  const long n = std::atol(argv[2]);
  if (mode == "exit") return int(n);
  if (mode == "sleep") {
    std::this_thread::sleep_for(std::chrono::milliseconds(n));  // the child's "sleep" mode
    return 0;
  }
  if (mode == "alloc") {
    try {
      std::vector<std::vector<char>> blocks;
      for (long i = 0; i < n; ++i) {
        blocks.emplace_back(std::size_t(1) << 20);
        std::memset(blocks.back().data(), 1, blocks.back().size());
      }
      return 0;
    } catch (const std::bad_alloc&) {
      return 3;
    }
  }
  return 2;
}
