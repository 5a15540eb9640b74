#include "host/host_probe.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <system_error>
#include <thread>
#include <utility>

extern char** environ;

namespace coach::scheduler {
namespace {

std::string errno_text(int err) {
  return std::error_code(err, std::generic_category()).message();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

/// Splits text into lines (without '\n'); a final line without '\n' counts.
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    auto nl = text.find('\n');
    out.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

/// The next whitespace-separated word of `s`, removed from it; empty at the end.
std::string_view next_word(std::string_view& s) {
  std::size_t b = 0;
  while (b < s.size() && (s[b] == ' ' || s[b] == '\t')) ++b;
  std::size_t e = b;
  while (e < s.size() && s[e] != ' ' && s[e] != '\t') ++e;
  auto word = s.substr(b, e - b);
  s.remove_prefix(e);
  return word;
}

template <class T>
bool parse_number(std::string_view s, T& value) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  return ec == std::errc{} && ptr == s.data() + s.size();
}

/// The whole file, read with plain read(2): /proc files report size 0.
result<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(errc::io_error, "cannot read {}: {}", path, errno_text(errno));
  std::string text;
  char buffer[4096];
  for (;;) {
    auto n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return fail(errc::io_error, "cannot read {}: {}", path, errno_text(err));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > (std::size_t{16} << 20)) {
      ::close(fd);
      return fail(errc::io_error, "cannot read {}: larger than 16 MiB", path);
    }
  }
  ::close(fd);
  return text;
}

struct cpu_times {
  std::uint32_t cpus = 0;
  std::uint64_t busy = 0;
  std::uint64_t total = 0;
  std::uint64_t processes = 0;  ///< user + nice + system: time processes ran
};

/// The aggregate `cpu` line and the count of `cpuN` lines of /proc/stat.
result<cpu_times> parse_stat(std::string_view text, const std::string& path) {
  cpu_times out;
  bool have_aggregate = false;
  for (auto line : lines_of(text)) {
    if (!line.starts_with("cpu")) continue;
    auto rest = line;
    auto name = next_word(rest);
    if (name != "cpu") {
      unsigned index = 0;
      if (!parse_number(name.substr(3), index)) {
        return fail(errc::parse_error, "{}: '{}' is not a cpu line", path, name);
      }
      ++out.cpus;
      continue;
    }
    // user nice system idle iowait irq softirq steal guest guest_nice; kernels before 2.6.33
    // stop earlier, so at least the first four are required.
    std::uint64_t field[10] = {};
    int count = 0;
    for (auto word = next_word(rest); !word.empty(); word = next_word(rest)) {
      if (count == 10) break;
      if (!parse_number(word, field[count])) {
        return fail(errc::parse_error, "{}: field {} of the cpu line, '{}', is not a number", path,
                    count + 1, word);
      }
      ++count;
    }
    if (count < 4) {
      return fail(errc::parse_error, "{}: the cpu line has {} fields, expected at least 4", path,
                  count);
    }
    // guest and guest_nice (fields 9, 10) are already counted in user and nice.
    std::uint64_t total = 0;
    for (int i = 0; i < std::min(count, 8); ++i) total += field[i];
    std::uint64_t idle = field[3] + field[4];
    out.total = total;
    out.busy = total - idle;
    out.processes = field[0] + field[1] + field[2];
    have_aggregate = true;
  }
  if (!have_aggregate) return fail(errc::parse_error, "{}: no 'cpu' line", path);
  if (out.cpus == 0) return fail(errc::parse_error, "{}: no 'cpuN' lines", path);
  return out;
}

struct memory_info {
  std::uint64_t total = 0;
  std::uint64_t available = 0;
};

result<memory_info> parse_meminfo(std::string_view text, const std::string& path) {
  std::optional<std::uint64_t> total, available, free, buffers, cached;
  for (auto line : lines_of(text)) {
    auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    auto key = line.substr(0, colon);
    std::optional<std::uint64_t>* slot = key == "MemTotal"       ? &total
                                         : key == "MemAvailable" ? &available
                                         : key == "MemFree"      ? &free
                                         : key == "Buffers"      ? &buffers
                                         : key == "Cached"       ? &cached
                                                                 : nullptr;
    if (slot == nullptr) continue;
    auto rest = line.substr(colon + 1);
    auto number = next_word(rest);
    auto unit = next_word(rest);
    std::uint64_t value = 0;
    if (!parse_number(number, value) || (!unit.empty() && unit != "kB")) {
      return fail(errc::parse_error, "{}: '{}' is not a size in kB", path, trim(line));
    }
    if (value > (~std::uint64_t{0} >> 10)) {
      return fail(errc::parse_error, "{}: {} is too large", path, key);
    }
    *slot = unit.empty() ? value : value * 1024;
  }
  if (!total) return fail(errc::parse_error, "{}: no MemTotal line", path);
  memory_info out;
  out.total = *total;
  if (available) {
    out.available = *available;
  } else if (free) {
    out.available = *free + buffers.value_or(0) + cached.value_or(0);
  } else {
    return fail(errc::parse_error, "{}: neither MemAvailable nor MemFree", path);
  }
  out.available = std::min(out.available, out.total);
  return out;
}

result<double> parse_loadavg(std::string_view text, const std::string& path) {
  auto word = next_word(text);
  double load1 = 0;
  if (!parse_number(word, load1) || !(load1 >= 0)) {
    return fail(errc::parse_error, "{}: '{}' is not a load average", path, word);
  }
  return load1;
}

/// What a child process printed and how it ended.
struct command_output {
  bool not_found = false;  ///< the program could not be found
  std::string text;        ///< stdout
};

/// Runs argv[0] (looked up on PATH) with stdout captured and stderr discarded; kills it past the
/// timeout. Exit status other than 0, timeouts and oversized output are io_error.
result<command_output> run_command(const std::vector<std::string>& argv,
                                   const nvidia_smi_options& options) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return fail(errc::io_error, "{}: cannot make a pipe: {}", argv[0], errno_text(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    if (rc == ENOENT) return command_output{true, {}};
    return fail(errc::io_error, "cannot run {}: {}", argv[0], errno_text(rc));
  }

  auto deadline = std::chrono::steady_clock::now() + options.timeout;
  auto remaining_ms = [&] {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return static_cast<int>(std::max<std::int64_t>(0, left.count()));
  };
  auto kill_and_reap = [&] {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  };
  command_output out;
  char buffer[4096];
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    int ready = ::poll(&p, 1, remaining_ms());
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      ::close(fds[0]);
      kill_and_reap();
      if (ready == 0) {
        return fail(errc::io_error, "{} did not finish within {} ms", argv[0],
                    options.timeout.count());
      }
      return fail(errc::io_error, "{}: poll failed", argv[0]);
    }
    auto n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.text.append(buffer, static_cast<std::size_t>(n));
    if (out.text.size() > options.max_output) {
      ::close(fds[0]);
      kill_and_reap();
      return fail(errc::io_error, "{} printed more than {} bytes", argv[0], options.max_output);
    }
  }
  ::close(fds[0]);
  // stdout is closed; the child is normally exiting. Wait for it, still bounded by the deadline.
  int status = 0;
  for (;;) {
    pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) return fail(errc::io_error, "{}: waitpid failed", argv[0]);
    if (remaining_ms() == 0) {
      kill_and_reap();
      return fail(errc::io_error, "{} did not finish within {} ms", argv[0],
                  options.timeout.count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    auto first = lines_of(out.text);
    std::string said = first.empty() ? std::string() : std::string(trim(first.front()));
    std::string how = WIFEXITED(status)
                          ? coach::format("exited with status {}", WEXITSTATUS(status))
                          : coach::format("was killed by signal {}", WTERMSIG(status));
    if (said.empty()) return fail(errc::io_error, "{} {}", argv[0], how);
    return fail(errc::io_error, "{} {}: {}", argv[0], how, said);
  }
  return out;
}

/// Ids in `list` that are also in `keep`, in the order of `list`.
std::vector<int> intersect(const std::vector<int>& list, const std::vector<int>& keep) {
  std::vector<int> out;
  for (int id : list) {
    if (std::find(keep.begin(), keep.end(), id) != keep.end()) out.push_back(id);
  }
  return out;
}

}  // namespace

result<gpu_inventory> parse_nvidia_smi(std::string_view gpus_csv, std::string_view apps_csv) {
  struct gpu {
    int index;
    std::string_view uuid;
    bool busy = false;
  };
  std::vector<gpu> gpus;
  int line_no = 0;
  for (auto raw : lines_of(gpus_csv)) {
    ++line_no;
    auto line = trim(raw);
    if (line.empty()) continue;
    auto comma = line.find(',');
    int index = -1;
    if (comma == std::string_view::npos || !parse_number(trim(line.substr(0, comma)), index) ||
        index < 0 || trim(line.substr(comma + 1)).empty()) {
      return fail(errc::parse_error, "nvidia-smi --query-gpu line {}: '{}' is not 'INDEX, UUID'",
                  line_no, line);
    }
    for (auto& g : gpus) {
      if (g.index == index) {
        return fail(errc::parse_error, "nvidia-smi --query-gpu line {}: GPU {} listed twice",
                    line_no, index);
      }
    }
    gpus.push_back({index, trim(line.substr(comma + 1))});
  }
  for (auto raw : lines_of(apps_csv)) {
    auto uuid = trim(raw);
    for (auto& g : gpus) {
      if (g.uuid == uuid) g.busy = true;
    }
  }
  std::sort(gpus.begin(), gpus.end(), [](const gpu& a, const gpu& b) { return a.index < b.index; });
  gpu_inventory out;
  for (auto& g : gpus) {
    out.all.push_back(g.index);
    if (!g.busy) out.free.push_back(g.index);
  }
  return out;
}

result<gpu_inventory> detect_gpus(const nvidia_smi_options& options) {
  auto gpus =
      run_command({options.program, "--query-gpu=index,uuid", "--format=csv,noheader"}, options);
  if (!gpus) return std::unexpected(gpus.error());
  if (gpus->not_found) return gpu_inventory{};
  auto apps = run_command(
      {options.program, "--query-compute-apps=gpu_uuid", "--format=csv,noheader"}, options);
  if (!apps) return std::unexpected(apps.error());
  if (apps->not_found) return gpu_inventory{};
  return parse_nvidia_smi(gpus->text, apps->text);
}

host_probe::host_probe(std::string proc_root, gpu_detector gpus)
    : proc_root_(std::move(proc_root)), gpus_(std::move(gpus)), own_(proc_root_) {}

result<host_resources> host_probe::sample() {
  const std::string stat_path = proc_root_ + "/stat";
  const std::string meminfo_path = proc_root_ + "/meminfo";
  const std::string loadavg_path = proc_root_ + "/loadavg";

  auto stat_text = read_file(stat_path);
  if (!stat_text) return std::unexpected(stat_text.error());
  auto cpu = parse_stat(*stat_text, stat_path);
  if (!cpu) return std::unexpected(cpu.error());
  const auto own_ticks = own_.sample();

  auto meminfo_text = read_file(meminfo_path);
  if (!meminfo_text) return std::unexpected(meminfo_text.error());
  auto memory = parse_meminfo(*meminfo_text, meminfo_path);
  if (!memory) return std::unexpected(memory.error());

  auto loadavg_text = read_file(loadavg_path);
  if (!loadavg_text) return std::unexpected(loadavg_text.error());
  auto load1 = parse_loadavg(*loadavg_text, loadavg_path);
  if (!load1) return std::unexpected(load1.error());

  host_resources out;
  out.cpus_total = cpu->cpus;
  out.memory_total = memory->total;
  out.memory_free = memory->available;
  out.load1 = *load1;

  const double total = cpu->cpus;
  bool measured = have_previous_ && previous_cpus_ == cpu->cpus && cpu->total > previous_total_ &&
                  cpu->busy >= previous_busy_ &&
                  cpu->busy - previous_busy_ <= cpu->total - previous_total_;
  measured = measured && cpu->processes >= previous_processes_;
  if (measured) {
    double busy_share = static_cast<double>(cpu->busy - previous_busy_) /
                        static_cast<double>(cpu->total - previous_total_);
    out.cpus_free = total * (1.0 - busy_share);
    if (own_ticks) {
      // Time processes ran (user, nice, system), less Coach's: interrupts and softirqs (the
      // kernel moving Coach's own messages between nodes on one host) and steal are no
      // program's, and counting them made a job's end read as other programs' load.
      const double others =
          std::max(0.0, static_cast<double>(cpu->processes - previous_processes_) -
                            static_cast<double>(*own_ticks));
      const double cpus =
          std::min(total, total * others / static_cast<double>(cpu->total - previous_total_));
      // Tenths of a CPU; below a quarter is the host's own hum (daemons, the kernel). The larger
      // of this interval's and the previous one's: a program competing with Coach's parts reads
      // unevenly, and jobs should not grow into a dip and shrink again at the next heartbeat.
      const double now = cpus < external_floor ? 0.0 : std::round(cpus * 10) / 10;
      out.cpus_external = std::max(now, previous_external_);
      previous_external_ = now;
    }
  } else {
    out.cpus_free = total - out.load1;
  }
  out.cpus_free = std::clamp(out.cpus_free, 0.0, total);
  have_previous_ = true;
  previous_cpus_ = cpu->cpus;
  previous_busy_ = cpu->busy;
  previous_total_ = cpu->total;
  previous_processes_ = cpu->processes;

  if (gpus_) {
    auto gpus = gpus_();
    if (gpus) {
      out.gpus_total = std::move(gpus->all);
      out.gpus_free = std::move(gpus->free);
    } else {
      out.gpu_error = gpus.error().to_string();
    }
  }
  return out;
}

host_resources apply_limits(host_resources measured, std::optional<std::uint32_t> cpus,
                            std::optional<std::vector<int>> gpus) {
  if (cpus) {
    // Other programs fill the CPUs this node does not advertise first.
    const double unadvertised = std::max(0.0, double(measured.cpus_total) - double(*cpus));
    measured.cpus_external = std::max(0.0, measured.cpus_external - unadvertised);
    measured.cpus_total = *cpus;
    measured.cpus_free = std::min(measured.cpus_free, static_cast<double>(measured.cpus_total));
    measured.cpus_external = std::min(measured.cpus_external, double(measured.cpus_total));
  }
  if (gpus) {
    measured.gpus_total = intersect(measured.gpus_total, *gpus);
    measured.gpus_free = intersect(measured.gpus_free, measured.gpus_total);
  }
  return measured;
}

result<void> check_gpu_limit(const host_resources& measured, const std::vector<int>& gpus) {
  for (int id : gpus) {
    if (std::find(measured.gpus_total.begin(), measured.gpus_total.end(), id) !=
        measured.gpus_total.end()) {
      continue;
    }
    std::string have;
    for (int g : measured.gpus_total) {
      if (!have.empty()) have.push_back(',');
      have.append(std::to_string(g));
    }
    if (have.empty()) {
      return fail(errc::invalid_argument, "--gpus names GPU {}, but this host has no GPUs", id);
    }
    return fail(errc::invalid_argument,
                "--gpus names GPU {}, which this host does not have (it has {})", id, have);
  }
  return {};
}

result<std::vector<int>> parse_gpu_list(std::string_view text) {
  std::vector<int> out;
  if (trim(text).empty()) return out;
  std::string_view rest = text;
  for (int item = 1;; ++item) {
    auto comma = rest.find(',');
    auto word = trim(rest.substr(0, comma));
    if (word.empty()) {
      return fail(errc::invalid_argument, "GPU list '{}': item {} is empty", text, item);
    }
    int id = -1;
    if (!parse_number(word, id) || id < 0) {
      return fail(errc::invalid_argument,
                  "GPU list '{}': '{}' is not a GPU id (a non-negative integer)", text, word);
    }
    if (std::find(out.begin(), out.end(), id) != out.end()) {
      return fail(errc::invalid_argument, "GPU list '{}': GPU {} is listed twice", text, id);
    }
    out.push_back(id);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace coach::scheduler
