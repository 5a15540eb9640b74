#pragma once
// worker::external_layout: the parameters of a model that a user's script computes (an external
// compute process, docs/wire.md "External compute processes"): its named float32 tensors in the
// order of the flat parameter vector, each a `param` (trained by gradients) or a `buffer` (a
// statistic such as batch norm's running mean: the shards keep the samples-weighted mean of the
// workers' values), and the sizes of the script's training and test sets.
//
// A script may also declare embedding tables (coach.torch.Embedding, docs/python.md): their rows
// live in the shards as a native model's model.embeddings do (docs/sparse.md), never in the flat
// vector; each step the process names the rows its batch looks up (`lookup` / `ids`) and gets
// their values in a rows region of shared memory (external_rows.hpp).
//
// The first process of a job registers the layout and its initial values (external_model);
// every later one is checked against it (layout_difference: one line naming the first tensor
// that differs).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "worker/dataset.hpp"

namespace coach::worker {

enum class tensor_kind { param, buffer };
/// "param" or "buffer".
std::string_view to_string(tensor_kind k) noexcept;

/// One named tensor of an external model.
struct external_tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  tensor_kind kind = tensor_kind::param;
  std::size_t offset = 0;  ///< first float in the flat vector
  std::size_t size() const noexcept;
  friend bool operator==(const external_tensor&, const external_tensor&) = default;
};

/// One embedding table a script declares: `rows` ids of `dim` floats, held by the shards.
struct external_table {
  std::string name;          ///< the module's path in the script's model ("emb.0")
  std::uint64_t rows = 0;    ///< ids in [0, rows); in [1, 2^40]
  std::uint32_t dim = 0;     ///< floats per row; in [1, 65536]
  float init_scale = 0.01f;  ///< initial values uniform in [-init_scale, init_scale]
  friend bool operator==(const external_table&, const external_table&) = default;
};

struct external_layout {
  std::vector<external_tensor> tensors;
  std::vector<external_table> tables;  ///< the script's embedding tables, in table order
  std::size_t floats = 0;              ///< the flat vector's length (the tensors' sizes summed)
  std::uint64_t samples = 0;           ///< training samples: a step's indices lie in [0, samples)
  std::uint64_t test_samples = 0;      ///< 0: the script does not evaluate
  std::string framework;               ///< as the script said (logged; not compared)
};

/// The most floats an external model may have (16 GiB of parameters).
inline constexpr std::size_t max_external_floats = std::size_t(1) << 32;
/// The most tensors a layout may list.
inline constexpr std::size_t max_external_tensors = 1 << 20;

/// The layout of a `hello` message (a JSON object as text). Errors (protocol_error, one line):
/// fields missing or of the wrong type; invalid_argument: a dtype other than float32 (naming
/// the tensor), a name empty or repeated, a dimension < 0, no tensors, too many floats, no
/// samples, a table's rows outside [1, 2^40], dim outside [1, 65536] or init_scale < 0.
result<external_layout> parse_hello(std::string_view json_text);

/// `layout` as the JSON text of a `hello` (op, protocol, samples, test_samples, framework,
/// tensors): what parse_hello reads back into the same layout. A registered layout travels to a
/// cluster's hosts so (worker/script_job.hpp).
std::string hello_json(const external_layout& layout);

/// The first difference of `got` from the `registered` layout, in one line ("tensor
/// 'fc.weight' has shape [10, 64] where the first process registered [10, 128]"), or nothing
/// when they match (names, shapes, kinds and order; the tables; the sample counts too).
std::optional<std::string> layout_difference(const external_layout& registered,
                                             const external_layout& got);

/// "[10, 128]".
std::string shape_text(const std::vector<std::int64_t>& shape);

/// How a job runs its script (the spec's `model: {script: ...}` and where it runs).
struct script_options {
  std::string python;             ///< the interpreter
  std::string script;             ///< absolute path
  std::vector<std::string> args;  ///< after the script's path
  std::string package_dir;        ///< put first on PYTHONPATH (the `coach` package's folder)
  std::uint64_t seed = 1;         ///< COACH_SEED
  std::uint64_t job = 0;          ///< COACH_JOB
  double start_timeout_s = 120;   ///< until `hello`
  int threads = 0;                ///< OMP_NUM_THREADS for each process (0: not set)
  /// Each process's memory cap (function.memory_mb; 0: none), put on it as it starts
  /// (memory_cap: a cgroup of its own, else RLIMIT_DATA).
  std::uint64_t memory_bytes = 0;
};

class external_pool;

/// A job's external model: the registered layout and initial values, and the pool that starts
/// (and keeps warm) the processes of its script.
struct external_model {
  external_layout layout;
  std::shared_ptr<const std::vector<float>> initial;  ///< layout.floats values
  std::shared_ptr<external_pool> pool;
};

/// The data set a script's job runs on as Coach sees it: only its sizes (the script reads its own
/// samples by the indices it is given): layout.samples training rows and test_samples test rows
/// (at least 1), no features, no classes.
dataset_pair script_dataset(const external_layout& layout);

}  // namespace coach::worker
