// worker/script_bundle.cpp: a script's folder packed, unpacked and written again
// (script_bundle.hpp).
#include "worker/script_bundle.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "common/format.hpp"

namespace coach::worker {
namespace {

namespace fs = std::filesystem;

constexpr char magic[8] = {'C', 'O', 'A', 'C', 'H', 'S', 'B', '1'};
constexpr std::uint32_t flag_executable = 1;
constexpr std::size_t file_header = 16;  // path length u32, flags u32, size u64

double mib(std::uint64_t bytes) {
  return double(bytes) / double(1 << 20);
}

/// A name read_script_folder leaves out: a dot-file or dot-folder, or Python's byte-code cache.
bool skipped(const fs::path& name) {
  const auto s = name.filename().string();
  return s.empty() || s[0] == '.' || s == "__pycache__";
}

/// The regular files under `root` (not yet read), their paths relative to it, sorted.
result<std::vector<std::pair<std::string, fs::path>>> list_files(const fs::path& root) {
  std::vector<std::pair<std::string, fs::path>> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const auto& e = *it;
    if (skipped(e.path())) {
      if (e.is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!e.is_regular_file(ec)) continue;  // folders are walked; links to folders, fifos are not
    out.emplace_back(e.path().lexically_relative(root).generic_string(), e.path());
  }
  if (ec)
    return fail(errc::io_error, "{}: cannot list the script's folder: {}", root.string(),
                ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

result<std::string> read_whole(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return fail(errc::io_error, "{}: cannot read it", p.string());
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return fail(errc::io_error, "{}: cannot read it", p.string());
  return data;
}

void put(std::vector<std::byte>& out, const void* p, std::size_t n) {
  const auto* b = static_cast<const std::byte*>(p);
  out.insert(out.end(), b, b + n);
}

/// Reads the little-endian fields of a bundle, never past its end.
struct reader {
  std::span<const std::byte> bytes;
  std::size_t at = 0;
  std::size_t left() const { return bytes.size() - at; }
  template <class T>
  bool take(T& v) {
    if (left() < sizeof(T)) return false;
    std::memcpy(&v, bytes.data() + at, sizeof(T));
    at += sizeof(T);
    return true;
  }
  bool take(std::string& s, std::size_t n) {
    if (left() < n) return false;
    s.assign(reinterpret_cast<const char*>(bytes.data() + at), n);
    at += n;
    return true;
  }
};

/// No file of `files` is named twice, and none is a folder of another (a/b and a/b/c).
std::optional<std::string> clash(const std::vector<bundle_file>& files) {
  std::set<std::string_view> names, folders;
  for (const auto& f : files) {
    if (!names.insert(f.path).second) return coach::format("'{}' is listed twice", f.path);
    for (auto slash = f.path.find('/'); slash != std::string::npos;
         slash = f.path.find('/', slash + 1))
      folders.insert(std::string_view(f.path).substr(0, slash));
  }
  for (auto name : names)
    if (folders.contains(name)) return coach::format("'{}' is both a file and a folder", name);
  return std::nullopt;
}

result<void> write_file(const fs::path& root, const bundle_file& f) {
  // Its folders, each made here (the folder is new: nothing in it is anyone else's).
  std::string sub;
  for (auto slash = f.path.find('/'); slash != std::string::npos;
       slash = f.path.find('/', slash + 1)) {
    sub = f.path.substr(0, slash);
    if (::mkdir((root / sub).c_str(), 0700) != 0 && errno != EEXIST)
      return fail(errc::io_error, "{}: cannot make it: {}", (root / sub).string(),
                  std::strerror(errno));
  }
  const auto path = root / f.path;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        f.executable ? 0700 : 0600);
  if (fd < 0)
    return fail(errc::io_error, "{}: cannot write it: {}", path.string(), std::strerror(errno));
  std::size_t done = 0;
  while (done < f.data.size()) {
    const auto n = ::write(fd, f.data.data() + done, f.data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      return fail(errc::io_error, "{}: cannot write it: {}", path.string(), std::strerror(e));
    }
    done += std::size_t(n);
  }
  if (::close(fd) != 0)
    return fail(errc::io_error, "{}: cannot write it: {}", path.string(), std::strerror(errno));
  return {};
}

}  // namespace

result<std::vector<bundle_file>> read_script_folder(const std::string& dir, std::uint64_t limit) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return fail(errc::not_found, "{}: the script's folder is not there", dir);
  auto listed = list_files(dir);
  if (!listed) return std::unexpected(listed.error());
  if (listed->size() > max_bundle_files)
    return fail(errc::invalid_argument,
                "the script's folder {} holds {} files; a script job carries at most {} to the "
                "cluster",
                dir, listed->size(), max_bundle_files);
  // Sized before anything is read: a folder beside a data set of gigabytes is said at once.
  std::uint64_t total = 0, largest = 0;
  std::string largest_name;
  for (const auto& [name, path] : *listed) {
    const auto size = fs::file_size(path, ec);
    if (ec) return fail(errc::io_error, "{}: cannot read it: {}", path.string(), ec.message());
    total += size;
    if (size > largest) largest = size, largest_name = name;
  }
  if (total > limit)
    return fail(
        errc::invalid_argument,
        "the script's folder {} holds {:.1f} MiB in {} files (the largest: {}, {:.1f} MiB); "
        "a script job carries at most {:.1f} MiB of it to the cluster: keep large data "
        "out of the folder, where every node can read it",
        dir, mib(total), listed->size(), largest_name, mib(largest), mib(limit));
  std::vector<bundle_file> out;
  total = 0;
  for (const auto& [name, path] : *listed) {
    if (auto why = bundle_path_problem(name))
      return fail(errc::invalid_argument, "{}: {}", path.string(), *why);
    auto data = read_whole(path);
    if (!data) return std::unexpected(data.error());
    total += data->size();
    if (total > limit)  // a file that grew since it was sized
      return fail(errc::invalid_argument,
                  "the script's folder {} holds more than {:.1f} MiB (it grows while read)", dir,
                  mib(limit));
    const auto perms = fs::status(path, ec).permissions();
    const bool exec = !ec && (perms & fs::perms::owner_exec) != fs::perms::none;
    out.push_back({name, exec, std::move(*data)});
  }
  return out;
}

std::optional<std::string> bundle_path_problem(std::string_view path) {
  if (path.empty()) return "a file of the script's bundle has an empty path";
  const std::string shown(path.substr(0, 200));
  if (path.size() > max_bundle_path)
    return coach::format("path '{}...' has {} bytes (at most {})", shown, path.size(),
                         max_bundle_path);
  if (path.find('\0') != std::string_view::npos)
    return coach::format("path '{}' holds a NUL byte", shown);
  if (path.front() == '/') return coach::format("path '{}' is absolute", shown);
  std::size_t start = 0;
  while (start <= path.size()) {
    const auto slash = path.find('/', start);
    const auto part = path.substr(start, slash == std::string_view::npos ? slash : slash - start);
    if (part.empty()) return coach::format("path '{}' has an empty component", shown);
    if (part == "..") return coach::format("path '{}' leaves the bundle's folder ('..')", shown);
    if (part == ".") return coach::format("path '{}' has a '.' component", shown);
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return std::nullopt;
}

std::vector<std::byte> pack_bundle(std::span<const bundle_file> files) {
  std::size_t bytes = sizeof magic + 4;
  for (const auto& f : files) bytes += file_header + f.path.size() + f.data.size();
  std::vector<std::byte> out;
  out.reserve(bytes);
  put(out, magic, sizeof magic);
  const auto count = std::uint32_t(files.size());
  put(out, &count, 4);
  for (const auto& f : files) {
    const auto len = std::uint32_t(f.path.size());
    const std::uint32_t flags = f.executable ? flag_executable : 0;
    const auto size = std::uint64_t(f.data.size());
    put(out, &len, 4);
    put(out, &flags, 4);
    put(out, &size, 8);
    put(out, f.path.data(), f.path.size());
    put(out, f.data.data(), f.data.size());
  }
  return out;
}

result<std::vector<bundle_file>> unpack_bundle(std::span<const std::byte> bytes) {
  const auto bad = [](std::string_view why) {
    return fail(errc::protocol_error, "the script's bundle is refused: {}", why);
  };
  if (bytes.size() > max_packed_bundle_bytes)
    return bad(coach::format("{} bytes (at most {})", bytes.size(), max_packed_bundle_bytes));
  reader in{bytes};
  std::string head;
  std::uint32_t count = 0;
  if (!in.take(head, sizeof magic) || head != std::string_view(magic, sizeof magic) ||
      !in.take(count))
    return bad("not a bundle (its first bytes)");
  if (count > max_bundle_files)
    return bad(coach::format("{} files (at most {})", count, max_bundle_files));
  std::vector<bundle_file> out;
  std::uint64_t total = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint32_t len = 0, flags = 0;
    std::uint64_t size = 0;
    if (!in.take(len) || !in.take(flags) || !in.take(size))
      return bad(coach::format("file {} of {} is cut short", i + 1, count));
    if (len > max_bundle_path)
      return bad(coach::format("file {} has a path of {} bytes (at most {})", i + 1, len,
                               max_bundle_path));
    if (flags & ~flag_executable)
      return bad(coach::format("file {} has unknown flags {}", i + 1, flags));
    bundle_file f;
    if (!in.take(f.path, len) || size > in.left() || !in.take(f.data, std::size_t(size)))
      return bad(coach::format("file {} of {} is cut short", i + 1, count));
    if (auto why = bundle_path_problem(f.path)) return bad(*why);
    total += size;
    if (total > max_bundle_bytes)
      return bad(coach::format("its files hold more than {} bytes", max_bundle_bytes));
    f.executable = (flags & flag_executable) != 0;
    out.push_back(std::move(f));
  }
  if (in.left() != 0) return bad(coach::format("{} bytes after its last file", in.left()));
  if (auto why = clash(out)) return bad(*why);
  return out;
}

result<std::shared_ptr<script_folder>> script_folder::make(const std::string& parent,
                                                           std::string_view prefix) {
  if (::mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST)
    return fail(errc::io_error, "{}: cannot make it: {}", parent, std::strerror(errno));
  // In a shared temporary folder someone else may have made it first: it must be this user's
  // own folder, not a link, and nobody else may write in it.
  struct stat st {};
  if (::lstat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return fail(errc::io_error,
                "{}: not a private folder of this user (a link, someone else's, or writable by "
                "others); remove it or set TMPDIR",
                parent);
  std::string templ = (fs::path(parent) / (std::string(prefix) + ".XXXXXX")).string();
  if (::mkdtemp(templ.data()) == nullptr)
    return fail(errc::io_error, "{}: cannot make a folder in it: {}", parent, std::strerror(errno));
  return std::shared_ptr<script_folder>(new script_folder(std::move(templ)));
}

script_folder::~script_folder() {
  std::error_code ec;
  fs::remove_all(path_, ec);  // links inside are removed, never followed
}

result<void> script_folder::write(std::span<const bundle_file> files) const {
  for (const auto& f : files)
    if (auto ok = write_file(path_, f); !ok) return ok;
  return {};
}

}  // namespace coach::worker
