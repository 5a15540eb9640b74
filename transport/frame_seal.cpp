#include "transport/frame_seal.hpp"

#include "transport/part_cipher.hpp"

#include <sodium.h>

#include <cstring>

#include <limits>
#include "common/enforce.hpp"

namespace coach::transport_logic {
namespace {

/// libsodium's own set-up (idempotent and thread-safe): picks the CPU's fastest code.
bool sodium_ready() noexcept {
  static const bool ok = sodium_init() >= 0;
  return ok;
}

static_assert(crypto_aead_aes256gcm_ABYTES == seal_tag_bytes);
static_assert(crypto_aead_chacha20poly1305_IETF_ABYTES == seal_tag_bytes);
static_assert(crypto_kx_SESSIONKEYBYTES == seal_key_bytes);

std::uint64_t read_counter(const std::byte* p) noexcept {
  std::uint64_t c = 0;
  for (int i = 7; i >= 0; --i) c = (c << 8) | std::to_integer<std::uint64_t>(p[i]);
  return c;
}

void write_counter(std::uint64_t c, std::byte* p) noexcept {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(c >> (8 * i));
}

}  // namespace

std::string_view to_string(data_protection p) noexcept {
  switch (p) {
    case data_protection::none:
      return "none";
    case data_protection::authenticate:
      return "authenticate";
    case data_protection::encrypt:
      return "encrypt";
  }
  return "?";
}

result<data_protection> parse_data_protection(std::string_view text) {
  for (auto p : {data_protection::none, data_protection::authenticate, data_protection::encrypt})
    if (text == to_string(p)) return p;
  return fail(errc::invalid_argument, "data protection '{}' is none of encrypt, authenticate, none",
              text);
}

std::string_view to_string(open_refusal r) noexcept {
  switch (r) {
    case open_refusal::malformed:
      return "malformed sealed message";
    case open_refusal::stale:
      return "replayed or reordered (its counter is not past the last one accepted)";
    case open_refusal::forged:
      return "a tag does not match (altered, moved, or sealed under another key)";
  }
  return "?";
}

bool aes256gcm_available() noexcept {
  return sodium_ready() && crypto_aead_aes256gcm_is_available() == 1;
}

raw_key public_key_of(const raw_key& secret) noexcept {
  raw_key pub{};
  if (sodium_ready()) crypto_scalarmult_base(pub.data(), secret.data());
  return pub;
}

result<seal_key> derive_seal_key(bool client, const raw_key& own_public, const raw_key& own_secret,
                                 const raw_key& peer_public, const seal_nonce& client_nonce,
                                 const seal_nonce& server_nonce, seal_params params) {
  if (!sodium_ready()) return fail(errc::internal, "libsodium failed to initialise");
  unsigned char rx[crypto_kx_SESSIONKEYBYTES], tx[crypto_kx_SESSIONKEYBYTES];
  const int rc = client ? crypto_kx_client_session_keys(rx, tx, own_public.data(),
                                                        own_secret.data(), peer_public.data())
                        : crypto_kx_server_session_keys(rx, tx, own_public.data(),
                                                        own_secret.data(), peer_public.data());
  if (rc != 0) return fail(errc::invalid_argument, "the peer's public key is not a valid key");
  // The client sends: its tx key is the server's rx key.
  const unsigned char* direction = client ? tx : rx;
  crypto_generichash_state h;
  crypto_generichash_init(&h, direction, crypto_kx_SESSIONKEYBYTES, seal_key_bytes);
  constexpr std::string_view label = "coach data connection v1";
  crypto_generichash_update(&h, reinterpret_cast<const unsigned char*>(label.data()), label.size());
  const unsigned char how[2] = {static_cast<unsigned char>(params.mode),
                                static_cast<unsigned char>(params.cipher)};
  crypto_generichash_update(&h, how, sizeof how);
  crypto_generichash_update(&h, client_nonce.data(), client_nonce.size());
  crypto_generichash_update(&h, server_nonce.data(), server_nonce.size());
  seal_key key{};
  crypto_generichash_final(&h, key.data(), key.size());
  sodium_memzero(rx, sizeof rx);
  sodium_memzero(tx, sizeof tx);
  return key;
}

bool openssl_engine_available() noexcept {
  return COACH_OPENSSL_AEAD != 0;
}

frame_sealer::frame_sealer(const seal_key& key, seal_params params, std::uint64_t first_counter,
                           seal_engine engine)
    : writes_(params.mode == data_protection::encrypt), next_(first_counter) {
  COACH_ENFORCE(sodium_ready(), "libsodium failed to initialise");
  COACH_ENFORCE(params.mode != data_protection::none, "a sealer needs a protection");
  COACH_ENFORCE(params.mode != data_protection::encrypt ||
                    params.cipher != seal_cipher::aes256gcm || aes256gcm_available(),
                "AES-256-GCM chosen on a CPU without AES-NI");
  cipher_ = detail::make_part_cipher(key, params, engine, true);
}

frame_sealer::~frame_sealer() = default;

std::size_t frame_sealer::head_bytes(std::size_t header_bytes) noexcept {
  return seal_counter_bytes + header_bytes;
}

std::size_t frame_sealer::tags_bytes(std::size_t payloads) noexcept {
  return (payloads + 1) * seal_tag_bytes;
}

bool frame_sealer::writes_payloads() const noexcept {
  return writes_;
}

void frame_sealer::seal(std::span<const std::byte> header,
                        std::span<const std::span<const std::byte>> payloads,
                        std::span<std::byte> head_out, std::span<std::byte* const> payload_out,
                        std::span<std::byte> tags_out) {
  COACH_ENFORCE(head_out.size() == head_bytes(header.size()), "sealed header of the wrong size");
  COACH_ENFORCE(tags_out.size() == tags_bytes(payloads.size()), "tags part of the wrong size");
  COACH_ENFORCE(!writes_payloads() || payload_out.size() == payloads.size(),
                "no output for an encrypted payload");
  COACH_ENFORCE(next_ <= std::numeric_limits<std::uint64_t>::max() - payloads.size() - 1,
                "data connection counter exhausted");
  const std::uint64_t c = next_;
  next_ += payloads.size() + 1;
  write_counter(c, head_out.data());
  std::byte* head_body = head_out.data() + seal_counter_bytes;
  if (!writes_ && !header.empty()) std::memmove(head_body, header.data(), header.size());
  cipher_->seal(c, header.data(), header.size(), head_body, tags_out.data());
  for (std::size_t i = 0; i < payloads.size(); ++i)
    cipher_->seal(c + 1 + i, payloads[i].data(), payloads[i].size(),
                  writes_ ? payload_out[i] : nullptr, tags_out.data() + (i + 1) * seal_tag_bytes);
}

frame_opener::frame_opener(const seal_key& key, seal_params params, seal_engine engine) {
  COACH_ENFORCE(sodium_ready(), "libsodium failed to initialise");
  COACH_ENFORCE(params.mode != data_protection::none, "an opener needs a protection");
  // A peer may choose AES-256-GCM only where this CPU has it (the handshake): else refused.
  COACH_ENFORCE(params.mode != data_protection::encrypt ||
                    params.cipher != seal_cipher::aes256gcm || aes256gcm_available(),
                "AES-256-GCM chosen on a CPU without AES-NI");
  cipher_ = detail::make_part_cipher(key, params, engine, false);
}

frame_opener::~frame_opener() = default;

std::expected<std::span<const std::byte>, open_refusal> frame_opener::open(
    std::span<std::byte> head, std::span<const std::span<std::byte>> payloads,
    std::span<const std::byte> tags) {
  const std::size_t n = payloads.size();
  if (head.size() < seal_counter_bytes || tags.size() != (n + 1) * seal_tag_bytes)
    return std::unexpected(open_refusal::malformed);
  const std::uint64_t c = read_counter(head.data());
  if (c > std::numeric_limits<std::uint64_t>::max() - n - 1)
    return std::unexpected(open_refusal::malformed);
  if (c < next_) return std::unexpected(open_refusal::stale);
  auto body = head.subspan(seal_counter_bytes);
  if (!cipher_->open(c, body.data(), body.size(), tags.data()))
    return std::unexpected(open_refusal::forged);
  for (std::size_t i = 0; i < n; ++i)
    if (!cipher_->open(c + 1 + i, payloads[i].data(), payloads[i].size(),
                       tags.data() + (i + 1) * seal_tag_bytes))
      return std::unexpected(open_refusal::forged);
  next_ = c + n + 1;
  return body;
}

}  // namespace coach::transport_logic
