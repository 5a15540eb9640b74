#pragma once
// scheduler::own_cpu_meter: the CPU time that Coach's own processes on this host used, so that
// host_probe can tell the CPUs other programs take (a host's busy time minus Coach's) from those
// Coach's parts take (the scheduler reserved those already). DESIGN.md, "Cluster view".
//
// Coach's processes are the node's own (PROC/self), every process whose name (comm) starts with
// "coach" (coach-node, the coach CLI, coach-invocation: every node on the host and their function
// invocations), every process named "exe" whose program (argv[0] of PROC/PID/cmdline, its last
// path component) starts with "coach" (coach-node and coach re-execute themselves through
// /proc/self/exe to turn on huge pages, common/huge_pages.cpp, which names them "exe"), and
// every descendant of one of those. The time of a process is its utime + stime
// (PROC/PID/stat, clock ticks, the unit of PROC/stat's cpu line). A sample counts, per process,
// the ticks since the previous sample (all of them for a process that was not there then); a
// process that ended between two samples loses its last ticks, which then read as another
// program's for one interval.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/error.hpp"

namespace coach::scheduler {

/// One process as PROC/PID/stat describes it.
struct process_times {
  int pid = 0;
  int ppid = 0;
  std::string comm;         ///< the name between the parentheses (at most 15 bytes on Linux)
  std::uint64_t ticks = 0;  ///< utime + stime
  /// The last path component of argv[0] (PROC/PID/cmdline), read only for a process named
  /// "exe" (one re-executed through /proc/self/exe); empty otherwise.
  std::string program = {};
};

/// Parses the text of PROC/PID/stat. The name may hold spaces and parentheses: it ends at the
/// last ')'. Errors: parse_error naming `path`.
result<process_times> parse_process_stat(std::string_view text, const std::string& path);

/// Every process under PROC_ROOT (its numeric directories) whose stat could be read and parsed,
/// with its program where it is named "exe"; one that ended while it was listed is skipped.
std::vector<process_times> list_processes(const std::string& proc_root);

/// The pids of `all` that are Coach's: `self`, those whose comm (or, for one named "exe", whose
/// program) starts with "coach", and their descendants.
std::unordered_set<int> coach_pids(const std::vector<process_times>& all, int self);

class own_cpu_meter {
 public:
  /// Reads PROC_ROOT; this process is PROC_ROOT/self (none, for a root without it).
  explicit own_cpu_meter(std::string proc_root);

  /// The ticks Coach's processes used since the previous sample; nullopt on the first.
  std::optional<std::uint64_t> sample();

 private:
  std::string proc_root_;
  int self_ = -1;
  bool first_ = true;
  std::unordered_map<int, std::uint64_t> previous_;  ///< pid -> ticks at the previous sample
};

}  // namespace coach::scheduler
