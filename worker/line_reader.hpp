#pragma once
// worker::detail::line_reader: the lines of a text file (plain or gzipped), read through a
// gz_reader one block at a time: the csv loader's input (worker/csv_reader.cpp). Private to the
// loader sources.

#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include "common/error.hpp"
#include "worker/gz_reader.hpp"

namespace coach::worker::detail {

/// The lines of a text file, read through gz_reader one block at a time. A line is handed out
/// without its '\n' (a '\r' before it stays: the csv reader's trim drops it) and may be changed
/// in place; it is valid until the next call.
class line_reader {
 public:
  explicit line_reader(gz_reader in) : in_(std::move(in)), buf_(block_bytes, '\0') {}

  /// The next line, or false at the end of the file. The first line loses a UTF-8 byte-order
  /// mark. Errors: those of gz_reader::read, and a line longer than max_line bytes.
  result<bool> next(std::span<char>& line);

  /// The 1-based number of the line last returned.
  std::size_t line_no() const noexcept { return line_no_; }
  const std::string& path() const noexcept { return in_.path(); }

  static constexpr std::size_t max_line = std::size_t{64} << 20;

 private:
  /// Hands out the line that ends at `nl` (or at the end of the data when nl is null).
  void take_line(const void* nl, std::span<char>& line);
  /// Keeps the unfinished line and reads the next block after it. Errors as next().
  result<void> refill();

  gz_reader in_;
  std::string buf_;
  std::size_t begin_ = 0;  // the unread data is buf_[begin_, end_)
  std::size_t end_ = 0;
  std::size_t scan_ = 0;  // no '\n' in buf_[begin_, scan_)
  bool eof_ = false;
  std::size_t line_no_ = 0;
};

}  // namespace coach::worker::detail
