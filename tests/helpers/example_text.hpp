#pragma once
// The text of an example spec for integration tests that write a copy of it elsewhere. Outside
// namespace coach, so that tests which call itest::coach(...) unqualified can include it.

#include <fstream>
#include <iterator>
#include <string>

namespace example_files {

/// examples/NAME as text, its relative data paths ("path: ../data/...") made absolute in the
/// source tree: a spec's relative paths mean its own folder, so a copy written elsewhere would
/// look for data beside itself.
inline std::string example_text(const std::string& name) {
  std::ifstream in(std::string(COACH_SOURCE_DIR) + "/examples/" + name);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string rel = "path: ../data/";
  for (auto at = text.find(rel); at != std::string::npos; at = text.find(rel, at + rel.size()))
    text.replace(at + 6, 3, std::string(COACH_SOURCE_DIR) + "/");
  return text;
}

}  // namespace example_files
