#pragma once
// actors/curve_keys.hpp: the keys of ZeroMQ CURVE authentication (docs/security.md) and the
// decision of who may connect, as plain functions and one class that tests drive without sockets.
//
// Files (`coach keygen DIR [--name NAME]`):
//   DIR/NAME.key  mode 0600  "public-key = Z85" and "secret-key = Z85" lines: this process's pair
//   DIR/NAME.pub             "public-key = Z85": what other processes put in their trusted set
// Z85 is ZeroMQ's text form of a 32-byte key: 40 characters. '#' starts a comment line.
//
// A process with a key authenticates every connection it accepts by the client's public key: the
// key must be in its authorized-keys directory (every *.pub file there), read again at every new
// connection, so a key is added or removed (rotated) without a restart; connections already
// made stay up. A process without a key accepts connections from loopback addresses only.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace coach::actors {

/// A CURVE key pair as Z85 text (40 characters each).
struct key_pair {
  std::string public_key;
  std::string secret_key;
};

/// True for 40 characters of Z85 that decode to 32 bytes.
bool is_z85_key(std::string_view text) noexcept;

/// A fresh key pair (libsodium through ZeroMQ). Errors: internal when ZeroMQ lacks CURVE.
result<key_pair> generate_key_pair();

/// Writes DIR/NAME.key (mode 0600) and DIR/NAME.pub, creating DIR (mode 0700) when missing.
/// Refuses to overwrite either file (invalid_argument naming it). Errors: io_error naming the
/// path; invalid_argument for a name that is empty or holds '/'.
result<void> write_key_files(const std::filesystem::path& dir, std::string_view name,
                             const key_pair& keys);

/// Reads a key pair from a .key file and checks that its public key is the secret key's.
/// Errors name the file: not_found, parse_error (no or malformed lines), invalid_argument (the
/// public key is not the secret key's).
result<key_pair> read_key_file(const std::filesystem::path& path);

/// The public key of a .pub file (or of a .key file). Errors as read_key_file.
result<std::string> read_public_key(const std::filesystem::path& path);

/// The public keys of every *.pub file in `dir`; a file that cannot be read is named in
/// `problems` and skipped.
struct authorized_keys {
  std::set<std::string> keys;
  std::vector<std::string> problems;
};
/// Errors: not_found when `dir` is not a directory.
result<authorized_keys> read_authorized_keys(const std::filesystem::path& dir);

/// The token that admits the dashboard's actions on a node whose key pair is `keys` (issue 37,
/// item 11): 64 hex digits, a keyed BLAKE2b (libsodium's crypto_generichash) of a fixed text
/// under the secret key. Whoever holds the key file can make it (`coach dashboard-token`); the
/// public key tells nothing of it. Empty when the secret key is not Z85 of 32 bytes.
std::string admin_token(const key_pair& keys);

/// True for an IPv4 address in 127.0.0.0/8, "::1", or an IPv4-mapped loopback address.
bool is_loopback_address(std::string_view ip) noexcept;

/// Why a connection was refused; counted per reason (receive_stats).
enum class refusal_reason : std::uint8_t {
  none,       ///< accepted
  key,        ///< CURVE: the client's key is not authorized
  address,    ///< no CURVE: the client is not on loopback
  mechanism,  ///< the client offered no key to a CURVE server, or a key to a plain one
};

/// What a server says to a connection's ZAP request (ZeroMQ's authentication handshake).
struct zap_verdict {
  refusal_reason why = refusal_reason::none;
  std::string text;  ///< for the log and the ZAP status text: "key X... not authorized"
  bool accepted() const noexcept { return why == refusal_reason::none; }
};

/// The access rule of one server: with `authorized_dir` (a process that has a key), CURVE
/// clients whose key is there; without, plain connections from loopback addresses.
class peer_authorizer {
 public:
  /// `authorized_dir` empty: this process has no key (loopback only).
  explicit peer_authorizer(std::filesystem::path authorized_dir = {});

  /// `mechanism` "CURVE" or "NULL"; `address` the client's IP; `client_key` the client's public
  /// key as Z85 (CURVE only). The directory is read again at each call (a new connection).
  zap_verdict check(std::string_view mechanism, std::string_view address,
                    std::string_view client_key) const;

 private:
  std::filesystem::path dir_;
};

/// How a process authenticates: its key pair (none: plain connections, loopback only), the
/// directory of the keys it accepts, and the public key it expects of a server whose own key it
/// was not told (its --join or --at address).
struct transport_security {
  std::optional<key_pair> key;
  std::filesystem::path authorized_dir;  ///< with key; empty: the key file's directory
  std::string server_key;                ///< Z85; empty: key->public_key (a cluster-wide key)
  /// What the caller should say as a warning: the key file readable by others than its owner
  /// (its secret is then no secret: `chmod 600 FILE`). load_security accepts such a file, as
  /// Kubernetes mounts secrets 0644 unless told otherwise, but never silently.
  std::vector<std::string> warnings;
  /// The server key for a peer whose own key is `peer_key` (empty: unknown).
  std::string server_key_for(std::string_view peer_key) const;
};

/// The security of a process from its flags, each falling back to an environment variable:
/// --key (COACH_KEY), --authorized-keys (COACH_AUTHORIZED_KEYS; default: the key file's
/// directory), --server-key (COACH_SERVER_KEY: a .pub or .key file). Errors name the flag and
/// the file; --authorized-keys or --server-key without a key is invalid_argument.
result<transport_security> load_security(std::string key_file, std::string authorized_dir,
                                         std::string server_key_file);

}  // namespace coach::actors
