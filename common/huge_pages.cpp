#include "common/huge_pages.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace coach {

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

}  // namespace coach
