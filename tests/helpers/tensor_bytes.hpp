#pragma once
// The tensor bytes of a .safetensors file, after its header (whose metadata names the run): two
// runs that computed the same tensors give the same bytes, whatever else differs.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

// Not in namespace coach: the process tests name a function coach().
namespace test_files {

inline std::string tensor_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (all.size() < 8) return {};
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = header << 8 | std::uint8_t(all[std::size_t(i)]);
  return header + 8 <= all.size() ? all.substr(8 + header) : std::string{};
}

}  // namespace test_files
