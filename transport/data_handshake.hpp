#pragma once
// transport::data_handshake: the two messages that open a data connection (docs/wire.md "Data
// connections"), said over the CURVE connection: the sender's hello (its host id, its nonce, its
// protection, whether it has AES-NI) and the receiver's welcome (both nonces, the cipher, a
// session token, the data ROUTER's port). Each is one ZeroMQ frame that starts with 4 magic
// bytes no Cap'n Proto header starts with. Plain encoding and parsing; no sockets.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "transport/frame_seal.hpp"

namespace coach::transport_logic {

inline constexpr std::size_t data_token_chars = 32;  ///< 16 random bytes in hex
inline constexpr std::size_t data_hello_bytes = 4 + 4 + seal_nonce_bytes + 1 + 1;
inline constexpr std::size_t data_welcome_bytes =
    4 + 2 * seal_nonce_bytes + 1 + data_token_chars + 2;

/// "CDH1", host (u32 LE), nonce, protection, AES-NI (0 or 1).
struct data_hello {
  std::uint32_t host = 0;
  seal_nonce nonce{};
  data_protection mode = data_protection::encrypt;  ///< encrypt or authenticate
  bool aes = false;
};
/// "CDW1", the hello's nonce, the receiver's nonce, cipher, token (hex text), port (u16 LE).
struct data_welcome {
  seal_nonce client_nonce{};
  seal_nonce server_nonce{};
  seal_cipher cipher = seal_cipher::chacha20poly1305;
  std::string token;  ///< data_token_chars characters: the PLAIN password of the data connection
  std::uint16_t port = 0;
};

std::array<std::byte, data_hello_bytes> encode(const data_hello& h);
std::array<std::byte, data_welcome_bytes> encode(const data_welcome& w);
/// nullopt unless `frame` is a hello (magic and size) with a protection of encrypt or
/// authenticate.
std::optional<data_hello> parse_hello(std::span<const std::byte> frame);
/// nullopt unless `frame` is a welcome (magic and size) naming a known cipher.
std::optional<data_welcome> parse_welcome(std::span<const std::byte> frame);
/// True when `frame` has a hello's (a welcome's) magic and size, valid or not.
bool looks_like_hello(std::span<const std::byte> frame) noexcept;
bool looks_like_welcome(std::span<const std::byte> frame) noexcept;

/// A fresh random nonce, and a fresh token (libsodium's randombytes).
seal_nonce random_nonce();
std::string random_token();

}  // namespace coach::transport_logic
