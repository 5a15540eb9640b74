#pragma once
// worker::sparse_batch: the sparse half of a model with embedding tables (model.embeddings,
// docs/sparse.md "The model"): which rows of each table a batch looks up, and (in
// sparse_batch.cpp, as members of network_runner) the forward and backward pass and the
// evaluation of such a model, whose rows the caller pulls from the shards.
//
// Row ids: value v of categorical field f looks up row
//   embedding_row(f, v, R) = counter_rng::mix((uint64(f) << 32) | v) mod R
// of a table of R rows: the hashing trick (Weinberger et al. 2009), so a table of any size
// takes any vocabulary, colliding values sharing a row. The field is mixed in so that a table
// shared by several fields (per_field: false) keeps their values apart: value 7 of field 2 and
// value 7 of field 5 are different rows (but by chance). A missing cell (ctr_missing) is a
// value like the others: each field's "missing" has its row, which learns what missing means.
// Every bag of a table therefore holds exactly one id per field of the table.
//
// Input layout: sample b's input to the layers is its dense features (dataset::x), then, for
// each table t in order, the pool (sum or mean) of its bag's rows, at columns
// [table_column(t), table_column(t) + dim). With interaction dot (DLRM's), then the dot product
// of every two tables' pooled vectors e_i . e_j, i < j, in the order (0, 1), (0, 2), ..., (1, 2),
// ..., from pairs_column(): T (T - 1) / 2 inputs, computed on the host after the pooling, before
// the upload. Backward, the gradient g of pair (i, j) adds g e_j to table i's block of the
// input gradient and g e_i to table j's, pair after pair in that order, before the blocks
// become row gradients: deterministic, and exactly the chain rule through the products.
//
// A step (the worker): batch = sparse_batch(net, data, indices); pull batch[t].rows.rows of
// each table from the shards that hold them; runner.forward_backward(..., batch, pulled, grad,
// row_grads); push grad (dense) and row_grads[t] for batch[t].rows.rows (ps::row_part). Each
// row moves once each way a step, however many samples look it up.

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/counter_rng.hpp"
#include "sparse/bag_lookup.hpp"
#include "worker/dataset.hpp"
#include "worker/network.hpp"

namespace coach::worker {

/// The row of a table of `rows` rows that value `value` of field `field` looks up (see above).
/// REQUIRES: rows >= 1.
inline std::uint64_t embedding_row(int field, std::uint32_t value, std::uint64_t rows) {
  return kernels::counter_rng::mix((std::uint64_t(std::uint32_t(field)) << 32) | value) % rows;
}

/// One table's lookups for a batch.
struct table_batch {
  std::uint32_t table = 0;  ///< index in network::tables()
  /// Sample b's ids are lookups [offsets[b], offsets[b + 1]) (one per field of the table);
  /// indices.size() + 1 entries.
  std::vector<std::uint32_t> offsets;
  sparse::bag_rows rows;  ///< the distinct rows to pull (ascending) and each lookup's index
};

/// The lookups of the samples `indices` of `data` in every table of `net`, one entry per
/// table, in table order. REQUIRES: data's fields and rows cover the tables and indices.
std::vector<table_batch> sparse_batch(const network& net, const dataset& data,
                                      std::span<const std::uint32_t> indices);

}  // namespace coach::worker
