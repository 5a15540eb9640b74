#include "actors/curve_keys.hpp"

#include <arpa/inet.h>
#include <sodium.h>
#include <sys/stat.h>
#include <zmq.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>

namespace coach::actors {
namespace fs = std::filesystem;
namespace {

/// The value of "NAME = VALUE" lines in a key file, by name.
struct key_lines {
  std::string public_key, secret_key;
};

result<key_lines> parse_key_text(const fs::path& path) {
  std::ifstream in(path);
  if (!in) {
    std::error_code ec;
    if (!fs::exists(path, ec))
      return fail(errc::not_found, "key file '{}' not found", path.string());
    return fail(errc::io_error, "key file '{}' cannot be read", path.string());
  }
  key_lines out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const auto eq = line.find('=');
    auto trim = [](std::string s) {
      const auto b = s.find_first_not_of(" \t\r");
      const auto e = s.find_last_not_of(" \t\r");
      return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    if (eq == std::string::npos)
      return fail(errc::parse_error, "key file '{}' line {}: expected 'public-key = KEY'",
                  path.string(), n);
    const auto name = trim(line.substr(0, eq));
    const auto value = trim(line.substr(eq + 1));
    std::string* slot = name == "public-key"   ? &out.public_key
                        : name == "secret-key" ? &out.secret_key
                                               : nullptr;
    if (!slot)
      return fail(errc::parse_error,
                  "key file '{}' line {}: unknown name '{}' (public-key, secret-key)",
                  path.string(), n, name);
    if (!is_z85_key(value))
      return fail(errc::parse_error, "key file '{}' line {}: {} is not a 40-character Z85 key",
                  path.string(), n, name);
    *slot = value;
  }
  return out;
}

std::string env_or(std::string value, const char* name) {
  if (!value.empty()) return value;
  const char* env = std::getenv(name);
  return env ? env : "";
}

}  // namespace

bool is_z85_key(std::string_view text) noexcept {
  if (text.size() != 40) return false;
  std::array<char, 41> z{};
  text.copy(z.data(), 40);
  std::array<std::uint8_t, 32> bytes{};
  return zmq_z85_decode(bytes.data(), z.data()) != nullptr;
}

result<key_pair> generate_key_pair() {
  std::array<char, 41> pub{}, sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0)
    return fail(errc::internal, "cannot make a CURVE key pair: {} (ZeroMQ built without CURVE?)",
                zmq_strerror(zmq_errno()));
  return key_pair{pub.data(), sec.data()};
}

result<void> write_key_files(const fs::path& dir, std::string_view name, const key_pair& keys) {
  if (name.empty() || name.find('/') != std::string_view::npos)
    return fail(errc::invalid_argument, "key name '{}' must be a plain file name", name);
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    if (!fs::create_directories(dir, ec))
      return fail(errc::io_error, "cannot create '{}': {}", dir.string(), ec.message());
    fs::permissions(dir, fs::perms::owner_all, ec);
  } else if (!fs::is_directory(dir, ec)) {
    return fail(errc::invalid_argument, "'{}' is not a directory", dir.string());
  }
  const auto key_path = dir / (std::string(name) + ".key");
  const auto pub_path = dir / (std::string(name) + ".pub");
  for (const auto& p : {key_path, pub_path})
    if (fs::exists(p, ec))
      return fail(errc::invalid_argument, "'{}' exists; remove it or choose another --name",
                  p.string());
  {
    // Created with mode 0600 before anything is written into it.
    const mode_t old = ::umask(077);
    std::ofstream out(key_path);
    ::umask(old);
    out << "# Coach CURVE key pair '" << name << "' (coach keygen). Keep this file secret.\n"
        << "public-key = " << keys.public_key << "\n"
        << "secret-key = " << keys.secret_key << "\n";
    if (!out.flush()) return fail(errc::io_error, "cannot write '{}'", key_path.string());
  }
  std::ofstream out(pub_path);
  out << "# Coach CURVE public key '" << name
      << "' (coach keygen): copy it into the authorized-keys directory of the nodes that\n"
      << "# should accept it.\n"
      << "public-key = " << keys.public_key << "\n";
  if (!out.flush()) return fail(errc::io_error, "cannot write '{}'", pub_path.string());
  return {};
}

namespace {

/// The pair of a file's lines that hold a secret key: its public key derived from it, and
/// checked against the file's own public-key line when there is one.
result<key_pair> pair_of(key_lines lines, const fs::path& path) {
  std::array<char, 41> derived{};
  if (zmq_curve_public(derived.data(), lines.secret_key.c_str()) != 0)
    return fail(errc::invalid_argument, "key file '{}': the secret key is not a CURVE key",
                path.string());
  if (!lines.public_key.empty() && lines.public_key != derived.data())
    return fail(errc::invalid_argument,
                "key file '{}': its public key is not the one of its secret key", path.string());
  return key_pair{derived.data(), std::move(lines.secret_key)};
}

}  // namespace

result<key_pair> read_key_file(const fs::path& path) {
  auto lines = parse_key_text(path);
  if (!lines) return std::unexpected(lines.error());
  if (lines->secret_key.empty())
    return fail(errc::parse_error, "key file '{}' has no 'secret-key = KEY' line (a .pub file?)",
                path.string());
  return pair_of(std::move(*lines), path);
}

result<std::string> read_public_key(const fs::path& path) {
  auto lines = parse_key_text(path);
  if (!lines) return std::unexpected(lines.error());
  if (!lines->secret_key.empty()) {
    auto pair = pair_of(std::move(*lines), path);
    if (!pair) return std::unexpected(pair.error());
    return pair->public_key;
  }
  if (lines->public_key.empty())
    return fail(errc::parse_error, "key file '{}' has no 'public-key = KEY' line", path.string());
  return lines->public_key;
}

result<authorized_keys> read_authorized_keys(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return fail(errc::not_found, "authorized-keys directory '{}' not found", dir.string());
  authorized_keys out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".pub") continue;
    auto key = read_public_key(entry.path());
    if (key)
      out.keys.insert(std::move(*key));
    else
      out.problems.push_back(key.error().message);
  }
  if (ec)
    return fail(errc::io_error, "authorized-keys directory '{}': {}", dir.string(), ec.message());
  return out;
}

bool is_loopback_address(std::string_view ip) noexcept {
  std::string text(ip);
  if (text.rfind("::ffff:", 0) == 0) text = text.substr(7);
  in_addr v4{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, text.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

peer_authorizer::peer_authorizer(fs::path authorized_dir) : dir_(std::move(authorized_dir)) {}

zap_verdict peer_authorizer::check(std::string_view mechanism, std::string_view address,
                                   std::string_view client_key) const {
  if (dir_.empty()) {
    if (mechanism != "NULL")
      return {refusal_reason::mechanism,
              coach::format("{} offered a key; this node has none", address)};
    if (!is_loopback_address(address))
      return {refusal_reason::address,
              coach::format("{} is not loopback and this node has no key (coach keygen, --key)",
                            address)};
    return {};
  }
  if (mechanism != "CURVE")
    return {refusal_reason::mechanism, coach::format("{} offered no key", address)};
  auto keys = read_authorized_keys(dir_);
  if (!keys)
    return {refusal_reason::key, coach::format("key {} from {}: {}", client_key.substr(0, 8),
                                               address, keys.error().message)};
  if (!keys->keys.contains(std::string(client_key)))
    return {refusal_reason::key, coach::format("key {}... from {} is not in '{}'",
                                               client_key.substr(0, 8), address, dir_.string())};
  return {};
}

std::string transport_security::server_key_for(std::string_view peer_key) const {
  if (!peer_key.empty()) return std::string(peer_key);
  if (!server_key.empty()) return server_key;
  return key ? key->public_key : std::string();
}

result<transport_security> load_security(std::string key_file, std::string authorized_dir,
                                         std::string server_key_file) {
  key_file = env_or(std::move(key_file), "COACH_KEY");
  authorized_dir = env_or(std::move(authorized_dir), "COACH_AUTHORIZED_KEYS");
  server_key_file = env_or(std::move(server_key_file), "COACH_SERVER_KEY");
  transport_security s;
  if (key_file.empty()) {
    if (!authorized_dir.empty() || !server_key_file.empty())
      return fail(errc::invalid_argument,
                  "--authorized-keys and --server-key need a key of this process: give --key "
                  "FILE or set COACH_KEY (coach keygen DIR makes one)");
    return s;
  }
  auto pair = read_key_file(key_file);
  if (!pair) return fail(pair.error().code, "--key: {}", pair.error().message);
  struct stat st {};
  if (::stat(key_file.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    s.warnings.push_back(coach::format(
        "--key {}: its secret key can be read by others than its owner (mode {}); `chmod 600 {}`",
        key_file, mode, key_file));
  }
  s.key = std::move(*pair);
  s.authorized_dir =
      authorized_dir.empty() ? fs::path(key_file).parent_path() : fs::path(authorized_dir);
  if (s.authorized_dir.empty()) s.authorized_dir = ".";
  if (auto keys = read_authorized_keys(s.authorized_dir); !keys)
    return fail(keys.error().code, "--authorized-keys: {}", keys.error().message);
  if (!server_key_file.empty()) {
    auto key = read_public_key(server_key_file);
    if (!key) return fail(key.error().code, "--server-key: {}", key.error().message);
    s.server_key = std::move(*key);
  }
  return s;
}

std::string admin_token(const key_pair& keys) {
  std::array<std::uint8_t, 32> secret{};
  if (keys.secret_key.size() != 40 || !zmq_z85_decode(secret.data(), keys.secret_key.c_str()))
    return {};
  static constexpr std::string_view what = "coach dashboard admin token, version 1";
  std::array<unsigned char, 32> mac{};
  crypto_generichash(mac.data(), mac.size(), reinterpret_cast<const unsigned char*>(what.data()),
                     what.size(), secret.data(), secret.size());
  sodium_memzero(secret.data(), secret.size());
  std::string hex(mac.size() * 2 + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), mac.data(), mac.size());
  hex.pop_back();
  return hex;
}

}  // namespace coach::actors
