// scheduler::host_probe: exact CPU and memory figures from fake /proc files, clear errors naming
// the file for missing or malformed ones, sane figures from the real /proc, a busy thread seen as
// a busy core, GPU detection through nvidia-smi (a fake one here) and the --cpus/--gpus limits.

#include "host/host_probe.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_set>
#include <vector>

namespace coach::scheduler {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

::testing::AssertionResult has(const std::string& text, std::string_view part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

/// A temporary directory, removed with everything in it at the end of the test.
class temp_dir {
 public:
  temp_dir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("coach_host_probe_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, std::string_view text, bool executable = false) const {
    {
      std::ofstream out(path_ / name, std::ios::trunc);
      out << text;
    }
    if (executable) fs::permissions(path_ / name, fs::perms::owner_all);
  }

 private:
  fs::path path_;
};

/// /proc/stat of a 4-CPU host whose aggregate line holds the given counters (jiffies).
std::string stat_text(std::uint64_t user, std::uint64_t system, std::uint64_t idle,
                      std::uint64_t iowait, std::uint64_t steal = 0, std::uint64_t guest = 0) {
  return coach::format(
      "cpu  {} 0 {} {} {} 0 0 {} {} 0\n"
      "cpu0 1 0 1 1 0 0 0 0 0 0\ncpu1 1 0 1 1 0 0 0 0 0 0\n"
      "cpu2 1 0 1 1 0 0 0 0 0 0\ncpu3 1 0 1 1 0 0 0 0 0 0\n"
      "intr 12345 0 0\nctxt 999\nbtime 1700000000\nprocesses 77\n",
      user, system, idle, iowait, steal, guest);
}

constexpr std::string_view meminfo_text =
    "MemTotal:       16384000 kB\n"
    "MemFree:         1000000 kB\n"
    "MemAvailable:    8192000 kB\n"
    "Buffers:          100000 kB\n"
    "Cached:          4000000 kB\n"
    "HugePages_Total:       0\n";

/// A fake /proc with a 4-CPU host, 16 GB, load 0.50, and no GPU detection.
struct fake_proc : temp_dir {
  fake_proc() {
    write("stat", stat_text(100, 100, 800, 0));
    write("meminfo", meminfo_text);
    write("loadavg", "0.50 0.40 0.30 1/123 4567\n");
  }
  host_probe probe() const { return host_probe(path().string(), nullptr); }
};

TEST(host_probe, first_sample_estimates_free_cpus_from_the_load_average) {
  fake_proc proc;
  auto probe = proc.probe();
  auto r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->cpus_total, 4u);
  EXPECT_DOUBLE_EQ(r->load1, 0.5);
  EXPECT_DOUBLE_EQ(r->cpus_free, 3.5);
  EXPECT_EQ(r->memory_total, 16384000ull * 1024);
  EXPECT_EQ(r->memory_free, 8192000ull * 1024);
  EXPECT_TRUE(r->gpus_total.empty());
  EXPECT_TRUE(r->gpus_free.empty());
  EXPECT_TRUE(r->gpu_error.empty());
}

TEST(host_probe, a_load_above_the_cpu_count_means_no_free_cpu) {
  fake_proc proc;
  proc.write("loadavg", "9.75 3.00 1.00 5/123 4567\n");
  auto probe = proc.probe();
  auto r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_DOUBLE_EQ(r->cpus_free, 0.0);
}

TEST(host_probe, later_samples_measure_the_busy_share_between_samples) {
  fake_proc proc;
  auto probe = proc.probe();
  ASSERT_TRUE(probe.sample());
  // +100 user, +300 idle: a quarter of 4 CPUs busy.
  proc.write("stat", stat_text(200, 100, 1100, 0));
  auto r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_DOUBLE_EQ(r->cpus_free, 3.0);
  // +200 system, +100 iowait (idle), +100 steal (busy): 300 of 400 busy.
  proc.write("stat", stat_text(200, 300, 1100, 100, 100));
  r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_DOUBLE_EQ(r->cpus_free, 1.0);
  // Guest time is inside user already: +200 user of which 200 guest, +200 idle: half busy.
  proc.write("stat", stat_text(400, 300, 1300, 100, 100, 200));
  r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_DOUBLE_EQ(r->cpus_free, 2.0);
  // All busy.
  proc.write("stat", stat_text(800, 300, 1300, 100, 100, 200));
  r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_DOUBLE_EQ(r->cpus_free, 0.0);
}

/// PROC/PID/stat of a process NAME with parent PPID that used TICKS (utime + stime) so far.
std::string pid_stat(int pid, const std::string& name, int ppid, std::uint64_t ticks) {
  return coach::format("{} ({}) S {} {} {} 0 -1 4194560 100 0 0 0 {} {} 0 0 20 0 1 0 5 1000 10\n",
                       pid, name, ppid, pid, pid, ticks / 2, ticks - ticks / 2);
}

TEST(host_probe, cpus_other_programs_use_are_the_busy_time_less_coachs_own) {
  fake_proc proc;
  // This process (self, 10), a coach-node (20) with a child invocation (21, any name), and a
  // program that is not Coach's (30) whose child (31) is not either.
  const auto write_pids = [&](std::uint64_t self, std::uint64_t node, std::uint64_t child,
                              std::uint64_t other, std::uint64_t other_child) {
    for (auto [pid, name, ppid, ticks] :
         {std::tuple{10, "probe test", 1, self}, std::tuple{20, "coach-node", 1, node},
          std::tuple{21, "python3", 20, child}, std::tuple{30, "make (1)", 1, other},
          std::tuple{31, "cc1plus", 30, other_child}}) {
      fs::create_directories(proc.path() / std::to_string(pid));
      proc.write(std::to_string(pid) + "/stat", pid_stat(pid, name, ppid, ticks));
    }
  };
  fs::create_directory_symlink("10", proc.path() / "self");
  write_pids(5, 100, 50, 1000, 10);
  auto probe = proc.probe();
  auto r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_DOUBLE_EQ(r->cpus_external, 0) << "the first sample has no interval";
  // +300 busy of +400 (4 CPUs): Coach +100 (self 10, node 60, invocation 30), others +200.
  proc.write("stat", stat_text(400, 100, 900, 0));
  write_pids(15, 160, 80, 1150, 60);
  r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_DOUBLE_EQ(r->cpus_free, 1.0);
  EXPECT_DOUBLE_EQ(r->cpus_external, 2.0);
  // The program ends (its pids are gone) and Coach takes 2 CPUs: nothing external.
  fs::remove_all(proc.path() / "30");
  fs::remove_all(proc.path() / "31");
  proc.write("stat", stat_text(600, 100, 1100, 0));
  for (auto [pid, name, ppid, ticks] :
       {std::tuple{10, "probe test", 1, 15}, std::tuple{20, "coach-node", 1, 260},
        std::tuple{21, "python3", 20, 180}})
    proc.write(std::to_string(pid) + "/stat", pid_stat(pid, name, ppid, ticks));
  r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_DOUBLE_EQ(r->cpus_free, 2.0);
  EXPECT_DOUBLE_EQ(r->cpus_external, 2.0) << "the larger of the last two intervals'";
  // A sliver (0.2 CPU of 4) reads as none: the host's own hum.
  proc.write("stat", stat_text(620, 100, 1480, 0));
  r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_DOUBLE_EQ(r->cpus_external, 0.0) << "two intervals after the program ended";
  // 1.5 CPUs, then 0.5: the 1.5 holds one interval more.
  proc.write("stat", stat_text(770, 100, 1730, 0));
  EXPECT_DOUBLE_EQ(probe.sample()->cpus_external, 1.5);
  proc.write("stat", stat_text(820, 100, 2080, 0));
  EXPECT_DOUBLE_EQ(probe.sample()->cpus_external, 1.5);
  proc.write("stat", stat_text(870, 100, 2430, 0));
  EXPECT_DOUBLE_EQ(probe.sample()->cpus_external, 0.5);
}

TEST(host_probe, interrupts_softirqs_and_steal_are_no_other_programs_cpus) {
  // Issue 42: 4 nodes on one host exchanging a job's messages keep the kernel busy in softirqs
  // (loopback TCP) and a VM loses time to steal; neither ran a process, so neither is another
  // program's load (it read as 0.5-0.6 CPUs of OTHERS on every node after a job).
  fake_proc proc;
  fs::create_directory_symlink("10", proc.path() / "self");
  fs::create_directories(proc.path() / "10");
  proc.write("10/stat", pid_stat(10, "coach-node", 1, 0));
  const auto stat = [](std::uint64_t user, std::uint64_t system, std::uint64_t idle,
                       std::uint64_t irq, std::uint64_t softirq, std::uint64_t steal) {
    return coach::format(
        "cpu  {} 0 {} {} 0 {} {} {} 0 0\n"
        "cpu0 1 0 1 1 0 0 0 0 0 0\ncpu1 1 0 1 1 0 0 0 0 0 0\n"
        "cpu2 1 0 1 1 0 0 0 0 0 0\ncpu3 1 0 1 1 0 0 0 0 0 0\n",
        user, system, idle, irq, softirq, steal);
  };
  proc.write("stat", stat(0, 0, 1000, 0, 0, 0));
  auto probe = proc.probe();
  ASSERT_TRUE(probe.sample());
  // +400 jiffies: Coach's node ran 200 (user 150, system 50), softirq 60, irq 20, steal 40,
  // idle 80: 320 busy, all of it Coach's or the kernel's.
  proc.write("stat", stat(150, 50, 1080, 20, 60, 40));
  proc.write("10/stat", pid_stat(10, "coach-node", 1, 200));
  auto r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_DOUBLE_EQ(r->cpus_free, 0.8) << "steal and interrupts still take CPUs from the host";
  EXPECT_DOUBLE_EQ(r->cpus_external, 0.0);
  // +400: Coach 200 and another program 100 of the 300 processes ran, the kernel and steal 60.
  proc.write("stat", stat(400, 100, 1120, 30, 90, 60));
  proc.write("10/stat", pid_stat(10, "coach-node", 1, 400));
  r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_DOUBLE_EQ(r->cpus_external, 1.0) << "100 of 400 jiffies on 4 CPUs";
}

TEST(host_probe, the_limit_on_cpus_leaves_other_programs_the_cpus_it_does_not_advertise) {
  host_resources m;
  m.cpus_total = 16;
  m.cpus_free = 6;
  m.cpus_external = 10;
  auto r = apply_limits(m, 8, std::nullopt);
  EXPECT_EQ(r.cpus_total, 8u);
  EXPECT_DOUBLE_EQ(r.cpus_external, 2.0) << "10 busy: 8 on the CPUs not advertised, 2 on ours";
  m.cpus_external = 5;
  EXPECT_DOUBLE_EQ(apply_limits(m, 8, std::nullopt).cpus_external, 0.0);
  m.cpus_external = 3;
  EXPECT_DOUBLE_EQ(apply_limits(m, 32, std::nullopt).cpus_external, 3.0) << "oversubscribed";
}

TEST(own_cpu, a_process_name_may_hold_spaces_and_parentheses) {
  auto p = parse_process_stat(pid_stat(42, "a) (b c", 7, 99), "/proc/42/stat");
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(p->pid, 42);
  EXPECT_EQ(p->comm, "a) (b c");
  EXPECT_EQ(p->ppid, 7);
  EXPECT_EQ(p->ticks, 99u);
  for (const char* bad : {"", "42", "42 (x) S 1", "x (y) S 1 1 1 0 -1 0 0 0 0 0 1 2",
                          "42 (x) S 1 1 1 0 -1 0 0 0 0 0 one 2"}) {
    auto r = parse_process_stat(bad, "/proc/42/stat");
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, errc::parse_error) << bad;
    EXPECT_TRUE(has(r.error().message, "/proc/42/stat")) << r.error().message;
  }
}

TEST(own_cpu, coachs_processes_are_self_those_named_coach_and_their_descendants) {
  const std::vector<process_times> all{{1, 0, "init", 0},     {5, 1, "coach-node", 0},
                                       {6, 5, "worker", 0},   {7, 6, "grandchild", 0},
                                       {8, 1, "coach", 0},    {9, 1, "bash", 0},
                                       {10, 9, "my test", 0}, {11, 10, "helper", 0},
                                       {12, 9, "sleep", 0},   {13, 1, "coach-invocatio", 0}};
  const auto own = coach_pids(all, 10);
  EXPECT_EQ(own, (std::unordered_set<int>{5, 6, 7, 8, 10, 11, 13}));
}

TEST(own_cpu, a_coach_program_reexecuted_through_proc_self_exe_is_coachs) {
  // coach-node re-executes itself through /proc/self/exe (huge pages), which names it "exe":
  // on a host with 4 nodes each took the 3 others' CPUs for another program's (issue 42).
  temp_dir proc;
  const auto add = [&](int pid, const std::string& comm, int ppid, std::string_view cmdline) {
    fs::create_directories(proc.path() / std::to_string(pid));
    proc.write(std::to_string(pid) + "/stat", pid_stat(pid, comm, ppid, 7));
    proc.write(std::to_string(pid) + "/cmdline", std::string(cmdline));
  };
  using namespace std::string_view_literals;
  add(20, "exe", 1, "/opt/coach/build/apps/coach-node\0--listen\0tcp://127.0.0.1:7000\0"sv);
  add(21, "exe", 1, "coach\0status\0"sv);
  add(22, "exe", 1, "/usr/bin/python3\0coach-node\0"sv);
  add(23, "exe", 1, ""sv);  // a kernel thread's, or one that ended: no program
  add(24, "python3", 20, "python3\0script.py\0"sv);
  const auto all = list_processes(proc.path().string());
  ASSERT_EQ(all.size(), 5u);
  std::map<int, std::string> program;
  for (const auto& p : all) program[p.pid] = p.program;
  EXPECT_EQ(program[20], "coach-node");
  EXPECT_EQ(program[21], "coach");
  EXPECT_EQ(program[22], "python3");
  EXPECT_EQ(program[23], "");
  EXPECT_EQ(program[24], "") << "read only for a process named exe";
  EXPECT_EQ(coach_pids(all, -1), (std::unordered_set<int>{20, 21, 24}));
}

TEST(host_probe, busy_processes_outside_coachs_tree_count_as_another_programs) {
  host_probe probe("/proc", nullptr);
  ASSERT_TRUE(probe.sample());
  // A spinning process a core, each outside this one's tree (a grandchild whose parent exited:
  // init adopts it), named as this test is (not "coach...").
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  std::vector<pid_t> spinners;
  for (unsigned k = 0; k < cores; ++k) {
    const pid_t child = ::fork();
    if (child == 0) {
      if (::fork() == 0) {
        const pid_t me = ::getpid();
        (void)!::write(ready[1], &me, sizeof me);
        for (volatile std::uint64_t x = 0;; x = x + 1) {
        }
      }
      ::_exit(0);
    }
    ::waitpid(child, nullptr, 0);
    pid_t spinner = 0;
    ASSERT_EQ(::read(ready[0], &spinner, sizeof spinner), ssize_t(sizeof spinner));
    spinners.push_back(spinner);
  }
  ::close(ready[0]);
  ::close(ready[1]);
  ASSERT_TRUE(probe.sample());
  // Alone they keep every core busy (2.0 of 2 here); beside the suite's busiest tests (whose
  // coach-nodes are Coach's, not another program's) they still get a fair share of the cores
  // over some interval: sampled every 250 ms until one shows it, for 10 s at most.
  auto r = probe.sample();
  for (int i = 0; i < 40 && r && r->cpus_external < 0.4; ++i) {
    std::this_thread::sleep_for(250ms);  // the interval a sample measures
    r = probe.sample();
  }
  for (pid_t p : spinners) ::kill(p, SIGKILL);
  ASSERT_TRUE(r) << r.error().to_string();
  std::printf("cpus_total %u, external with %u spinning processes %.1f\n", r->cpus_total, cores,
              r->cpus_external);
  EXPECT_GE(r->cpus_external, 0.4);
}

TEST(host_probe, counters_that_did_not_advance_fall_back_to_the_load_average) {
  fake_proc proc;
  auto probe = proc.probe();
  ASSERT_TRUE(probe.sample());
  auto r = probe.sample();  // same counters
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_DOUBLE_EQ(r->cpus_free, 3.5);
  proc.write("stat", stat_text(50, 50, 400, 0));  // went backwards
  r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_DOUBLE_EQ(r->cpus_free, 3.5);
}

TEST(host_probe, meminfo_without_memavailable_uses_free_buffers_and_cached) {
  fake_proc proc;
  proc.write("meminfo", "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 300 kB\n");
  auto probe = proc.probe();
  auto r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->memory_total, 1000u * 1024);
  EXPECT_EQ(r->memory_free, 420u * 1024);
}

TEST(host_probe, missing_files_are_io_errors_naming_the_file) {
  for (const char* name : {"stat", "meminfo", "loadavg"}) {
    fake_proc proc;
    fs::remove(proc.path() / name);
    auto probe = proc.probe();
    auto r = probe.sample();
    ASSERT_FALSE(r) << name;
    EXPECT_EQ(r.error().code, errc::io_error) << r.error().to_string();
    EXPECT_TRUE(has(r.error().message, (proc.path() / name).string()));
    EXPECT_TRUE(has(r.error().message, "No such file"));
  }
}

TEST(host_probe, a_missing_proc_root_is_an_io_error) {
  host_probe probe("/nonexistent/coach/proc", nullptr);
  auto r = probe.sample();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::io_error);
  EXPECT_TRUE(has(r.error().message, "/nonexistent/coach/proc/stat"));
}

TEST(host_probe, malformed_files_are_parse_errors_naming_the_file_and_the_fault) {
  struct bad_case {
    const char* file;
    std::string text;
    const char* says;
  };
  const bad_case cases[] = {
      {"stat", "", "no 'cpu' line"},
      {"stat", "intr 1 2 3\n", "no 'cpu' line"},
      {"stat", "cpu 1 2 x 4\ncpu0 1 2 3 4\n", "field 3 of the cpu line, 'x', is not a number"},
      {"stat", "cpu 1 2 3\ncpu0 1 2 3\n", "the cpu line has 3 fields"},
      {"stat", "cpu 1 2 3 4\n", "no 'cpuN' lines"},
      {"stat", "cpu 1 2 3 4\ncpuX 1 2 3 4\n", "'cpuX' is not a cpu line"},
      {"stat", "cpu -1 2 3 4\ncpu0 1 2 3 4\n", "'-1', is not a number"},
      {"meminfo", "", "no MemTotal line"},
      {"meminfo", "MemFree: 10 kB\n", "no MemTotal line"},
      {"meminfo", "MemTotal: lots kB\nMemAvailable: 1 kB\n", "'MemTotal: lots kB' is not a size"},
      {"meminfo", "MemTotal: 10 MB\nMemAvailable: 1 kB\n", "'MemTotal: 10 MB' is not a size"},
      {"meminfo", "MemTotal: 10 kB\n", "neither MemAvailable nor MemFree"},
      {"loadavg", "", "'' is not a load average"},
      {"loadavg", "high 1 1\n", "'high' is not a load average"},
      {"loadavg", "-1.0 1 1\n", "'-1.0' is not a load average"},
  };
  for (const auto& c : cases) {
    fake_proc proc;
    proc.write(c.file, c.text);
    auto probe = proc.probe();
    auto r = probe.sample();
    ASSERT_FALSE(r) << c.file << ": " << c.text;
    EXPECT_EQ(r.error().code, errc::parse_error) << r.error().to_string();
    EXPECT_TRUE(has(r.error().message, (proc.path() / c.file).string()));
    EXPECT_TRUE(has(r.error().message, c.says));
  }
}

TEST(host_probe, binary_garbage_does_not_crash) {
  std::string garbage;
  for (int i = 0; i < 4096; ++i) garbage.push_back(static_cast<char>((i * 7919) % 256));
  for (const char* name : {"stat", "meminfo", "loadavg"}) {
    fake_proc proc;
    proc.write(name, garbage);
    auto probe = proc.probe();
    auto r = probe.sample();
    ASSERT_FALSE(r) << name;
    EXPECT_EQ(r.error().code, errc::parse_error) << r.error().to_string();
  }
}

TEST(host_probe, gpus_come_from_the_detector) {
  fake_proc proc;
  host_probe probe(proc.path().string(), [] {
    return result<gpu_inventory>(gpu_inventory{{0, 1, 2}, {0, 2}});
  });
  auto r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->gpus_total, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(r->gpus_free, (std::vector<int>{0, 2}));
  EXPECT_TRUE(r->gpu_error.empty());
}

TEST(host_probe, a_failing_detector_still_reports_cpus_and_memory) {
  fake_proc proc;
  host_probe probe(proc.path().string(), []() -> result<gpu_inventory> {
    return fail(errc::io_error, "nvidia-smi exited with status 9: driver not loaded");
  });
  auto r = probe.sample();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->cpus_total, 4u);
  EXPECT_TRUE(r->gpus_total.empty());
  EXPECT_TRUE(r->gpus_free.empty());
  EXPECT_EQ(r->gpu_error, "io_error: nvidia-smi exited with status 9: driver not loaded");
}

TEST(host_probe, the_real_proc_gives_sane_figures) {
  host_probe probe("/proc", nullptr);
  for (int i = 0; i < 2; ++i) {
    auto r = probe.sample();
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_GE(r->cpus_total, 1u);
    EXPECT_LE(r->cpus_total, 65536u);
    EXPECT_EQ(r->cpus_total, static_cast<std::uint32_t>(::sysconf(_SC_NPROCESSORS_ONLN)));
    EXPECT_GE(r->cpus_free, 0.0);
    EXPECT_LE(r->cpus_free, static_cast<double>(r->cpus_total));
    EXPECT_GT(r->memory_total, std::uint64_t{64} << 20);
    EXPECT_EQ(r->memory_total,
              static_cast<std::uint64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE));
    EXPECT_GT(r->memory_free, 0u);
    EXPECT_LE(r->memory_free, r->memory_total);
    EXPECT_GE(r->load1, 0.0);
    std::this_thread::sleep_for(100ms);  // a gap, the point: the second sample measures it
  }
}

/// cpus_free over `interval`, with `probe` already primed.
double free_cpus_over(host_probe& probe, std::chrono::milliseconds interval) {
  auto before = probe.sample();
  EXPECT_TRUE(before);
  std::this_thread::sleep_for(interval);  // a gap, the point: the interval measured
  auto after = probe.sample();
  EXPECT_TRUE(after);
  return after ? after->cpus_free : -1;
}

TEST(host_probe, a_busy_thread_takes_about_one_core) {
  host_probe probe("/proc", nullptr);
  auto first = probe.sample();
  ASSERT_TRUE(first) << first.error().to_string();
  const double total = first->cpus_total;
  const double idle_free = free_cpus_over(probe, 500ms);

  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    volatile std::uint64_t x = 0;
    while (!stop.load(std::memory_order_relaxed)) x = x + 1;
  });
  std::this_thread::sleep_for(50ms);  // a gap: the spinner is running before the interval
  const double busy_free = free_cpus_over(probe, 1000ms);
  stop = true;
  spinner.join();

  std::printf("cpus_total %.0f, free while idle %.2f, free with a busy thread %.2f (drop %.2f)\n",
              total, idle_free, busy_free, idle_free - busy_free);
  // The spinning thread keeps one core busy for the whole interval, whatever else runs here.
  EXPECT_LE(busy_free, total - 0.6);
  EXPECT_GE(busy_free, 0.0);
  // The drop itself depends on what else this shared machine does meanwhile; check it only when
  // the machine was quiet enough before that one core could be taken at all.
  if (idle_free >= 1.5) {
    EXPECT_GT(idle_free - busy_free, 0.3);
  }
}

TEST(parse_nvidia_smi, lists_gpus_and_marks_those_with_compute_processes_busy) {
  auto r = parse_nvidia_smi("1, GPU-bbbb\n0, GPU-aaaa\n3, GPU-dddd\n2, GPU-cccc\n",
                            "GPU-bbbb\nGPU-bbbb\nGPU-dddd\n");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->all, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(r->free, (std::vector<int>{0, 2}));
}

TEST(parse_nvidia_smi, ignores_lines_that_name_no_gpu) {
  auto r = parse_nvidia_smi("0, GPU-aaaa\r\n", "No running processes found\n[N/A]\n\n");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->all, (std::vector<int>{0}));
  EXPECT_EQ(r->free, (std::vector<int>{0}));
  auto none = parse_nvidia_smi("", "");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->all.empty());
}

TEST(parse_nvidia_smi, malformed_gpu_lines_are_parse_errors) {
  for (std::string_view bad : {"0\n", "x, GPU-a\n", "-1, GPU-a\n", "0,\n",
                               "0, GPU-a\nNo devices were found\n", "0, GPU-a\n0, GPU-b\n"}) {
    auto r = parse_nvidia_smi(bad, "");
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, errc::parse_error);
    EXPECT_TRUE(has(r.error().message, "nvidia-smi --query-gpu line"));
  }
}

TEST(detect_gpus, no_nvidia_smi_means_no_gpus) {
  nvidia_smi_options options;
  options.program = "coach-no-such-nvidia-smi";
  auto r = detect_gpus(options);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_TRUE(r->all.empty());
  EXPECT_TRUE(r->free.empty());
  options.program = "/nonexistent/nvidia-smi";
  r = detect_gpus(options);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_TRUE(r->all.empty());
}

TEST(detect_gpus, runs_nvidia_smi_and_parses_both_queries) {
  temp_dir dir;
  dir.write("nvidia-smi",
            "#!/bin/sh\n"
            "case \"$1\" in\n"
            "  --query-gpu=index,uuid) printf '0, GPU-aaaa\\n1, GPU-bbbb\\n' ;;\n"
            "  --query-compute-apps=gpu_uuid) printf 'GPU-aaaa\\n' ;;\n"
            "  *) exit 3 ;;\n"
            "esac\n"
            "[ \"$2\" = --format=csv,noheader ] || exit 4\n",
            true);
  nvidia_smi_options options;
  options.program = (dir.path() / "nvidia-smi").string();
  auto r = detect_gpus(options);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->all, (std::vector<int>{0, 1}));
  EXPECT_EQ(r->free, (std::vector<int>{1}));
}

TEST(detect_gpus, a_failing_nvidia_smi_is_an_io_error_quoting_it) {
  temp_dir dir;
  dir.write("nvidia-smi",
            "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the "
            "NVIDIA driver.'\necho second line\nexit 9\n",
            true);
  nvidia_smi_options options;
  options.program = (dir.path() / "nvidia-smi").string();
  auto r = detect_gpus(options);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::io_error);
  EXPECT_TRUE(has(r.error().message, "exited with status 9: NVIDIA-SMI has failed"));
  EXPECT_FALSE(has(r.error().message, "second line"));
}

TEST(detect_gpus, a_hanging_nvidia_smi_is_killed_at_the_timeout) {
  temp_dir dir;
  dir.write("nvidia-smi", "#!/bin/sh\necho partial\nexec sleep 30\n", true);
  nvidia_smi_options options;
  options.program = (dir.path() / "nvidia-smi").string();
  options.timeout = 300ms;
  auto start = std::chrono::steady_clock::now();
  auto r = detect_gpus(options);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::io_error);
  EXPECT_TRUE(has(r.error().message, "did not finish within 300 ms"));
  EXPECT_LT(took, 5s);
}

TEST(detect_gpus, output_past_the_bound_is_an_io_error) {
  temp_dir dir;
  dir.write("nvidia-smi", "#!/bin/sh\nwhile :; do echo '0, GPU-aaaaaaaaaaaaaaaaaaaa'; done\n",
            true);
  nvidia_smi_options options;
  options.program = (dir.path() / "nvidia-smi").string();
  options.max_output = 1000;
  auto r = detect_gpus(options);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::io_error);
  EXPECT_TRUE(has(r.error().message, "printed more than 1000 bytes"));
}

/// Puts `dir` first on PATH for its lifetime.
class path_prefix {
 public:
  explicit path_prefix(const fs::path& dir) : old_(std::getenv("PATH") ? std::getenv("PATH") : "") {
    ::setenv("PATH", (dir.string() + ":" + old_).c_str(), 1);
  }
  ~path_prefix() { ::setenv("PATH", old_.c_str(), 1); }

 private:
  std::string old_;
};

TEST(detect_gpus, the_default_runs_nvidia_smi_from_path_and_reads_an_eight_gpu_fixture) {
  // tests/unit/fixtures/nvidia-smi: eight GPUs, 0 (two processes), 3 and 6 busy.
  const fs::path fixture = fs::path(COACH_SOURCE_DIR) / "tests/unit/fixtures/nvidia-smi";
  temp_dir dir;
  dir.write("nvidia-smi",
            "#!/bin/sh\n"
            "[ \"$2\" = --format=csv,noheader ] || exit 4\n"
            "case \"$1\" in\n"
            "  --query-gpu=index,uuid) exec cat '" +
                (fixture / "query-gpu.csv").string() +
                "' ;;\n"
                "  --query-compute-apps=gpu_uuid) exec cat '" +
                (fixture / "query-compute-apps.csv").string() +
                "' ;;\n"
                "esac\n"
                "exit 3\n",
            true);
  path_prefix on_path(dir.path());
  auto r = detect_gpus();
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->all, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(r->free, (std::vector<int>{1, 2, 4, 5, 7}));
  // The host probe's default detector is the same, and a sample carries the lists.
  host_probe probe;
  auto sample = probe.sample();
  ASSERT_TRUE(sample) << sample.error().to_string();
  EXPECT_EQ(sample->gpus_total, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(sample->gpus_free, (std::vector<int>{1, 2, 4, 5, 7}));
  EXPECT_EQ(sample->gpu_error, "");
}

TEST(parse_gpu_list, accepts_lists_and_the_empty_string) {
  auto r = parse_gpu_list("0,1,3");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(*r, (std::vector<int>{0, 1, 3}));
  r = parse_gpu_list(" 2 , 0 ");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(*r, (std::vector<int>{2, 0}));
  r = parse_gpu_list("");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->empty());
  r = parse_gpu_list("7");
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, (std::vector<int>{7}));
}

TEST(parse_gpu_list, names_the_bad_item) {
  struct bad_case {
    std::string_view text;
    std::string_view says;
  };
  for (auto [text, says] : {
           bad_case{"a", "GPU list 'a': 'a' is not a GPU id (a non-negative integer)"},
           bad_case{"-1", "GPU list '-1': '-1' is not a GPU id (a non-negative integer)"},
           bad_case{"0,1,x2", "'x2' is not a GPU id"},
           bad_case{"1.5", "'1.5' is not a GPU id"},
           bad_case{"99999999999", "'99999999999' is not a GPU id"},
           bad_case{"0,1,0", "GPU list '0,1,0': GPU 0 is listed twice"},
           bad_case{"0,,1", "GPU list '0,,1': item 2 is empty"},
           bad_case{"0,", "item 2 is empty"},
           bad_case{",", "item 1 is empty"},
       }) {
    auto r = parse_gpu_list(text);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().code, errc::invalid_argument);
    EXPECT_TRUE(has(r.error().message, says));
  }
}

host_resources measured_host() {
  host_resources m;
  m.cpus_total = 16;
  m.cpus_free = 6.5;
  m.memory_total = 1000;
  m.memory_free = 400;
  m.gpus_total = {0, 1, 2, 3};
  m.gpus_free = {1, 3};
  m.load1 = 9.5;
  return m;
}

TEST(apply_limits, no_limits_change_nothing) {
  auto r = apply_limits(measured_host(), std::nullopt, std::nullopt);
  EXPECT_EQ(r.cpus_total, 16u);
  EXPECT_DOUBLE_EQ(r.cpus_free, 6.5);
  EXPECT_EQ(r.gpus_total, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(r.gpus_free, (std::vector<int>{1, 3}));
  EXPECT_EQ(r.memory_free, 400u);
}

TEST(apply_limits, sets_the_cpus_advertised_and_free_never_exceeds_them) {
  auto r = apply_limits(measured_host(), 4u, std::nullopt);
  EXPECT_EQ(r.cpus_total, 4u);
  EXPECT_DOUBLE_EQ(r.cpus_free, 4.0);
  r = apply_limits(measured_host(), 8u, std::nullopt);
  EXPECT_EQ(r.cpus_total, 8u);
  EXPECT_DOUBLE_EQ(r.cpus_free, 6.5);
  r = apply_limits(measured_host(), 64u, std::nullopt);  // more than measured: oversubscribed
  EXPECT_EQ(r.cpus_total, 64u);
  EXPECT_DOUBLE_EQ(r.cpus_free, 6.5);
  r = apply_limits(measured_host(), 0u, std::nullopt);
  EXPECT_EQ(r.cpus_total, 0u);
  EXPECT_DOUBLE_EQ(r.cpus_free, 0.0);
  EXPECT_EQ(r.memory_total, 1000u);
  EXPECT_DOUBLE_EQ(r.load1, 9.5);
}

TEST(apply_limits, keeps_only_the_listed_gpus) {
  auto r = apply_limits(measured_host(), std::nullopt, std::vector<int>{3, 0, 7});
  EXPECT_EQ(r.gpus_total, (std::vector<int>{0, 3}));
  EXPECT_EQ(r.gpus_free, (std::vector<int>{3}));
  r = apply_limits(measured_host(), std::nullopt, std::vector<int>{});
  EXPECT_TRUE(r.gpus_total.empty());
  EXPECT_TRUE(r.gpus_free.empty());
  EXPECT_EQ(r.cpus_total, 16u);
}

TEST(check_gpu_limit, names_a_gpu_the_host_lacks) {
  EXPECT_TRUE(check_gpu_limit(measured_host(), {0, 3}));
  EXPECT_TRUE(check_gpu_limit(measured_host(), {}));
  auto r = check_gpu_limit(measured_host(), {1, 7});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::invalid_argument);
  EXPECT_EQ(r.error().message,
            "--gpus names GPU 7, which this host does not have (it has 0,1,2,3)");
  r = check_gpu_limit(host_resources{}, {0});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "--gpus names GPU 0, but this host has no GPUs");
}

}  // namespace
}  // namespace coach::scheduler
