#pragma once
// worker::detail::gz_reader: a file read through zlib, gzipped or plain (zlib tells them apart),
// in blocks: what the data set loaders (worker/dataset.hpp) read every file through. Private to
// the loader sources (worker/dataset*.cpp, worker/*_reader.cpp).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "common/error.hpp"

struct gzFile_s;  // zlib's file handle (gzFile)

namespace coach::worker::detail {

/// The read block of the loaders, and the zlib buffer of a gz_reader.
inline constexpr std::size_t block_bytes = std::size_t{1} << 20;

/// A file read through zlib: gzipped or plain, told apart by zlib itself.
class gz_reader {
 public:
  gz_reader() = default;
  gz_reader(const gz_reader&) = delete;
  gz_reader& operator=(const gz_reader&) = delete;
  gz_reader(gz_reader&& other) noexcept;
  ~gz_reader();

  /// Opens `path`; not_found when it does not exist, io_error when it cannot be opened.
  static result<gz_reader> open(const std::string& path);

  /// Reads up to n bytes; fewer only at the end of the data. io_error on corrupt gzip data,
  /// including a gzip stream cut short.
  result<std::size_t> read(void* dst, std::size_t n);

  const std::string& path() const noexcept { return path_; }

  /// True when the file is read as it is (not gzip data being decompressed).
  bool direct() const noexcept;

  /// The size of a file read directly, or nothing (gzip data, or the size cannot be read).
  std::optional<std::uint64_t> plain_size() const;

 private:
  std::string zlib_error();

  gzFile_s* file_ = nullptr;
  std::string path_;
};

}  // namespace coach::worker::detail
