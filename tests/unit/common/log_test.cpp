// coach::log: a daemon's lines carry a timestamp, the level and the node's name; a command's
// read "coach: warning: ..."; lines below the chosen level are not written; a log file that
// cannot be opened is a clear error. The log is the process's: each test sets it up afresh.
#include "common/log.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using coach::log::level;

fs::path scratch(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("coach-log-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto p = dir / name;
  fs::remove(p);
  return p;
}

std::vector<std::string> lines_of(const fs::path& p) {
  coach::log::flush();
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(log, a_daemon_line_has_a_timestamp_the_level_and_the_node) {
  const auto file = scratch("daemon.log");
  ASSERT_TRUE(coach::log::init(
      {.node = "node-a", .min = level::info, .file = file.string(), .daemon = true}));
  coach::log::info("node '{}' joined (host {})", "node-b", 42);
  coach::log::debug("no actor {} on host {}", 7, 42);  // below info: not written
  coach::log::warn("a key file is world-readable");
  const auto lines = lines_of(file);
  ASSERT_EQ(lines.size(), 2u);
  const std::regex shape(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \[(info|warning)\] node-a: .*)");
  EXPECT_TRUE(std::regex_match(lines[0], shape)) << lines[0];
  EXPECT_NE(lines[0].find("[info] node-a: node 'node-b' joined (host 42)"), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find("[warning] node-a: a key file is world-readable"), std::string::npos)
      << lines[1];
}

TEST(log, debug_lines_appear_at_the_debug_level_and_a_file_is_appended_to) {
  const auto file = scratch("debug.log");
  std::ofstream(file) << "an earlier run's line\n";
  ASSERT_TRUE(
      coach::log::init({.node = "n", .min = level::debug, .file = file.string(), .daemon = true}));
  EXPECT_TRUE(coach::log::enabled(level::debug));
  EXPECT_FALSE(coach::log::enabled(level::trace));
  coach::log::debug("no actor {} on host {} (message {})", 7, 42, "params");
  coach::log::trace("not written");
  const auto lines = lines_of(file);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "an earlier run's line");
  EXPECT_NE(lines[1].find("[debug] n: no actor 7 on host 42 (message params)"), std::string::npos)
      << lines[1];
}

TEST(log, a_command_writes_plain_prefixed_lines) {
  const auto file = scratch("command.log");
  ASSERT_TRUE(coach::log::init({.program = "coach", .file = file.string()}));
  coach::log::info("job 1: from step {}: {} worker(s)", 338, 2);
  coach::log::warn("label column 0 holds {} distinct values", 1500);
  coach::log::error("cannot write {}", "out.json");
  const auto lines = lines_of(file);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "coach: job 1: from step 338: 2 worker(s)");
  EXPECT_EQ(lines[1], "coach: warning: label column 0 holds 1500 distinct values");
  EXPECT_EQ(lines[2], "coach: error: cannot write out.json");
}

TEST(log, off_writes_nothing_and_levels_parse_by_name) {
  const auto file = scratch("off.log");
  ASSERT_TRUE(coach::log::init({.min = level::off, .file = file.string(), .daemon = true}));
  coach::log::error("not written");
  EXPECT_TRUE(lines_of(file).empty());
  for (auto l : {level::trace, level::debug, level::info, level::warn, level::error, level::off})
    EXPECT_EQ(*coach::log::parse_level(coach::log::to_string(l)), l);
  auto bad = coach::log::parse_level("verbose");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "unknown log level 'verbose' (known: trace, debug, info, warn, error, off)");
}

TEST(log, a_log_file_that_cannot_be_opened_is_an_error_naming_it) {
  const auto missing = scratch("no-such-dir") / "coach.log";
  auto r = coach::log::init({.file = missing.string(), .daemon = true});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, coach::errc::io_error);
  EXPECT_EQ(r.error().message,
            "--log-file " + missing.string() + ": no directory " + missing.parent_path().string());
  EXPECT_FALSE(fs::exists(missing.parent_path())) << "no directory made";
  const auto dir = scratch("a-directory");
  fs::create_directories(dir);
  r = coach::log::init({.file = dir.string(), .daemon = true});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("cannot open it for appending (Is a directory)"),
            std::string::npos)
      << r.error().message;
}

}  // namespace
