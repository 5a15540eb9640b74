#pragma once
// sparse::row_store: the rows of a job's embedding tables that one shard holds, their optimizer
// state, and the sum of a step's row gradients — without actors or sockets (the shard's actor
// turns pulls and pushes into calls here).
//
// A shard holds the rows whose bucket (sparse/row_hash.hpp) lies in the bucket ranges it owns.
// A row exists once something touched it: a read creates it with its initial values
// (init_row: a pure function of seed, table and row) and its optimizer's initial state, so the
// memory a table takes follows the rows used, not the rows declared, and no shard needs to know
// which rows another created.
//
// A step: add() takes each worker's row gradients (sums over its samples) in rank order; apply()
// scales each touched row's sum by 1 / the step's samples and updates that row alone
// (sparse/row_optimizer.hpp). Summation follows the calls' order, so with contributions added
// in rank order a row's update is bitwise the same whichever shard holds it and however the
// buckets are spread.
//
// Moving rows: release() takes the rows of some bucket ranges out, with their optimizer state,
// into a transfer blob; adopt() on another store takes them in. save() writes every row held
// without releasing it (checkpoints, replicas). The blob's layout (docs/sparse.md), native
// little-endian:
//   u32 magic "CSR1", u32 format 1, u32 tables, u32 state floats per element
//   per table: u32 dim, u64 rows n, n x u64 row ids, n x (dim * (1 + state)) floats
//
// Not thread-safe: one caller at a time.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/error.hpp"
#include "sparse/row_hash.hpp"
#include "sparse/row_index.hpp"
#include "sparse/row_optimizer.hpp"

namespace coach::sparse {

/// One embedding table of a model, as declared (`embedding` / `embedding_bag` layers).
struct table_config {
  std::uint64_t rows = 0;    ///< ids in [0, rows); > 0
  std::uint32_t dim = 0;     ///< floats per row; > 0
  float init_scale = 0.01f;  ///< initial values uniform in [-init_scale, init_scale]
  friend bool operator==(const table_config&, const table_config&) = default;
};

/// Buckets [first, end).
struct bucket_range {
  std::uint32_t first = 0;
  std::uint32_t end = 0;
  friend bool operator==(const bucket_range&, const bucket_range&) = default;
};

/// Counts of what a store holds.
struct store_stats {
  std::uint64_t rows = 0;         ///< rows held, every table
  std::uint64_t value_bytes = 0;  ///< bytes of the rows' values and optimizer state
  std::uint64_t index_bytes = 0;  ///< bytes of the row indexes
};

class row_store {
 public:
  /// A store of `tables` (validated: rows and dim > 0, init_scale finite and >= 0) updated by
  /// `opt` (validated), owning the buckets in `owned`.
  static result<row_store> create(std::uint64_t seed, std::vector<table_config> tables,
                                  row_optimizer_config opt, std::span<const bucket_range> owned);

  const std::vector<table_config>& tables() const noexcept { return tables_; }
  const row_optimizer_config& optimizer() const noexcept { return opt_; }
  /// Whether the store owns `bucket`.
  bool owns(std::uint32_t bucket) const noexcept {
    return bucket < owned_.size() && owned_[bucket];
  }

  /// Copies the current values of `rows` of `table` into `out` (rows.size() * dim floats, row
  /// after row), creating the rows not held yet. Errors (protocol_error, nothing created): an
  /// unknown table, a row >= its rows, a row in a bucket this store does not own, a wrong size.
  result<void> read(std::uint32_t table, std::span<const std::uint64_t> rows, std::span<float> out);

  /// The checks of read() and add() alone (`what` names the request in the message: "a read").
  result<void> check(std::uint32_t table, std::span<const std::uint64_t> rows, std::size_t floats,
                     const char* what) const;

  /// Adds one worker's gradients for `rows` of `table` (rows.size() * dim floats, the sums over
  /// its samples) to the open step's sums, creating the rows not held yet. Call in rank order.
  /// Errors as read(); nothing is added then.
  result<void> add(std::uint32_t table, std::span<const std::uint64_t> rows,
                   std::span<const float> grads);
  /// Applies the open step: every row added to since the last apply() is updated with its sum
  /// times `scale` (1 / the step's samples) at rate `learning_rate`, `step_number` the job's step
  /// counted from 1 (lazy_adam's bias correction). Returns the rows updated.
  std::size_t apply(float scale, float learning_rate, std::int64_t step_number);
  /// Rows added to since the last apply().
  std::size_t pending_rows() const noexcept;

  /// Takes the rows of the buckets in `ranges` out (values and optimizer state) and stops owning
  /// those buckets. Errors (protocol_error, nothing changed): a bucket not owned, a step open
  /// (pending_rows() > 0).
  result<std::vector<std::byte>> release(std::span<const bucket_range> ranges);
  /// Takes the rows of a blob from release() or save() and the buckets in `ranges` (whose rows
  /// the blob must hold: every row of the blob in them). Errors (protocol_error, nothing
  /// changed): a malformed blob, tables or optimizer state that disagree, a row out of its table
  /// or out of `ranges`, a row held already, a bucket owned already.
  result<void> adopt(std::span<const std::byte> blob, std::span<const bucket_range> ranges);
  /// Takes the rows of a blob from release() or save() into a store that owns every bucket
  /// (an evaluator's copy of all the shards' rows). Errors as adopt(), and a store that lacks a
  /// bucket.
  result<void> merge(std::span<const std::byte> blob);
  /// merge() of only the blob's rows that `keep[t]` (ascending) lists for table t; the blob is
  /// checked whole as by merge(). An evaluator takes the rows its test set looks up, not every
  /// row of the job (tables of 10^8 rows). REQUIRES: keep.size() == tables().size().
  result<void> merge(std::span<const std::byte> blob,
                     std::span<const std::vector<std::uint64_t>> keep);
  /// Every row held, in release()'s layout (rows in no particular order), the store unchanged.
  std::vector<std::byte> save() const;

  /// The rows of `table` held, ascending (a saved model's tables file).
  std::vector<std::uint64_t> held_rows(std::uint32_t table) const;
  /// Sets the values of `row` of `table` (dim floats), creating it if not held (its optimizer
  /// state then initial): a store rebuilt from a saved model's values. Errors as read().
  result<void> put(std::uint32_t table, std::uint64_t row, std::span<const float> values);
  /// The values of `row` of `table` if held (tests, evaluation), else empty.
  std::span<const float> find(std::uint32_t table, std::uint64_t row) const;
  /// The optimizer state of a held row, else empty.
  std::span<const float> find_state(std::uint32_t table, std::uint64_t row) const;
  store_stats stats() const noexcept;

 private:
  /// One table's rows: an index and an arena of slots (values then state), in blocks so that a
  /// growing table never copies the rows it has.
  struct table_rows {
    row_index index;
    std::vector<std::unique_ptr<float[]>> blocks;
    std::vector<std::uint32_t> free_slots;
    std::uint32_t next_slot = 0;
    /// The open step's sums: row -> position in sums, rows in order of first add.
    row_index pending;
    std::vector<std::uint64_t> pending_rows;
    std::vector<std::uint32_t> pending_slots;  ///< each pending row's slot
    std::vector<float> sums;
    std::vector<std::uint32_t> scratch_slots;  ///< read()'s
    std::size_t stride = 0;                    ///< floats a slot: dim * (1 + state per element)
  };
  static constexpr std::uint32_t block_rows = 4096;
  /// Rows looked up ahead of the one read (their index entries and values prefetched).
  static constexpr std::size_t prefetch_ahead = 8;

  row_store() = default;
  std::size_t stride(std::uint32_t table) const noexcept;
  float* slot_data(std::uint32_t table, std::uint32_t slot) const noexcept;
  /// The slot of (table, row), created with its initial values when not held.
  std::uint32_t slot_of(std::uint32_t table, std::uint64_t row);
  std::uint32_t new_slot(std::uint32_t table);
  /// adopt() and merge(): checks the whole blob (every row within `ranges`), then takes it.
  /// `keep`: empty, every row; else per table the rows to take (ascending).
  result<void> take_in(std::span<const std::byte> blob, std::span<const bucket_range> ranges,
                       std::span<const std::vector<std::uint64_t>> keep = {});

  std::uint64_t seed_ = 0;
  std::vector<table_config> tables_;
  row_optimizer_config opt_;
  std::vector<bool> owned_;
  std::vector<table_rows> rows_;
};

}  // namespace coach::sparse
