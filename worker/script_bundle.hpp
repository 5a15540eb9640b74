#pragma once
// worker::script_bundle: the files of a script's folder as they travel with a script job to a
// cluster (coach submit -> the scheduler -> each node of the job), and the private folder a host
// writes them into and runs the script from (docs/python.md "On a cluster of coach-nodes"; the
// bytes in docs/wire.md "Script bundles").
//
// read_script_folder takes every regular file under the script's folder (a symbolic link to a
// file is read as the file; one to a folder is not followed), skipping names that start with
// '.' and `__pycache__` folders, at most max_bundle_bytes together. pack_bundle and
// unpack_bundle turn the files into one frame and back; unpack_bundle never trusts its input:
// a path that is absolute, has a `..` or `.` component, an empty one, a NUL, or that names a
// file twice or a file as a folder is refused in one line. script_folder is a folder made for
// one job (a fresh name, mode 0700) that goes, with everything in it, with its last holder.
//
// Plain functions and one small class: no threads, no sockets.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace coach::worker {

/// The most bytes the files of a script's folder may hold together (64 MiB).
inline constexpr std::uint64_t max_bundle_bytes = std::uint64_t(64) << 20;
/// The most files a bundle may hold.
inline constexpr std::size_t max_bundle_files = 1 << 16;
/// The longest path (bytes) of a file in a bundle.
inline constexpr std::size_t max_bundle_path = 4096;
/// The most bytes a packed bundle may have: the files, their paths and 16 bytes a file.
inline constexpr std::uint64_t max_packed_bundle_bytes =
    max_bundle_bytes + (std::uint64_t(8) << 20);

/// One file of a bundle.
struct bundle_file {
  std::string path;         ///< relative to the folder, components separated by '/'
  bool executable = false;  ///< written with mode 0700 (else 0600)
  std::string data;
  friend bool operator==(const bundle_file&, const bundle_file&) = default;
};

/// The files under `dir`, sorted by path. Errors: invalid_argument when they hold more than
/// `limit` bytes together (naming the folder, their size and the limit) or are more than
/// max_bundle_files; not_found when `dir` is not a folder; io_error when a file cannot be read.
result<std::vector<bundle_file>> read_script_folder(const std::string& dir,
                                                    std::uint64_t limit = max_bundle_bytes);

/// Why `path` may not name a file of a bundle (one line), or nothing when it may.
std::optional<std::string> bundle_path_problem(std::string_view path);

/// The files as one frame (docs/wire.md "Script bundles").
std::vector<std::byte> pack_bundle(std::span<const bundle_file> files);

/// The files of a packed bundle. Errors (protocol_error, one line): bytes that are not a bundle
/// (the magic, a length past the end, bytes left over), over the limits above, or a path that
/// bundle_path_problem refuses or that names a file twice or a file as a folder.
result<std::vector<bundle_file>> unpack_bundle(std::span<const std::byte> bytes);

/// A folder of its own for one job's files: `parent/PREFIX.XXXXXX` (mkdtemp, mode 0700), removed
/// with everything in it when the last holder lets go. `parent` is made (mode 0700) when it is
/// not there; one that is there must be a folder of this user that others cannot write.
class script_folder {
 public:
  /// Errors: io_error naming the folder that cannot be made or is not private.
  static result<std::shared_ptr<script_folder>> make(const std::string& parent,
                                                     std::string_view prefix);
  ~script_folder();
  script_folder(const script_folder&) = delete;
  script_folder& operator=(const script_folder&) = delete;

  const std::string& path() const noexcept { return path_; }
  /// Writes the files (REQUIRES: from unpack_bundle or read_script_folder; the folder has none
  /// of them yet). Errors: io_error naming the file.
  result<void> write(std::span<const bundle_file> files) const;

 private:
  explicit script_folder(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace coach::worker
