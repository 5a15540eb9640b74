#pragma once
// wire/row_frames.hpp: the frames that carry sparse rows (docs/wire.md "Sparse rows"): in a
// rows_pull (ids), in its rows answer (ids and values) and after the dense frames of a push
// (ids and gradients). Laid out the same in all three, from a first frame on:
//   tables   u32 per part: the table each part is of
//   per part ids (u64, each row once), then, where values travel, values (f32, ids x dim)
// Readers check the structure (frame counts, sizes, alignment); the receiver checks the tables,
// dims and rows against its model (sparse::row_store::check).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/error.hpp"
#include "wire/message.hpp"

namespace coach::wire {

/// One part: rows of one table, with their values (answers, pushes) or without (pulls).
struct row_frames_part {
  std::uint32_t table = 0;
  std::span<const std::uint64_t> ids;
  std::span<const float> values;
};

/// Appends `parts` to m's frames: the tables frame, then each part's ids and, when
/// `with_values`, its values. The frames point into memory `owner` keeps alive (the tables
/// frame into a vector of its own). No parts: nothing is appended.
void append_row_parts(wire_message& m, std::span<const row_frames_part> parts,
                      const std::shared_ptr<const void>& owner, bool with_values);

/// Reads the parts of m's frames [first, end) (none when first == frames.size()). Errors
/// (protocol_error, naming the kind): a frame count that does not match the tables frame, a
/// frame of a size or alignment its type cannot have, values that are not a whole number of
/// floats per row.
result<std::vector<row_frames_part>> read_row_parts(const wire_message& m, std::size_t first,
                                                    bool with_values);

}  // namespace coach::wire
