#include "common/writable.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/format.hpp"

namespace coach {

std::optional<std::string> unwritable(std::string_view what, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec))
    return coach::format("{} {}: is a directory; give a file name", what, path);
  if (fs::exists(p, ec)) {
    if (::access(path.c_str(), W_OK) != 0)
      return coach::format("{} {}: cannot write it ({})", what, path, std::strerror(errno));
    return std::nullopt;
  }
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    return coach::format("{} {}: no directory {}", what, path, dir.string());
  if (::access(dir.c_str(), W_OK) != 0)
    return coach::format("{} {}: cannot write in {} ({})", what, path, dir.string(),
                         std::strerror(errno));
  return std::nullopt;
}

}  // namespace coach
