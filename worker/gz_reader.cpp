#include "worker/gz_reader.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

namespace coach::worker::detail {

namespace fs = std::filesystem;

gz_reader::gz_reader(gz_reader&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)) {}

gz_reader::~gz_reader() {
  if (file_ != nullptr) gzclose_r(file_);
}

namespace {

/// What a file named .gz holds instead of gzip data, from its first bytes.
std::string not_gzip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char b[4] = {};
  in.read(reinterpret_cast<char*>(b), sizeof b);
  const auto n = std::size_t(std::max<std::streamsize>(in.gcount(), 0));
  if (n == 0)
    return coach::format("{}: is empty, not gzip data (a .gz file starts with 1f 8b)", path);
  std::string hex;
  for (std::size_t i = 0; i < n; ++i) {
    char two[4];
    std::snprintf(two, sizeof two, "%02x", unsigned(b[i]));
    if (i) hex += ' ';
    hex += two;
  }
  return coach::format(
      "{}: is not gzip data though its name ends in .gz: it starts with {}, gzip with 1f 8b "
      "(compress it with gzip, or drop .gz from its name)",
      path, hex);
}

}  // namespace

result<gz_reader> gz_reader::open(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) {
    return fail(errc::not_found, "{}: file not found", path);
  }
  if (ec) return fail(errc::io_error, "{}: cannot open: {}", path, ec.message());
  // A folder where a file belongs is bad input (exit 2), as a missing file is.
  if (st.type() == fs::file_type::directory) {
    return fail(errc::invalid_argument, "{}: is a directory, expected a data file", path);
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
  // A name ending in .gz promises gzip data: plain bytes read as they are would fail later,
  // as a CSV row of one column or a wrong magic, saying nothing of the name.
  if (path.ends_with(".gz") && r.direct())
    return fail(errc::invalid_argument, "{}", not_gzip(path));
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
