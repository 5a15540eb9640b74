#include "transport/part_cipher.hpp"

#include <sodium.h>

#include <algorithm>
#include <array>
#include <climits>

#include "common/enforce.hpp"

#if COACH_OPENSSL_AEAD
#include <openssl/evp.h>
#endif

namespace coach::transport_logic::detail {
namespace {

using nonce12 = std::array<unsigned char, 12>;
static_assert(crypto_aead_aes256gcm_NPUBBYTES == 12);
static_assert(crypto_aead_chacha20poly1305_IETF_NPUBBYTES == 12);

/// Part i of a message with counter C is sealed under C + i: 8 bytes little-endian, then zeros.
nonce12 nonce_of(std::uint64_t counter) noexcept {
  nonce12 n{};
  for (int i = 0; i < 8; ++i) n[std::size_t(i)] = static_cast<unsigned char>(counter >> (8 * i));
  return n;
}

/// libsodium declares its pointers non-null even for 0 bytes: an empty part points here.
unsigned char empty_part[1] = {0};
unsigned char* uc(std::byte* p) noexcept {
  return p ? reinterpret_cast<unsigned char*>(p) : empty_part;
}
const unsigned char* uc(const std::byte* p) noexcept {
  return p ? reinterpret_cast<const unsigned char*>(p) : empty_part;
}

class sodium_cipher final : public part_cipher {
 public:
  sodium_cipher(const seal_key& key, seal_params p)
      : key_(key),
        auth_(p.mode == data_protection::authenticate),
        aes_(!auth_ && p.cipher == seal_cipher::aes256gcm) {}
  ~sodium_cipher() override { sodium_memzero(key_.data(), key_.size()); }

  void seal(std::uint64_t counter, const std::byte* in, std::size_t bytes, std::byte* out,
            std::byte* tag) override {
    const auto n = nonce_of(counter);
    unsigned long long tag_bytes = 0;
    if (auth_)
      crypto_aead_chacha20poly1305_ietf_encrypt_detached(empty_part, uc(tag), &tag_bytes,
                                                         empty_part, 0, uc(in), bytes, nullptr,
                                                         n.data(), key_.data());
    else if (aes_)
      crypto_aead_aes256gcm_encrypt_detached(uc(out), uc(tag), &tag_bytes, uc(in), bytes, nullptr,
                                             0, nullptr, n.data(), key_.data());
    else
      crypto_aead_chacha20poly1305_ietf_encrypt_detached(
          uc(out), uc(tag), &tag_bytes, uc(in), bytes, nullptr, 0, nullptr, n.data(), key_.data());
  }
  bool open(std::uint64_t counter, std::byte* data, std::size_t bytes,
            const std::byte* tag) override {
    const auto n = nonce_of(counter);
    if (auth_)
      return crypto_aead_chacha20poly1305_ietf_decrypt_detached(empty_part, nullptr, empty_part, 0,
                                                                uc(tag), uc(data), bytes, n.data(),
                                                                key_.data()) == 0;
    if (aes_)
      return crypto_aead_aes256gcm_decrypt_detached(uc(data), nullptr, uc(data), bytes, uc(tag),
                                                    nullptr, 0, n.data(), key_.data()) == 0;
    return crypto_aead_chacha20poly1305_ietf_decrypt_detached(
               uc(data), nullptr, uc(data), bytes, uc(tag), nullptr, 0, n.data(), key_.data()) == 0;
  }

 private:
  seal_key key_;
  bool auth_, aes_;
};

#if COACH_OPENSSL_AEAD
/// The same constructions through libcrypto's EVP interface; one context, keyed once.
class openssl_cipher final : public part_cipher {
 public:
  openssl_cipher(const seal_key& key, seal_params p, bool sealing)
      : ctx_(EVP_CIPHER_CTX_new()), auth_(p.mode == data_protection::authenticate) {
    COACH_ENFORCE(ctx_ != nullptr, "EVP_CIPHER_CTX_new failed");
    const EVP_CIPHER* c =
        !auth_ && p.cipher == seal_cipher::aes256gcm ? EVP_aes_256_gcm() : EVP_chacha20_poly1305();
    const int ok = sealing ? EVP_EncryptInit_ex(ctx_, c, nullptr, key.data(), nullptr)
                           : EVP_DecryptInit_ex(ctx_, c, nullptr, key.data(), nullptr);
    COACH_ENFORCE(ok == 1, "cannot key an OpenSSL AEAD context");
  }
  ~openssl_cipher() override { EVP_CIPHER_CTX_free(ctx_); }

  void seal(std::uint64_t counter, const std::byte* in, std::size_t bytes, std::byte* out,
            std::byte* tag) override {
    const auto n = nonce_of(counter);
    int l = 0;
    bool ok = EVP_EncryptInit_ex(ctx_, nullptr, nullptr, nullptr, n.data()) == 1;
    ok = ok && update(in, bytes, auth_ ? nullptr : out, true);
    ok = ok && EVP_EncryptFinal_ex(ctx_, scratch_.data(), &l) == 1;
    ok = ok && EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_AEAD_GET_TAG, int(seal_tag_bytes), tag) == 1;
    COACH_ENFORCE(ok, "OpenSSL failed to seal a part");
  }
  bool open(std::uint64_t counter, std::byte* data, std::size_t bytes,
            const std::byte* tag) override {
    const auto n = nonce_of(counter);
    int l = 0;
    return EVP_DecryptInit_ex(ctx_, nullptr, nullptr, nullptr, n.data()) == 1 &&
           EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_AEAD_SET_TAG, int(seal_tag_bytes),
                               const_cast<std::byte*>(tag)) == 1 &&
           update(data, bytes, auth_ ? nullptr : data, false) &&
           EVP_DecryptFinal_ex(ctx_, scratch_.data(), &l) == 1;
  }

 private:
  /// The part as data (`out`: where it goes) or, authenticating, as associated data (`out`
  /// null), in pieces an int can count.
  bool update(const std::byte* in, std::size_t bytes, std::byte* out, bool sealing) {
    for (std::size_t done = 0; done < bytes;) {
      const int piece = int(std::min<std::size_t>(bytes - done, std::size_t(1) << 30));
      auto* o = out ? reinterpret_cast<unsigned char*>(out + done) : nullptr;
      const auto* i = reinterpret_cast<const unsigned char*>(in + done);
      int l = 0;
      if ((sealing ? EVP_EncryptUpdate(ctx_, o, &l, i, piece)
                   : EVP_DecryptUpdate(ctx_, o, &l, i, piece)) != 1)
        return false;
      done += std::size_t(piece);
    }
    return true;
  }
  EVP_CIPHER_CTX* ctx_;
  bool auth_;
  std::array<unsigned char, 32> scratch_{};
};
#endif

}  // namespace

std::unique_ptr<part_cipher> make_part_cipher(const seal_key& key, seal_params params,
                                              seal_engine engine, bool sealing) {
#if COACH_OPENSSL_AEAD
  if (engine != seal_engine::libsodium)
    return std::make_unique<openssl_cipher>(key, params, sealing);
#else
  COACH_ENFORCE(engine != seal_engine::openssl, "this build has no OpenSSL engine");
  (void)sealing;
#endif
  return std::make_unique<sodium_cipher>(key, params);
}

}  // namespace coach::transport_logic::detail
