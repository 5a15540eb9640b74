#pragma once
// Runs the `coach` program as a user does, for the integration tests of the command line.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace coach::testing {

struct run_result {
  int code = -1;
  std::string output;  ///< stdout and stderr together (stdout only with stdout_only)
};

/// `coach ARGS`, waited for.
inline run_result run_coach(const std::string& args, bool stdout_only = false) {
  const std::string cmd = std::string(COACH_BINARY_DIR) + "/apps/coach " + args +
                          (stdout_only ? " 2>/dev/null" : " 2>&1");
  run_result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// A file `name` holding `text` in this process's temporary directory.
inline std::filesystem::path temp_file(const std::string& name, const std::string& text) {
  auto dir = std::filesystem::temp_directory_path() / ("coach-cli-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace coach::testing
