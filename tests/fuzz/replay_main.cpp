// codec_fuzz_replay: drives the libFuzzer entry point of codec_fuzz.cpp without libFuzzer, so
// every build (any compiler, ctest label `fuzz`) runs it on a deterministic corpus:
//
//   codec_fuzz_replay                   # seeds (valid headers) x 20,000 seeded mutations each
//   codec_fuzz_replay FILE...           # replays files, e.g. crash-* reproducers from libFuzzer
//   codec_fuzz_replay --write-seeds DIR # writes the seed headers, a corpus for codec_fuzz
//
// Mutations: bit flips, byte overwrites with boundary values, truncations, insertions (of one
// byte and of whole 8-byte words, which keep the size a multiple of 8 so parsing goes deep),
// word duplications; and each input is also fed at an unaligned address.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "wire/codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

using namespace coach::wire;
using bytes = std::vector<std::uint8_t>;

bytes encoded(const envelope& e, std::vector<std::size_t> frames, const coach::error* err) {
  std::vector<std::byte> out;
  if (err)
    codec::encode_header(e, frames, *err, out);
  else
    codec::encode_header(e, frames, out);
  bytes b(out.size());
  std::memcpy(b.data(), out.data(), out.size());
  return b;
}

std::vector<bytes> seeds() {
  std::vector<bytes> s;
  envelope e;
  e.src = {1, 11};
  e.dst = {2, 22};
  e.job = 7;
  e.map_version = 3;
  e.step = 42;
  e.rank = 5;
  e.epoch = 2;
  e.samples = 64;
  e.loss = 0.25;
  e.kind = msg_kind::push;
  e.ranges = {{0, 1024}, {4096, 8192}};
  s.push_back(encoded(e, {4096, 16384}, nullptr));
  e.kind = msg_kind::chunk_grant;
  e.ranges.clear();
  e.chunk_id = 9;
  e.flags = flag::no_chunk;
  s.push_back(encoded(e, {256}, nullptr));
  e.kind = msg_kind::step_report;
  e.compute_us = 1234;
  e.step = -1;
  s.push_back(encoded(e, {}, nullptr));
  e.kind = msg_kind::params;
  for (std::uint64_t i = 0; i < 16; ++i) e.ranges.push_back({i * 100, i * 100 + 50});
  s.push_back(encoded(e, std::vector<std::size_t>(16, 200), nullptr));
  const coach::error err{coach::errc::not_found, "shard 3 does not exist"};
  e.kind = msg_kind::pull;
  e.ranges = {{1, 2}};
  s.push_back(encoded(e, {}, &err));
  return s;
}

class mutator {
 public:
  explicit mutator(std::uint64_t seed) : rng_(seed) {}

  bytes operator()(bytes b) {
    const int rounds = 1 + int(pick(4));
    for (int r = 0; r < rounds; ++r) mutate_once(b);
    return b;
  }

 private:
  std::size_t pick(std::size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_);
  }
  std::uint8_t any_byte() { return std::uint8_t(pick(256)); }

  void mutate_once(bytes& b) {
    static constexpr std::uint8_t boundary[] = {0x00, 0x01, 0x07, 0x08, 0x7f, 0x80, 0xfe, 0xff};
    switch (pick(8)) {
      case 0:  // flip one bit
        if (!b.empty()) b[pick(b.size())] ^= std::uint8_t(1u << pick(8));
        break;
      case 1:  // overwrite a byte with a random value
        if (!b.empty()) b[pick(b.size())] = any_byte();
        break;
      case 2:  // overwrite a byte with a boundary value
        if (!b.empty()) b[pick(b.size())] = boundary[pick(std::size(boundary))];
        break;
      case 3:  // truncate
        b.resize(pick(b.size() + 1));
        break;
      case 4:  // insert one byte
        b.insert(b.begin() + std::ptrdiff_t(pick(b.size() + 1)), any_byte());
        break;
      case 5: {  // insert a whole word at a word boundary (size stays a multiple of 8)
        const std::size_t at = 8 * pick(b.size() / 8 + 1);
        bytes w(8);
        for (auto& x : w) x = pick(2) ? any_byte() : 0;
        b.insert(b.begin() + std::ptrdiff_t(std::min(at, b.size())), w.begin(), w.end());
        break;
      }
      case 6: {  // duplicate a word elsewhere (copies pointers, so they alias or dangle)
        if (b.size() < 16) break;
        const std::size_t from = 8 * pick(b.size() / 8), to = 8 * pick(b.size() / 8);
        std::memmove(b.data() + to, b.data() + from, 8);
        break;
      }
      default: {  // set a 32-bit field to an extreme (segment sizes, list counts, offsets)
        if (b.size() < 4) break;
        const std::size_t at = 4 * pick(b.size() / 4);
        const std::uint32_t v =
            pick(2) ? std::numeric_limits<std::uint32_t>::max() : std::uint32_t(pick(1u << 16));
        std::memcpy(b.data() + at, &v, 4);
        break;
      }
    }
  }

  std::mt19937_64 rng_;
};

void feed(const bytes& b) {
  LLVMFuzzerTestOneInput(b.data(), b.size());
  // The same bytes at an odd address: decode_header must copy, not misread.
  static std::vector<std::uint8_t> shifted;
  shifted.assign(b.size() + 1, 0);
  if (!b.empty()) std::memcpy(shifted.data() + 1, b.data(), b.size());
  LLVMFuzzerTestOneInput(shifted.data() + 1, b.size());
}

int replay_files(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "codec_fuzz_replay: cannot read '%s'\n", argv[i]);
      return 2;
    }
    const bytes b{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    feed(b);
    std::printf("%s: %zu bytes, ok\n", argv[i], b.size());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--write-seeds") {
    const auto s = seeds();
    for (std::size_t i = 0; i < s.size(); ++i) {
      const std::string path = std::string(argv[2]) + "/seed-" + std::to_string(i);
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(s[i].data()), std::streamsize(s[i].size()));
      if (!out) {
        std::fprintf(stderr, "codec_fuzz_replay: cannot write '%s'\n", path.c_str());
        return 2;
      }
    }
    std::printf("wrote %zu seeds to %s\n", s.size(), argv[2]);
    return 0;
  }
  if (argc > 1) return replay_files(argc, argv);

  constexpr int mutations_per_seed = 20000;
  std::size_t inputs = 0, decoded = 0;
  mutator mutate(0xc0ac4);
  for (const auto& seed : seeds()) {
    feed(seed);
    for (int i = 0; i < mutations_per_seed; ++i) {
      const bytes b = mutate(seed);
      feed(b);
      ++inputs;
      decoded += codec::decode_header({reinterpret_cast<const std::byte*>(b.data()), b.size()})
                     .has_value();
    }
  }
  // Properties are checked inside LLVMFuzzerTestOneInput (it aborts on a violation); reaching
  // here means none was violated. The mutations must reach both outcomes to mean anything.
  if (decoded == 0 || decoded == inputs) {
    std::fprintf(stderr, "codec_fuzz_replay: %zu of %zu decoded: the corpus is not exploring\n",
                 decoded, inputs);
    return 1;
  }
  std::printf(
      "codec_fuzz_replay: %zu mutated headers (each also unaligned), %zu decoded, %zu "
      "refused, no property violated\n",
      inputs, decoded, inputs - decoded);
  return 0;
}
