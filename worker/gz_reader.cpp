#include "worker/gz_reader.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

namespace coach::worker::detail {

namespace fs = std::filesystem;

gz_reader::gz_reader(gz_reader&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)) {}

gz_reader::~gz_reader() {
  if (file_ != nullptr) gzclose_r(file_);
}

result<gz_reader> gz_reader::open(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) {
    return fail(errc::not_found, "{}: file not found", path);
  }
  if (ec) return fail(errc::io_error, "{}: cannot open: {}", path, ec.message());
  if (st.type() == fs::file_type::directory) {
    return fail(errc::io_error, "{}: is a directory, expected a file", path);
  }
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    return fail(errc::io_error, "{}: cannot open: {}", path,
                err != 0 ? std::strerror(err) : "out of memory");
  }
  gzbuffer(f, unsigned(block_bytes));
  gz_reader r;
  r.file_ = f;
  r.path_ = path;
  return r;
}

result<std::size_t> gz_reader::read(void* dst, std::size_t n) {
  auto* out = static_cast<unsigned char*>(dst);
  std::size_t done = 0;
  while (done < n) {
    const unsigned want = unsigned(std::min<std::size_t>(n - done, std::size_t{1} << 30));
    const int got = gzread(file_, out + done, want);
    if (got < 0) return fail(errc::io_error, "{}: corrupt gzip data ({})", path_, zlib_error());
    done += std::size_t(got);
    if (unsigned(got) < want) {
      int code = Z_OK;
      gzerror(file_, &code);
      if (code == Z_BUF_ERROR) {
        return fail(errc::io_error, "{}: corrupt gzip data (the compressed stream is cut short)",
                    path_);
      }
      if (code != Z_OK) {
        return fail(errc::io_error, "{}: corrupt gzip data ({})", path_, zlib_error());
      }
      break;
    }
  }
  return done;
}

bool gz_reader::direct() const noexcept {
  return gzdirect(file_) == 1;
}

std::optional<std::uint64_t> gz_reader::plain_size() const {
  if (!direct()) return std::nullopt;
  std::error_code ec;
  const std::uintmax_t n = fs::file_size(path_, ec);
  if (ec) return std::nullopt;
  return std::uint64_t(n);
}

std::string gz_reader::zlib_error() {
  int code = Z_OK;
  const char* msg = gzerror(file_, &code);
  if (code == Z_ERRNO) return std::strerror(errno);
  return msg != nullptr && *msg != '\0' ? msg : "unknown zlib error";
}

}  // namespace coach::worker::detail
