// cipher_bench: how fast this CPU's core encrypts and authenticates a buffer with the ciphers
// that could carry Coach's data path (docs/performance.md "CURVE"): XSalsa20-Poly1305 (what
// libzmq's CURVE does per message, crypto_box_afternm), AES-256-GCM (libsodium, AES-NI) and
// Poly1305 alone; against a plain copy of the same buffer. Then what Coach's data connections
// run (transport/frame_seal.hpp: one part sealed, encrypt and authenticate) with each engine,
// libsodium and OpenSSL's libcrypto. One thread, one buffer reused; the figure is the median
// of --repeat timed passes of --rounds encryptions each.
//
//   ./build/bench/cipher_bench                  # 1 MiB, 500 rounds, 5 passes
//   ./build/bench/cipher_bench --quick          # what the suite runs: small and fast
#include <sodium.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "transport/frame_seal.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

/// GB/s of `pass` over `bytes` a round: the median of `repeat` timed passes of `rounds`.
double rate(const std::function<void()>& pass, std::size_t bytes, int rounds, int repeat) {
  std::vector<double> seconds;
  pass();  // warm: pages touched, tables built
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = clock_type::now();
    for (int i = 0; i < rounds; ++i) pass();
    seconds.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + repeat / 2, seconds.end());
  return double(bytes) * rounds / seconds[repeat / 2] / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Single-core throughput of the ciphers a Coach data path could use"};
  std::size_t bytes = 1 << 20;
  int rounds = 500, repeat = 5;
  bool quick = false;
  app.add_option("--bytes", bytes, "Buffer size")->check(CLI::Range(64, 1 << 30));
  app.add_option("--rounds", rounds, "Encryptions a timed pass")->check(CLI::Range(1, 1000000));
  app.add_option("--repeat", repeat, "Timed passes (the median is printed)")
      ->check(CLI::Range(1, 100));
  app.add_flag("--quick", quick, "64 KiB, 20 rounds, 1 pass: that it runs, not a figure");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    bytes = 64 << 10;
    rounds = 20;
    repeat = 1;
  }
  if (sodium_init() < 0) {
    std::fprintf(stderr, "cipher_bench: libsodium failed to initialise\n");
    return 1;
  }
  std::vector<unsigned char> in(bytes), out(bytes + 64);
  randombytes_buf(in.data(), in.size());
  std::printf("%zu bytes, %d rounds, median of %d passes, one thread\n", bytes, rounds, repeat);
  std::printf("%-50s %8s\n", "", "GB/s");
  const auto show = [](const char* name, double gbs) { std::printf("%-50s %8.2f\n", name, gbs); };

  show("memcpy", rate([&] { std::memcpy(out.data(), in.data(), bytes); }, bytes, rounds, repeat));

  unsigned char pk[crypto_box_PUBLICKEYBYTES], sk[crypto_box_SECRETKEYBYTES];
  unsigned char shared[crypto_box_BEFORENMBYTES], nonce[crypto_box_NONCEBYTES] = {};
  crypto_box_keypair(pk, sk);
  if (crypto_box_beforenm(shared, pk, sk) != 0) return 1;
  // crypto_box_easy_afternm: MAC and ciphertext into out (what libzmq's CURVE uses per message,
  // there after copying the message into a padded buffer).
  show("XSalsa20-Poly1305 (CURVE's box)",
       rate([&] { crypto_box_easy_afternm(out.data(), in.data(), bytes, nonce, shared); }, bytes,
            rounds, repeat));

  if (crypto_aead_aes256gcm_is_available()) {
    unsigned char key[crypto_aead_aes256gcm_KEYBYTES], npub[crypto_aead_aes256gcm_NPUBBYTES] = {};
    crypto_aead_aes256gcm_keygen(key);
    show("AES-256-GCM (AES-NI)", rate(
                                     [&] {
                                       unsigned long long clen = 0;
                                       crypto_aead_aes256gcm_encrypt(out.data(), &clen, in.data(),
                                                                     bytes, nullptr, 0, nullptr,
                                                                     npub, key);
                                     },
                                     bytes, rounds, repeat));
  } else {
    std::printf("%-50s %8s\n", "AES-256-GCM (AES-NI)", "n/a (no AES-NI on this CPU)");
  }

  unsigned char mac[crypto_onetimeauth_BYTES], mkey[crypto_onetimeauth_KEYBYTES];
  crypto_onetimeauth_keygen(mkey);
  show("Poly1305 alone (MAC, no cipher)",
       rate([&] { crypto_onetimeauth(mac, in.data(), bytes, mkey); }, bytes, rounds, repeat));

  // Coach's data connections: one payload part sealed (encrypted into `out`, or only tagged).
  using namespace coach::transport_logic;
  seal_key key{};
  randombytes_buf(key.data(), key.size());
  const std::vector<std::pair<const char*, seal_params>> modes = {
      {"encrypt AES-256-GCM", {data_protection::encrypt, seal_cipher::aes256gcm}},
      {"encrypt ChaCha20-Poly1305", {data_protection::encrypt, seal_cipher::chacha20poly1305}},
      {"authenticate (Poly1305)", {data_protection::authenticate, seal_cipher::chacha20poly1305}}};
  for (auto engine : {seal_engine::libsodium, seal_engine::openssl}) {
    if (engine == seal_engine::openssl && !openssl_engine_available()) continue;
    for (const auto& [name, params] : modes) {
      if (params.cipher == seal_cipher::aes256gcm && params.mode == data_protection::encrypt &&
          !aes256gcm_available())
        continue;
      frame_sealer sealer(key, params, 0, engine);
      std::array<std::byte, 8> head{};
      std::vector<std::byte> tags(frame_sealer::tags_bytes(1));
      const std::span<const std::byte> part(reinterpret_cast<const std::byte*>(in.data()), bytes);
      std::byte* to = reinterpret_cast<std::byte*>(out.data());
      const std::string label = std::string("seal: ") + name +
                                (engine == seal_engine::openssl ? " (OpenSSL)" : " (libsodium)");
      show(label.c_str(), rate(
                              [&] {
                                sealer.seal({}, {&part, 1}, head, {&to, 1}, tags);
                              },
                              bytes, rounds, repeat));
    }
  }
  return 0;
}
