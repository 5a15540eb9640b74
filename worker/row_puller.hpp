#pragma once
// worker::row_puller: a worker's sparse rows for one step (docs/design.md "Sparse tables"): the
// rows its batch looks up, asked of the shards that hold them (rows_pull), taken from their
// answers (rows), and the row gradients split by holder for the step's pushes.
//
// A row is held by the shard that owns its key (ps::row_key_of, under the configuration of the
// step); a shard that no longer holds one (it moved with its keys) names its key in the answer,
// and the row is asked again of its new holder once the configuration that moved it is here
// (requests() after the worker took it). Every row is taken once: a second answer for it, a row
// not asked for or values of the wrong size are errors, and nothing of that answer is taken.
//
// Plain logic: worker::worker_server sends what requests() returns and feeds accept(); tests
// drive it with made-up answers. Threads: one owner.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "common/error.hpp"
#include "wire/message.hpp"
#include "wire/row_frames.hpp"

namespace coach::worker {

/// The shard that holds a dense key under the configuration in use.
using key_owner = std::function<std::uint32_t(std::uint64_t key)>;

/// The row frames a message to one shard carries, with the memory behind them.
struct row_parts_for {
  std::vector<wire::row_frames_part> parts;
  std::shared_ptr<const void> owner;
};

class row_puller {
 public:
  /// For a model whose tables have rows of `dims` floats and `num_params` dense parameters.
  row_puller(std::vector<std::uint32_t> dims, std::uint64_t num_params);

  /// Starts step `step`: `rows[t]` the rows of table t its batch looks up, ascending, each once
  /// (sparse::unique_rows). Forgets the previous step.
  void start(std::int64_t step, std::vector<std::vector<std::uint64_t>> rows);
  /// The step started last; -1 before the first.
  std::int64_t step() const noexcept { return step_; }

  /// The rows not asked for yet, by the shard `owner` says holds them: what a rows_pull to each
  /// carries. They count as asked from now on.
  std::map<std::uint32_t, row_parts_for> requests(const key_owner& owner);
  /// Takes shard `from`'s rows answer of the started step (other steps' answers are ignored:
  /// true). Errors (protocol_error; nothing taken): a malformed message, a table or row not
  /// asked of that shard, a row answered twice, values not of the table's dim. Rows asked of it
  /// whose keys it named as moved are asked again by the next requests() (call it once
  /// moved_version() is the configuration's).
  result<void> accept(const wire::wire_message& m, std::uint32_t from);
  /// Shard `shard`'s primary was lost and its backup took over (ps/replica_chain.hpp): the rows
  /// asked of it and not answered are asked again (of the new primary) by the next requests().
  void ask_again(std::uint32_t shard);
  /// The configuration version the moved rows need before they are asked again (0: none moved).
  std::uint64_t moved_version() const noexcept { return moved_version_; }
  /// Whether every row of the step is here.
  bool complete() const noexcept { return missing_ == 0; }

  /// The rows of table t, as start() gave them, and their values (rows x dim), once complete().
  std::span<const std::uint64_t> rows(std::uint32_t t) const { return tables_[t].rows; }
  std::span<const float> values(std::uint32_t t) const { return tables_[t].values; }

  /// The row gradients of the step split by holder: `grads[t]` holds table t's (rows x dim, in
  /// start()'s order). Rows of no gradient are still sent (their sum may be zero; the shard's
  /// lazy update of a zero gradient still moves Adam's moments, as a dense one would).
  std::map<std::uint32_t, row_parts_for> push_parts(const key_owner& owner,
                                                    std::vector<std::vector<float>> grads) const;

 private:
  enum class row_state : std::uint8_t { to_ask, asked, here };
  struct table {
    std::vector<std::uint64_t> rows;
    std::vector<float> values;
    std::vector<row_state> state;
    std::vector<std::uint32_t> asked_of;  ///< the shard each asked row was asked of
  };
  /// The position of `row` in table t's rows, or -1.
  std::ptrdiff_t find(std::uint32_t t, std::uint64_t row) const;

  std::vector<std::uint32_t> dims_;
  std::uint64_t num_params_ = 0;
  std::int64_t step_ = -1;
  std::vector<table> tables_;
  std::size_t missing_ = 0;
  std::uint64_t moved_version_ = 0;
};

}  // namespace coach::worker
