#include "transport/data_handshake.hpp"

#include <sodium.h>

#include <algorithm>
#include <cstring>

namespace coach::transport_logic {
namespace {

constexpr char hello_magic[4] = {'C', 'D', 'H', '1'};
constexpr char welcome_magic[4] = {'C', 'D', 'W', '1'};

bool has_magic(std::span<const std::byte> frame, const char (&magic)[4], std::size_t bytes) {
  return frame.size() == bytes && std::memcmp(frame.data(), magic, 4) == 0;
}

}  // namespace

std::array<std::byte, data_hello_bytes> encode(const data_hello& h) {
  std::array<std::byte, data_hello_bytes> out{};
  std::memcpy(out.data(), hello_magic, 4);
  for (int i = 0; i < 4; ++i) out[std::size_t(4 + i)] = static_cast<std::byte>(h.host >> (8 * i));
  std::memcpy(out.data() + 8, h.nonce.data(), seal_nonce_bytes);
  out[8 + seal_nonce_bytes] = static_cast<std::byte>(h.mode);
  out[9 + seal_nonce_bytes] = static_cast<std::byte>(h.aes ? 1 : 0);
  return out;
}

std::array<std::byte, data_welcome_bytes> encode(const data_welcome& w) {
  std::array<std::byte, data_welcome_bytes> out{};
  std::memcpy(out.data(), welcome_magic, 4);
  std::memcpy(out.data() + 4, w.client_nonce.data(), seal_nonce_bytes);
  std::memcpy(out.data() + 4 + seal_nonce_bytes, w.server_nonce.data(), seal_nonce_bytes);
  std::size_t at = 4 + 2 * seal_nonce_bytes;
  out[at++] = static_cast<std::byte>(w.cipher);
  std::memcpy(out.data() + at, w.token.data(), std::min(w.token.size(), data_token_chars));
  at += data_token_chars;
  out[at] = static_cast<std::byte>(w.port);
  out[at + 1] = static_cast<std::byte>(w.port >> 8);
  return out;
}

bool looks_like_hello(std::span<const std::byte> frame) noexcept {
  return has_magic(frame, hello_magic, data_hello_bytes);
}

bool looks_like_welcome(std::span<const std::byte> frame) noexcept {
  return has_magic(frame, welcome_magic, data_welcome_bytes);
}

std::optional<data_hello> parse_hello(std::span<const std::byte> frame) {
  if (!looks_like_hello(frame)) return std::nullopt;
  data_hello h;
  for (int i = 3; i >= 0; --i)
    h.host = (h.host << 8) | std::to_integer<std::uint32_t>(frame[std::size_t(4 + i)]);
  std::memcpy(h.nonce.data(), frame.data() + 8, seal_nonce_bytes);
  const auto mode = std::to_integer<std::uint8_t>(frame[8 + seal_nonce_bytes]);
  if (mode != std::uint8_t(data_protection::encrypt) &&
      mode != std::uint8_t(data_protection::authenticate))
    return std::nullopt;
  h.mode = static_cast<data_protection>(mode);
  h.aes = std::to_integer<std::uint8_t>(frame[9 + seal_nonce_bytes]) == 1;
  return h;
}

std::optional<data_welcome> parse_welcome(std::span<const std::byte> frame) {
  if (!looks_like_welcome(frame)) return std::nullopt;
  data_welcome w;
  std::memcpy(w.client_nonce.data(), frame.data() + 4, seal_nonce_bytes);
  std::memcpy(w.server_nonce.data(), frame.data() + 4 + seal_nonce_bytes, seal_nonce_bytes);
  std::size_t at = 4 + 2 * seal_nonce_bytes;
  const auto cipher = std::to_integer<std::uint8_t>(frame[at++]);
  if (cipher != std::uint8_t(seal_cipher::aes256gcm) &&
      cipher != std::uint8_t(seal_cipher::chacha20poly1305))
    return std::nullopt;
  w.cipher = static_cast<seal_cipher>(cipher);
  w.token.assign(reinterpret_cast<const char*>(frame.data() + at), data_token_chars);
  at += data_token_chars;
  w.port = std::uint16_t(std::to_integer<unsigned>(frame[at]) |
                         (std::to_integer<unsigned>(frame[at + 1]) << 8));
  return w;
}

seal_nonce random_nonce() {
  seal_nonce n{};
  if (sodium_init() >= 0) randombytes_buf(n.data(), n.size());
  return n;
}

std::string random_token() {
  std::array<unsigned char, data_token_chars / 2> raw{};
  if (sodium_init() >= 0) randombytes_buf(raw.data(), raw.size());
  constexpr char digits[] = "0123456789abcdef";
  std::string token;
  for (auto c : raw) token += {digits[c >> 4], digits[c & 15]};
  return token;
}

}  // namespace coach::transport_logic
