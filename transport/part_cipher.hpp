#pragma once
// transport::detail::part_cipher: one part of a sealed message sealed or opened under its nonce
// (transport/frame_seal.hpp has the constructions), by libsodium or by OpenSSL's libcrypto: the
// same bytes either way. Private to frame_seal.cpp. Not thread-safe: an OpenSSL context is
// reused for every part (its key schedule made once).

#include <cstddef>
#include <cstdint>
#include <memory>

#include "transport/frame_seal.hpp"

namespace coach::transport_logic::detail {

class part_cipher {
 public:
  virtual ~part_cipher() = default;
  /// Seals `bytes` bytes at `in` under the nonce of `counter`: the tag to `tag` (16 bytes);
  /// encrypting, the ciphertext to `out` (may be `in`).
  virtual void seal(std::uint64_t counter, const std::byte* in, std::size_t bytes, std::byte* out,
                    std::byte* tag) = 0;
  /// Checks `tag` over the part at `data`; encrypting, decrypts it in place. False: refused.
  virtual bool open(std::uint64_t counter, std::byte* data, std::size_t bytes,
                    const std::byte* tag) = 0;
};

/// A cipher for one end: `sealing` true at the sender. `engine` fastest: OpenSSL when built in.
std::unique_ptr<part_cipher> make_part_cipher(const seal_key& key, seal_params params,
                                              seal_engine engine, bool sealing);

}  // namespace coach::transport_logic::detail
