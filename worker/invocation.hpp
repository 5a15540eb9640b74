#pragma once
// worker::invocation: what one function-mode invocation computes, and the messages between a
// worker and its invocation child (`coach-invocation`, apps/coach_invocation.cpp) over pipes.
//
// Function mode (`function: {deadline_s, memory_mb, chunks_per_invocation}`) runs a worker's
// training as a sequence of bounded child processes (worker::bounded_process). The worker stays
// in the job (it pulls and pushes, as a function's storage would); each invocation gets the
// model once (`invocation_setup`) and then up to chunks_per_invocation tasks, one per step: the
// step's parameters and its chunk rows, and answers each with what the worker pushes (a gradient
// under bsp, a model delta under averaging). The child holds the model, its buffers and a step's
// rows: the memory the cap bounds. A model with embedding tables (model.embeddings, bsp only)
// gets, with each task, the step's lookups and the values of the distinct rows they touch (the
// worker pulled them from the shards: worker/row_puller.hpp) and answers their row gradients
// too: an invocation holds one step's rows, never a table, so a worker under a small cap trains
// tables many times its size (docs/sparse.md, "Function mode"). A task answered is committed (the
// worker pushes it); a child killed at its deadline or for memory leaves its task unanswered, and
// the worker gives it to the next invocation: nothing committed is lost, nothing is pushed twice.
//
// Wire format, every message: u32 magic 'COIV', u32 kind, u64 payload bytes, payload (native
// endianness: both ends are one build on one host). Reads refuse wrong magic, unknown kinds
// and sizes that disagree with their counts.

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "worker/model_config.hpp"
#include "worker/network.hpp"

namespace coach::worker {

/// The model and the rule of one invocation's tasks.
struct invocation_setup {
  model_config model;  ///< the job's model section
  int inputs = 0;      ///< features of a row
  int classes = 0;
  /// One row as an image, C x H x W with C H W = inputs; {0, 0, 0}: 1 x 1 x inputs.
  std::array<int, 3> shape{0, 0, 0};
  int max_batch = 0;  ///< rows of one local step at most
  /// model.embeddings: the data set's categorical fields (the tables resolve against them, as
  /// network::for_data does); `inputs` is then the dense features alone. 0 without tables.
  std::uint32_t fields = 0;
  bool averaging = false;      ///< answer model deltas (local_averaging) instead of gradients
  kernels::sgd_options local;  ///< averaging: the local steps' optimizer
  friend bool operator==(const invocation_setup& a, const invocation_setup& b) {
    // The same model: the same layers (the mlp shorthand travels expanded).
    return expanded_layers(a.model) == expanded_layers(b.model) &&
           a.model.input_shape == b.model.input_shape && a.shape == b.shape &&
           a.model.embeddings == b.model.embeddings && a.model.interaction == b.model.interaction &&
           a.fields == b.fields && a.inputs == b.inputs && a.classes == b.classes &&
           a.max_batch == b.max_batch && a.averaging == b.averaging &&
           a.local.learning_rate == b.local.learning_rate && a.local.momentum == b.local.momentum &&
           a.local.weight_decay == b.local.weight_decay;
  }
};

/// One table's part of a task (a model with embedding tables): the step's lookups as
/// worker::table_batch holds them, and the values of the distinct rows they touch.
struct invocation_rows {
  std::vector<std::uint32_t> offsets;  ///< samples + 1: sample b's lookups [offsets[b], [b + 1])
  std::vector<std::uint32_t> local;    ///< per lookup: its row's index among the distinct rows
  std::vector<float> values;           ///< the distinct rows, row after row (rows x dim)
  friend bool operator==(const invocation_rows&, const invocation_rows&) = default;
};

/// One step of an invocation: the parameters and the rows to train on.
struct invocation_task {
  std::vector<float> params;         ///< num_params of the setup's model
  std::vector<float> x;              ///< rows x inputs, row-major
  std::vector<std::int32_t> y;       ///< rows labels
  std::vector<std::uint32_t> sizes;  ///< local steps (averaging; their sum is rows), else {rows}
  /// Averaging: the local steps run this many times over the rows (a whole job in one
  /// invocation: bench/function_bench); else 1.
  std::uint32_t passes = 1;
  std::uint64_t noise = 0;              ///< dropout's masks (noise_key of the worker and step)
  std::vector<invocation_rows> tables;  ///< one per table of a model with tables, else none
  friend bool operator==(const invocation_task&, const invocation_task&) = default;
};

/// The answer to a task: what the worker pushes.
struct invocation_result {
  std::uint64_t samples = 0;
  double loss_sum = 0;
  std::vector<float> out;  ///< gradient of the summed loss (bsp) or n (w0 - w) (averaging)
  std::uint64_t peak_rss_bytes = 0;  ///< the child's resident high-water mark so far
  /// A model with tables: per table, the gradient of the loss sum with respect to each of the
  /// task's distinct rows (rows x dim, in their order).
  std::vector<std::vector<float>> row_grads;
  friend bool operator==(const invocation_result&, const invocation_result&) = default;
};

result<void> write_setup(int fd, const invocation_setup& s);
result<void> write_task(int fd, const invocation_task& t);
result<void> write_result(int fd, const invocation_result& r);
/// The next message of its kind; nullopt at a clean end of the stream (the other end closed it
/// between two messages). Errors: io_error (read failed, stream cut mid-message), protocol_error
/// (wrong magic or kind, inconsistent sizes).
result<std::optional<invocation_setup>> read_setup(int fd);
result<std::optional<invocation_task>> read_task(int fd);
result<std::optional<invocation_result>> read_result(int fd);

/// The network of a setup (with embeddings: network::for_data over a data set of `inputs` dense
/// features and `fields` categorical ones); invalid_argument when the layers do not fit its rows.
result<network> invocation_network(const invocation_setup& setup);

/// Computes one task with `setup`'s model on `be` (what the child does; also used in tests to
/// check the child's bits). Errors: invalid_argument when the task does not fit the setup.
result<invocation_result> compute_invocation(const invocation_setup& setup,
                                             const invocation_task& task, kernels::backend& be);

/// The child's life: reads the setup from `in_fd`, then answers tasks on `out_fd` until `in_fd`
/// ends or `max_tasks` (0: no limit) are answered. Returns the process exit code: 0, or
/// exit_out_of_memory (bounded_process.hpp) when an allocation failed, or 1 on a protocol error
/// (reported on stderr).
int run_invocation(int in_fd, int out_fd, std::uint64_t max_tasks);

}  // namespace coach::worker
