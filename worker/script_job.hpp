#pragma once
// worker::script_job: a script's model (model: {script: ...}) on a cluster of coach-nodes
// (docs/python.md "On a cluster of coach-nodes").
//
// The submitter registers: prepare_submission runs the script's first process where `coach
// submit` runs (a broken script fails there, with its stderr), takes its layout and initial
// values, stops it, and packs the files of the script's folder (worker/script_bundle.hpp). The
// result, a script_payload, travels to the scheduler, which keeps it with the job, and on to
// every node of the job. Each host then runs the processes of its own workers (and, on the
// scheduler's host, the evaluator's) from a private copy of the files: open_submitted writes
// them into a folder of their own and makes a pool that knows the layout, so that every process
// started there is checked against it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "worker/external_layout.hpp"
#include "worker/model_config.hpp"

namespace coach::worker {

/// A script job's model as it travels to a cluster: from `coach submit` to the scheduler (all
/// of it), and from the scheduler to the job's nodes (without `initial`: the shards get the
/// values as a start_job's initial training state).
struct script_payload {
  std::string entry;        ///< the script's path inside the bundle (its file name)
  std::string layout_json;  ///< the first process's layout (hello_json)
  std::shared_ptr<const std::vector<float>> initial;     ///< its initial values; may be null
  std::shared_ptr<const std::vector<std::byte>> bundle;  ///< pack_bundle of the script's folder
};

/// The most bytes of a payload's layout_json (a model of many tensors; the control plane's
/// limit for it).
inline constexpr std::size_t max_layout_json_bytes = std::size_t(8) << 20;

/// `coach submit`'s side: the files of the script's folder (at most max_bundle_bytes, checked
/// first), then the script's first process run with `python` (empty: default_python()) and the
/// job's seed, its layout and initial values taken, and the process stopped. Errors: the
/// folder's (invalid_argument over the limit, exit code 2) and the first process's (io_error
/// when it ends before init: its exit status and last stderr lines; its stderr is logged).
result<script_payload> prepare_submission(const script_config& script, std::uint64_t seed,
                                          std::string python);

/// The layout and initial values of a payload, checked (initial may be null: a host that runs
/// no shard of the job gets none). Errors: protocol_error naming what does not fit.
result<std::shared_ptr<external_model>> payload_model(
    const script_payload& p, std::shared_ptr<const std::vector<float>> initial);

/// Where a host runs the processes of submitted scripts.
struct script_host {
  std::string python;  ///< the interpreter (coach-node --python); empty: default_python()
  std::string root;    ///< the host's folder for them ($TMPDIR/coach-node-NAME), made 0700
};

/// A host's model of a submitted script job: the bundle unpacked into a folder of its own under
/// host.root (`folder_prefix`.XXXXXX, removed when the pool ends), a pool for the script there
/// (script_options_for: `script`'s arguments and timeout, the seed, the job, `threads`) whose
/// layout and initial values are the payload's (external_pool::register_known). Errors: the
/// bundle's (protocol_error: a hostile path), the layout's, io_error writing the files,
/// not_found when the `coach` package is missing or the script is not in the bundle.
/// `memory_bytes`: each process's cap (function.memory_mb; 0: none).
result<std::shared_ptr<const external_model>> open_submitted(
    const script_payload& p, std::shared_ptr<const std::vector<float>> initial,
    const script_config& script, std::uint64_t seed, std::uint64_t job, const script_host& host,
    int threads, std::string_view folder_prefix, std::uint64_t memory_bytes = 0);

}  // namespace coach::worker
