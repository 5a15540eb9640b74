#pragma once
// scheduler::host_probe: measures what this host has and what is free right now, so the node
// agent can heartbeat it to the scheduler. Measured, not declared: processes that are not Coach's
// count (DESIGN.md, "Cluster view").
//
// Sources (the /proc root is injectable so tests feed fake files):
//   - CPUs: the `cpuN` lines of PROC/stat give cpus_total; cpus_free is cpus_total times the idle
//     share (idle + iowait) of the aggregate `cpu` line between two samples. Steal counts as busy;
//     guest time is already inside user/nice and is not counted twice. The first sample has no
//     previous one to compare with, so it estimates cpus_free = cpus_total - load1, clamped to
//     [0, cpus_total]; so does a sample whose counters did not advance or went backwards (a CPU
//     went offline).
//   - CPUs other programs use: cpus_external, the share of the interval processes ran (user,
//     nice and system time; not interrupts, softirqs or steal, which are no program's: on a host
//     running several nodes the kernel's work moving their messages is Coach's own) less the
//     ticks of Coach's own processes (own_cpu_meter), times cpus_total, in tenths, 0 below
//     external_floor; the larger of the last two intervals' (a program that ends stops counting
//     two samples later). The scheduler takes it off what
//     it may give (node_table::view): a CPU-heavy program started beside Coach shrinks what its
//     jobs may hold, and its end gives the CPUs back.
//   - memory: MemTotal and MemAvailable of PROC/meminfo, in bytes (kernels older than 3.14 lack
//     MemAvailable: MemFree + Buffers + Cached stands in).
//   - load1: the first field of PROC/loadavg.
//   - GPUs: a gpu_detector, by default `nvidia-smi` (detect_gpus). No nvidia-smi on PATH means no
//     GPUs: empty lists, no error.
//
// Configuration sets what is advertised (`coach-node --cpus N --gpus LIST`): apply_limits.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "host/own_cpu.hpp"

namespace coach::scheduler {

/// One measurement of a host's resources.
/// A GPU one of Coach's cuda workers holds on its node (worker::device_assignment).
struct gpu_hold {
  std::uint64_t job = 0;
  std::uint32_t rank = 0;
  int device = 0;    ///< a GPU id as in gpus_total (coach-node orders CUDA's devices by PCI bus)
  bool own = false;  ///< the worker's own (gpus_per_worker >= 1); else shared
  bool operator==(const gpu_hold&) const = default;
};

struct host_resources {
  std::uint32_t cpus_total = 0;  ///< online logical CPUs
  double cpus_free = 0;          ///< in [0, cpus_total]: total minus busy over the last interval
  /// In [0, cpus_total]: CPUs that programs other than Coach kept busy over the last interval
  /// (the time processes ran minus Coach's own, own_cpu.hpp), in tenths; under external_floor: 0.
  double cpus_external = 0;
  std::uint64_t memory_total = 0;  ///< bytes (MemTotal)
  std::uint64_t memory_free = 0;   ///< bytes (MemAvailable), <= memory_total
  std::vector<int> gpus_total;     ///< GPU ids (nvidia-smi indices), ascending
  std::vector<int> gpus_free;      ///< ids with no compute process; a subset of gpus_total
  /// The GPUs Coach's own workers hold here (its node agent's report, not measured).
  std::vector<gpu_hold> gpus_held;
  double load1 = 0;  ///< one-minute load average
  /// Why GPU detection failed (nvidia-smi present but failing); then both GPU lists are empty.
  /// Empty when detection worked or when there is no nvidia-smi.
  std::string gpu_error;
};

/// The GPUs a host has and those that no compute process uses.
struct gpu_inventory {
  std::vector<int> all;   ///< ascending
  std::vector<int> free;  ///< ascending, a subset of all
};

/// The GPU detection seam: host_probe calls it once per sample. An error means "GPUs could not
/// be listed", never "no GPUs" (that is an empty inventory).
using gpu_detector = std::function<result<gpu_inventory>()>;

/// How detect_gpus runs nvidia-smi.
struct nvidia_smi_options {
  /// The program; looked up on PATH when it contains no '/'. Not found means no GPUs.
  std::string program = "nvidia-smi";
  /// Per invocation; past it the process is killed and detection fails with io_error.
  std::chrono::milliseconds timeout{5000};
  /// Bytes of output read per invocation; more fails with io_error.
  std::size_t max_output = 64 * 1024;
};

/// Lists GPUs with `PROGRAM --query-gpu=index,uuid --format=csv,noheader` and the busy ones with
/// `PROGRAM --query-compute-apps=gpu_uuid --format=csv,noheader`. A program that is not found
/// gives an empty inventory; one that exits non-zero, times out or prints too much gives io_error
/// (with the first line of its output); output that does not parse gives parse_error.
result<gpu_inventory> detect_gpus(const nvidia_smi_options& options = {});

/// Parses the outputs of the two nvidia-smi queries of detect_gpus. gpus_csv has one
/// "INDEX, UUID" line per GPU; apps_csv one GPU UUID per compute process. Lines of apps_csv that
/// name no listed GPU ("No running processes found", "[N/A]") are ignored. Errors: parse_error
/// naming the line at fault.
result<gpu_inventory> parse_nvidia_smi(std::string_view gpus_csv, std::string_view apps_csv);

/// Measures this host. Not thread-safe: one owner calls sample() (the node agent, before each
/// heartbeat); each sample's cpus_free covers the interval since the previous one.
class host_probe {
 public:
  /// Reads PROC_ROOT/stat, PROC_ROOT/meminfo and PROC_ROOT/loadavg; finds GPUs with `gpus`.
  explicit host_probe(
      std::string proc_root = "/proc", gpu_detector gpus = [] { return detect_gpus(); });

  /// Takes one measurement. Errors: io_error when a /proc file cannot be read, parse_error when
  /// one is malformed; each names the file. A GPU detection failure is not an error here: the
  /// sample carries it in gpu_error, with empty GPU lists, so CPUs and memory still get reported.
  /// Blocks while the detector runs (nvidia-smi takes tens to hundreds of milliseconds, bounded by
  /// nvidia_smi_options::timeout): call it off the threads that handle messages.
  result<host_resources> sample();

 private:
  std::string proc_root_;
  gpu_detector gpus_;
  bool have_previous_ = false;
  std::uint32_t previous_cpus_ = 0;
  std::uint64_t previous_busy_ = 0;       ///< jiffies, all CPUs together
  std::uint64_t previous_total_ = 0;      ///< jiffies, all CPUs together
  std::uint64_t previous_processes_ = 0;  ///< user + nice + system jiffies, all CPUs together
  own_cpu_meter own_;
  double previous_external_ = 0;  ///< the previous interval's cpus_external, before the max
};

/// Below this many CPUs, what other programs use reads as 0 (a host's daemons and kernel hum).
inline constexpr double external_floor = 0.25;

/// What is advertised by configuration (`coach-node --cpus N --gpus LIST`): cpus_total becomes
/// N, below or above what was measured (the scheduler counts CPUs as slots, one per part, as
/// Ray's --num-cpus does: more than the host has oversubscribes it on purpose, e.g. several
/// emulated hosts on one machine), and cpus_free min(measured free, N); cpus_external loses
/// the host's CPUs beyond N first (other programs fill those before they reach the node's), then
/// is at most N; the GPU lists keep only
/// the ids in LIST (so an id the host lacks is dropped: check_gpu_limit reports that). A limit
/// that is nullopt leaves its resource as measured. Memory and load are unchanged.
host_resources apply_limits(host_resources measured, std::optional<std::uint32_t> cpus,
                            std::optional<std::vector<int>> gpus);

/// invalid_argument when `gpus` names a GPU that `measured` does not have, e.g.
/// "--gpus names GPU 3, which this host does not have (it has 0,1)".
result<void> check_gpu_limit(const host_resources& measured, const std::vector<int>& gpus);

/// Parses a GPU list as `--gpus` takes it: comma-separated non-negative integers, spaces around
/// items allowed, order kept. "" is the empty list. Errors (invalid_argument, naming the item):
/// an empty item, an item that is not a non-negative integer ("a", "-1"), a duplicate.
result<std::vector<int>> parse_gpu_list(std::string_view text);

}  // namespace coach::scheduler
