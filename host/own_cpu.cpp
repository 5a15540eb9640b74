#include "host/own_cpu.hpp"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/format.hpp"

namespace coach::scheduler {
namespace {

template <class T>
bool parse_int(std::string_view s, T& value) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  return ec == std::errc{} && end == s.data() + s.size();
}

std::unexpected<error> bad(const std::string& path, const std::string& why) {
  return fail(errc::parse_error, "{}: {}", path, why);
}

/// The last path component of argv[0] in the cmdline file at `path` ("" when unreadable).
std::string program_of(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string argv0;
  if (!in || !std::getline(in, argv0, '\0')) return {};
  const auto slash = argv0.rfind('/');
  return slash == std::string::npos ? argv0 : argv0.substr(slash + 1);
}

}  // namespace

result<process_times> parse_process_stat(std::string_view text, const std::string& path) {
  // PID (COMM) STATE PPID PGRP SESSION TTY TPGID FLAGS MINFLT CMINFLT MAJFLT CMAJFLT UTIME STIME
  const auto open = text.find(" (");
  const auto close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return bad(path, "no '(name)' field");
  process_times p;
  if (!parse_int(text.substr(0, open), p.pid)) return bad(path, "the pid is not a number");
  p.comm = std::string(text.substr(open + 2, close - open - 2));
  std::vector<std::string_view> fields;  // from STATE on
  auto rest = text.substr(close + 1);
  while (!rest.empty()) {
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\n')) rest.remove_prefix(1);
    if (rest.empty()) break;
    const auto end = rest.find_first_of(" \n");
    fields.push_back(rest.substr(0, end));
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end);
  }
  // STATE is fields[0], PPID fields[1], UTIME fields[11], STIME fields[12].
  if (fields.size() < 13)
    return bad(path, coach::format("{} fields after the name, expected 13+", fields.size()));
  std::uint64_t utime = 0, stime = 0;
  if (!parse_int(fields[1], p.ppid) || !parse_int(fields[11], utime) ||
      !parse_int(fields[12], stime))
    return bad(path, "ppid, utime or stime is not a number");
  p.ticks = utime + stime;
  return p;
}

std::vector<process_times> list_processes(const std::string& proc_root) {
  std::vector<process_times> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(proc_root, ec), end; !ec && it != end;
       it.increment(ec)) {
    const auto name = it->path().filename().string();
    int pid = 0;
    if (!parse_int(std::string_view(name), pid)) continue;
    const auto path = it->path() / "stat";
    std::ifstream in(path);
    if (!in) continue;  // it ended meanwhile
    std::stringstream text;
    text << in.rdbuf();
    auto p = parse_process_stat(text.str(), path.string());
    if (!p) continue;
    if (p->comm == "exe") p->program = program_of(it->path() / "cmdline");
    out.push_back(std::move(*p));
  }
  return out;
}

std::unordered_set<int> coach_pids(const std::vector<process_times>& all, int self) {
  std::unordered_map<int, std::vector<int>> children;
  std::vector<int> todo;
  for (const auto& p : all) {
    children[p.ppid].push_back(p.pid);
    if (p.pid == self || p.comm.starts_with("coach") || p.program.starts_with("coach"))
      todo.push_back(p.pid);
  }
  std::unordered_set<int> own;
  while (!todo.empty()) {
    const int pid = todo.back();
    todo.pop_back();
    if (!own.insert(pid).second) continue;
    if (auto c = children.find(pid); c != children.end())
      todo.insert(todo.end(), c->second.begin(), c->second.end());
  }
  return own;
}

own_cpu_meter::own_cpu_meter(std::string proc_root) : proc_root_(std::move(proc_root)) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink(proc_root_ + "/self", ec);
  if (!ec) parse_int(std::string_view(self.filename().string()), self_);
}

std::optional<std::uint64_t> own_cpu_meter::sample() {
  const auto all = list_processes(proc_root_);
  const auto own = coach_pids(all, self_);
  std::unordered_map<int, std::uint64_t> now;
  std::uint64_t used = 0;
  for (const auto& p : all) {
    if (!own.contains(p.pid)) continue;
    now[p.pid] = p.ticks;
    const auto before = previous_.find(p.pid);
    // A pid seen before with more ticks than now is another process that took its number.
    if (before == previous_.end() || before->second > p.ticks)
      used += p.ticks;
    else
      used += p.ticks - before->second;
  }
  previous_ = std::move(now);
  if (first_) {
    first_ = false;
    return std::nullopt;
  }
  return used;
}

}  // namespace coach::scheduler
