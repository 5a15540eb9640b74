#pragma once
// worker::tables_file: a trained model's embedding tables, kept beside its .safetensors file
// (worker/model_file.hpp) in a safetensors file of their own (docs/sparse.md, "Saved tables"):
//
//   X.safetensors          the dense parameters, as for every model
//   X.tables.safetensors   for table t: "t.ids" (U64, [n], ascending: the rows some step
//                          touched) and "t.weight" (F32, [n, dim], their values)
//
// A row not in the file was never touched: its value is its initial one, sparse::init_row of
// (coach.seed, t, row, the table's init_scale), both in the metadata (coach.seed, coach.tables:
// a JSON array of {rows, dim, init_scale}), so a reader can make any row it needs. Beside, not
// inside: tables of 10^8 rows are gigabytes that the dense file's readers (PyTorch's
// load_state_dict) have no use for. Loaded in Python with safetensors.numpy.load_file.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "sparse/row_store.hpp"
#include "worker/model_file.hpp"
#include "worker/network.hpp"

namespace coach::worker {

/// The tables file of the model file `model_path`: X.tables.safetensors for X.safetensors, else
/// model_path + ".tables.safetensors".
std::string tables_path(const std::string& model_path);

/// The tables file of `net` (its tables) holding every row of `rows` (every shard's
/// sparse::row_store transfers, whose optimizer keeps `state` floats per element: the values
/// are kept, the state left out). Errors: protocol_error from a malformed transfer.
result<safetensors_file> pack_tables(const network& net, std::uint64_t seed,
                                     std::span<const std::vector<std::byte>> rows,
                                     const sparse::row_optimizer_config& optimizer);

/// A store holding every bucket, with the rows of a tables file of `net` (the rows not in it
/// are made at their initial values when read): what evaluation reads. Errors
/// (invalid_argument naming the tensor): a table's tensors missing, of another dtype or
/// shape, ids not ascending or not below the table's rows, metadata that disagrees with `net`.
result<sparse::row_store> unpack_tables(const network& net, const safetensors_file& file);

}  // namespace coach::worker
