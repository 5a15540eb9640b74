#pragma once
// worker::external_rows: the rows region of an external compute process whose script declares
// embedding tables (coach.torch.Embedding; docs/wire.md "Rows of a script's tables").
//
// The parameter region has the flat vector's fixed size; a step's rows do not: each step looks up
// other rows, as many as its batch touches. So they get a second shared-memory file, created by
// Coach when a step (or an evaluation's `pull`) first needs one and recreated, twice as large or
// as large as needed, when a later one needs more room: the message that needs it names the new
// file (`rows_shm`) and its size; the process maps it and drops the old one. Coach unlinks the
// file once the process answered that message (both have it mapped), as for the parameter
// region. Layout: table after table, each its rows' values (rows x dim float32, in the order the
// ids were given), then, at `rows_grads_offset` (a multiple of 64), the same for the gradients.
//
// Not thread-safe: owned by its external_process.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace coach::worker {

class shared_rows {
 public:
  shared_rows() = default;
  ~shared_rows();
  shared_rows(const shared_rows&) = delete;
  shared_rows& operator=(const shared_rows&) = delete;

  /// At least `bytes` mapped. True when a new file was made (its path() is to be sent; unlink()
  /// once the process answered). Errors: io_error naming the file (`who` in the message).
  result<bool> reserve(std::size_t bytes, std::string_view who);
  /// Removes the file's name (both sides keep their mappings).
  void unlink() noexcept;
  char* data() const noexcept { return static_cast<char*>(map_); }
  std::size_t size() const noexcept { return bytes_; }
  const std::string& path() const noexcept { return path_; }

 private:
  void release() noexcept;
  void* map_ = nullptr;
  std::size_t bytes_ = 0;
  std::string path_;  ///< empty once unlinked
};

/// The byte offsets of a step's rows in the region: values of table t at values[t], gradients
/// at grads[t]; `bytes` the region needed.
struct rows_placement {
  std::vector<std::size_t> values;
  std::vector<std::size_t> grads;
  std::size_t grads_offset = 0;
  std::size_t bytes = 0;
};

/// Where `counts[t]` rows of `dims[t]` floats go, with (`with_grads`) or without gradients.
rows_placement place_rows(std::span<const std::size_t> counts, std::span<const std::uint32_t> dims,
                          bool with_grads);

}  // namespace coach::worker
