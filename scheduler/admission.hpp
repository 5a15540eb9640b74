#pragma once
// scheduler/admission.hpp: taking a job in (admit) and saying why a job waits (why_waiting),
// against the cluster as the registry sees it. Rules only: the registry passes its cluster
// view and its jobs (job_registry::admit, why_waiting).
//
// Resources: a worker takes gpus_per_worker GPUs and 1 CPU, a shard 1 CPU.

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "common/error.hpp"
#include "scheduler/cluster_view.hpp"
#include "scheduler/job_store.hpp"
#include "scheduler/registered_job.hpp"
#include "spec/job_spec.hpp"

namespace coach::scheduler {

/// What a submission asks for (coach submit).
struct submission {
  std::string spec_yaml;
  std::string source_name;
  std::string base_dir;
  std::uint32_t workers = 0;  ///< 0: as the spec says
  std::uint32_t shards = 0;
};

/// Resources of one part: a worker takes its GPUs and a CPU, a shard a CPU.
resources worker_cost(const job_record& r);
resources shard_cost(const job_record& r);

/// Checks a new job against the cluster `view` (live nodes, what is free) and makes its record,
/// submitted at `now`: the counts asked must lie in the spec's ranges; a job whose minimum would
/// not fit the whole cluster, empty, is refused (it would wait for ever); one whose request
/// would not fit asks for the most that does, and `log` says so. Errors: invalid_argument
/// (counts out of range), resource_exhausted (naming what it needs).
result<job_record> admit(const job_spec& spec, const submission& s, const cluster_view& view,
                         double now, const std::function<void(const std::string&)>& log);

/// Why `job`, waiting (REQUIRES: job.waiting()), does not run yet, for `coach status`: being
/// cancelled, its last run's parts still stopping, the least it needs against what is free in
/// `view`, what it asks for, or the earlier job of `jobs` it waits behind. Short of CPUs, it
/// says what holds them and how that changes: "needs 4 CPUs (2 worker(s) and 2 shard(s) at
/// least), 2 free of 4: Coach's jobs hold 2 (a CPU per worker or shard); ..." and, where other
/// programs keep `external_cpus` of the view's nodes busy (coach-node --cpu-accounting
/// measured), those and the flag that stops counting them. Free CPUs are free_cpus_shown's.
std::string why_waiting(const registered_job& job, const cluster_view& view,
                        const std::map<std::uint64_t, registered_job>& jobs,
                        double external_cpus = 0);

/// The free CPUs of one node as `coach nodes`, the dashboard and why_waiting show them: what
/// the scheduler may still give there (node_table::view: advertised, less what it gave out,
/// less what other programs keep busy under --cpu-accounting measured), 0 where over-committed,
/// rounded down to a tenth.
double free_cpus_shown(double free);

}  // namespace coach::scheduler
