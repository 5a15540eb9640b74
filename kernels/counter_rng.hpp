#pragma once
// kernels::counter_rng: the stateless random numbers of dropout. The value for element i of a
// call is a pure function of (seed, step, i), so the cpu and cuda backends draw the same mask for
// the same call, backward recomputes forward's mask instead of storing it, and a replay of a step
// (a retried chunk) draws it again.
//
// The mixer is SplitMix64's finalizer (Steele, Lea & Flood 2014; the seeding function of
// xoshiro): a bijection on 64 bits whose output passes BigCrush for consecutive inputs.
// key = mix(seed ^ mix(step)); bits(i) = mix(key + i); the top 24 bits give a uniform integer in
// [0, 2^24), compared with a threshold of p 2^24: integer arithmetic only, identical on any
// compiler and device.
//
// This header is included by nvcc (cuda_layers.cu, at most C++20) and by host code, so it uses
// C++17 and no Coach header that needs more.

#include <cstdint>

#include "kernels/host_device.hpp"

namespace coach::kernels::counter_rng {

/// SplitMix64's output function of z + golden gamma.
COACH_HOST_DEVICE inline std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// The per-call key of (seed, step).
COACH_HOST_DEVICE inline std::uint64_t key(std::uint64_t seed, std::uint64_t step) {
  return mix(seed ^ mix(step));
}

/// Uniform integer in [0, 2^24) for element i under `key`.
COACH_HOST_DEVICE inline std::uint32_t uniform24(std::uint64_t key, std::uint64_t i) {
  return static_cast<std::uint32_t>(mix(key + i) >> 40);
}

/// The threshold of drop probability p: an element is dropped when uniform24 < threshold, so it
/// is kept with probability 1 - threshold / 2^24 = 1 - p to within 2^-24.
/// REQUIRES: 0 <= p < 1.
inline std::uint32_t drop_threshold(float p) {
  return static_cast<std::uint32_t>(static_cast<double>(p) * 16777216.0);
}

/// True when dropout keeps element i of the call (seed, step) at drop probability p.
inline bool keeps(std::uint64_t seed, std::uint64_t step, std::uint64_t i, float p) {
  return uniform24(key(seed, step), i) >= drop_threshold(p);
}

}  // namespace coach::kernels::counter_rng
