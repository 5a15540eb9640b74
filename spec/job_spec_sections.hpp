#pragma once
// scheduler::detail: the readers of the larger sections of a job spec (spec/job_spec.hpp),
// one source each: dataset (job_spec_data.cpp), model and its layers (job_spec_model.cpp),
// optimizer and its schedule (job_spec_optimizer.cpp), resources, function and schedule
// (job_spec_resources.cpp). spec/job_spec.cpp reads the rest and calls them in the order of
// the fields, so that the first field at fault is reported.
// Private to the job_spec*.cpp sources.

#include <cstdint>
#include <limits>
#include <string>

#include "common/error.hpp"
#include "spec/job_spec.hpp"
#include "spec/spec_parser.hpp"

namespace coach::scheduler::detail {

/// The largest batch size and hidden width, and the largest |label_column|.
inline constexpr std::int64_t max_width = 1 << 20;
/// The largest count (epochs, workers, shards, gpus_per_worker).
inline constexpr std::int64_t int_max = std::numeric_limits<int>::max();

/// `path` made absolute against `base_dir` (empty: the working directory), normalized; `path`
/// itself where that fails.
std::string resolve_path(const std::string& base_dir, const std::string& path);

/// Reads the required `dataset:` section of `top` into spec.dataset. A relative path is
/// resolved against `base_dir` (empty: the working directory) and stored absolute.
result<void> parse_dataset(const spec_parser& p, const fields& top, const std::string& base_dir,
                           job_spec& spec);

/// Reads the required `model:` section of `top` into spec.model.
result<void> parse_model(const spec_parser& p, const fields& top, job_spec& spec);
/// Whether the spec's model is a script (`model: {script: ...}` or `type: script`).
bool names_a_script(const fields& top);
/// What a script's model cannot run with (function mode, averaging, a device backend for the
/// native worker), as the error at the field at fault; called once the spec is read.
result<void> check_script_model(const spec_parser& p, const fields& top, const job_spec& spec);

/// Reads the required `optimizer:` section of `top` into spec.optimizer (it looks at
/// `consistency:` too: clip_norm and a schedule are refused with averaging:K).
result<void> parse_optimizer(const spec_parser& p, const fields& top, job_spec& spec);

/// Reads the optional `sparse_optimizer:` section of `top` into spec.sparse_optimizer (refused
/// without model.embeddings; read after the model).
result<void> parse_sparse_optimizer(const spec_parser& p, const fields& top, job_spec& spec);

/// What model.embeddings ask of the data set: format ctr, and field indices below its n_fields
/// (the error at the field at fault); called once dataset and model are read.
result<void> check_embeddings(const spec_parser& p, const fields& top, const job_spec& spec);

/// Reads workers, shards, gpus_per_worker, backend, precision, slice_size, host_reduce,
/// placement and replicas from `top` into spec (after the model and the consistency: a model
/// with embeddings gets sparse_slice_size, replicas need bsp).
result<void> parse_resources(const spec_parser& p, const fields& top, job_spec& spec);

/// Reads `function:` (deadline_s, memory_mb, chunks_per_invocation) into spec.function;
/// refused with a precision other than fp32 (read after the resources).
result<void> parse_function(const spec_parser& p, const entry& e, job_spec& spec);

/// Reads `schedule:`, a list of changes at increasing steps, into spec.schedule; each change's
/// count is checked against spec.workers or spec.shards (read after the resources).
result<void> parse_schedule(const spec_parser& p, const entry& e, job_spec& spec);

}  // namespace coach::scheduler::detail
