#pragma once
// transport::frame_seal: the protection of the data connection's messages (docs/security.md
// "Data connections", docs/wire.md "Sealed messages"), as plain classes that tests drive without
// sockets. A data connection carries one direction of one pair of nodes; the key of that
// direction is derived with libsodium's key exchange (crypto_kx) from both nodes' CURVE keys and
// two random nonces exchanged over the CURVE connection, so every data connection has keys of
// its own and a counter that starts at 0 never repeats a nonce under a key.
//
// A sealed message is its parts, each protected apart, then one part of tags:
//   part 0       8-byte counter C (little-endian, clear), then the header: encrypted (encrypt)
//                or clear (authenticate)
//   parts 1..n   the payload frames, as many bytes as the clear ones: encrypted or clear
//   part n+1     (n + 1) 16-byte tags: the header's, then each payload's
// Part i is sealed under the nonce C + i (8 bytes little-endian, then 4 zero bytes): a part
// moved to another place, or into another message, fails its tag. encrypt: AES-256-GCM where
// the CPU has AES-NI (both ends: the handshake chooses), else ChaCha20-Poly1305 (IETF);
// authenticate: ChaCha20-Poly1305 over an empty plaintext with the part as associated data,
// i.e. Poly1305 under a one-time key per part (the frame goes out as it is, without a copy).
// A receiver accepts a message only if its counter is past every counter it accepted (a
// replayed or reordered message is refused as stale) and every tag is right (else forged); a
// gap is allowed (a sender that found its socket full sealed a message it did not send).
//
// Threads: a sealer is used by one thread at a time (the transport's socket lock), an opener
// likewise (the transport's I/O thread); neither shares state.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "common/error.hpp"

namespace coach::transport_logic {

/// What a node does to what it sends to other nodes over a data connection (coach-node
/// --data-protection; docs/security.md).
enum class data_protection : std::uint8_t {
  none,          ///< everything over the CURVE connection (or plain, without keys), as before
  authenticate,  ///< bulk frames in clear on a data connection, every part authenticated
  encrypt,       ///< bulk frames encrypted and authenticated on a data connection
};

/// "none", "authenticate", "encrypt".
std::string_view to_string(data_protection p) noexcept;
/// The inverse of to_string. Errors: invalid_argument naming the text and the choices.
result<data_protection> parse_data_protection(std::string_view text);

/// The cipher of an encrypting data connection.
enum class seal_cipher : std::uint8_t {
  aes256gcm = 1,         ///< AES-256-GCM (libsodium, AES-NI and PCLMUL only)
  chacha20poly1305 = 2,  ///< ChaCha20-Poly1305, IETF variant
};

/// True when this CPU runs libsodium's AES-256-GCM (crypto_aead_aes256gcm_is_available).
bool aes256gcm_available() noexcept;

/// Which library computes the ciphers (the same constructions, the same bytes): OpenSSL's
/// libcrypto where the build has it (its AES-GCM uses VAES and its Poly1305 AVX-512: 2.4x and 5x
/// libsodium 1.0.18's on this project's CPU, docs/performance.md), else libsodium. Tests seal
/// with one and open with the other.
enum class seal_engine : std::uint8_t { fastest, libsodium, openssl };
/// True when this build has the OpenSSL engine.
bool openssl_engine_available() noexcept;

namespace detail {
class part_cipher;
}

/// How one data connection is sealed: both ends must agree (the handshake fixes it).
struct seal_params {
  data_protection mode = data_protection::encrypt;     ///< authenticate or encrypt
  seal_cipher cipher = seal_cipher::chacha20poly1305;  ///< encrypt only
};

inline constexpr std::size_t seal_key_bytes = 32;
inline constexpr std::size_t seal_nonce_bytes = 32;  ///< each side's handshake nonce
inline constexpr std::size_t seal_tag_bytes = 16;
inline constexpr std::size_t seal_counter_bytes = 8;
using seal_key = std::array<unsigned char, seal_key_bytes>;
using raw_key = std::array<unsigned char, 32>;  ///< a Curve25519 key, 32 raw bytes
using seal_nonce = std::array<unsigned char, seal_nonce_bytes>;

/// The Curve25519 public key of `secret` (crypto_scalarmult_base): what a CURVE key pair holds.
raw_key public_key_of(const raw_key& secret) noexcept;

/// The key of the direction client -> server of one data connection (the client is the node
/// that sends on it). Each side calls it with its own key pair and the other's public key:
/// `client` true at the sender. The key is crypto_kx's key of that direction, then a keyed
/// BLAKE2b of the two nonces and `params` under it: a fresh pair of nonces gives a fresh key,
/// and a different mode or cipher another key. Errors: invalid_argument when the peer's public
/// key is not a valid Curve25519 point (crypto_kx refuses it).
result<seal_key> derive_seal_key(bool client, const raw_key& own_public, const raw_key& own_secret,
                                 const raw_key& peer_public, const seal_nonce& client_nonce,
                                 const seal_nonce& server_nonce, seal_params params);

/// The sending end of a data connection.
class frame_sealer {
 public:
  frame_sealer(const seal_key& key, seal_params params, std::uint64_t first_counter = 0,
               seal_engine engine = seal_engine::fastest);
  ~frame_sealer();
  frame_sealer(const frame_sealer&) = delete;
  frame_sealer& operator=(const frame_sealer&) = delete;

  /// Bytes of part 0 for a header of `header_bytes`; of the tags part for `payloads` frames.
  static std::size_t head_bytes(std::size_t header_bytes) noexcept;
  static std::size_t tags_bytes(std::size_t payloads) noexcept;
  /// True when payload parts are written (encrypt); false: they go out as they are.
  bool writes_payloads() const noexcept;

  /// Seals one message under the next counters. `head_out`: head_bytes(header.size()) bytes;
  /// `payload_out[i]`: payloads[i].size() bytes (encrypt; ignored, may be null, when
  /// authenticating); `tags_out`: tags_bytes(payloads.size()) bytes. An output may be its
  /// input (in place). REQUIRES: the sizes above.
  void seal(std::span<const std::byte> header, std::span<const std::span<const std::byte>> payloads,
            std::span<std::byte> head_out, std::span<std::byte* const> payload_out,
            std::span<std::byte> tags_out);
  /// The counter the next message gets.
  std::uint64_t next_counter() const noexcept { return next_; }

 private:
  std::unique_ptr<detail::part_cipher> cipher_;
  bool writes_;
  std::uint64_t next_;
};

/// Why an opener refused a message.
enum class open_refusal : std::uint8_t {
  malformed,  ///< too short, or a tags part that does not match the parts
  stale,      ///< its counter is not past the last one accepted: replayed or reordered
  forged,     ///< a tag is wrong: altered, moved, or sealed under another key
};
std::string_view to_string(open_refusal r) noexcept;

/// The receiving end of a data connection.
class frame_opener {
 public:
  frame_opener(const seal_key& key, seal_params params, seal_engine engine = seal_engine::fastest);
  ~frame_opener();
  frame_opener(const frame_opener&) = delete;
  frame_opener& operator=(const frame_opener&) = delete;

  /// Checks (and decrypts in place) one sealed message: `head` is part 0, `payloads` parts
  /// 1..n, `tags` the last part. Returns the clear header (inside `head`, after the counter);
  /// the payloads are clear in place. Nothing is accepted unless all is: on a refusal the
  /// parts' bytes are undefined and the opener's state is unchanged.
  std::expected<std::span<const std::byte>, open_refusal> open(
      std::span<std::byte> head, std::span<const std::span<std::byte>> payloads,
      std::span<const std::byte> tags);
  /// The smallest counter the next message may have.
  std::uint64_t next_counter() const noexcept { return next_; }

 private:
  std::unique_ptr<detail::part_cipher> cipher_;
  std::uint64_t next_ = 0;
};

}  // namespace coach::transport_logic
