#pragma once
// kernels::math_precision: how a backend's matrix products (gemm and the convolutions' products)
// treat their operands. fp32 multiplies the floats as they are; tf32 and bf16 first round each
// operand to the format's mantissa (10 and 7 bits, the float's exponent range kept), which lets
// a GPU run the products on its tensor cores. Either way each product of two rounded operands is
// exact in float and the sums accumulate in float, into float results: activations, gradients,
// the elementwise ops and the optimizer stay float32. round_to() is the rounding the cpu backend
// applies (the reference the cuda backend is tested against).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.hpp"

namespace coach::kernels {

enum class math_precision { fp32, tf32, bf16 };

/// Parses "fp32" | "tf32" | "bf16".
result<math_precision> parse_math_precision(std::string_view text);
std::string_view to_string(math_precision p) noexcept;

/// Mantissa bits a precision drops from a float's 23.
constexpr int dropped_bits(math_precision p) noexcept {
  return p == math_precision::bf16 ? 16 : p == math_precision::tf32 ? 13 : 0;
}

/// x rounded to p's mantissa, to nearest with ties to even (as PyTorch's float -> bfloat16). An
/// infinity stays itself; a NaN stays a NaN (quiet); a finite value past the largest finite of
/// the format becomes an infinity of its sign, as in IEEE rounding.
inline float round_to(math_precision p, float x) noexcept {
  const int drop = dropped_bits(p);
  if (drop == 0) return x;
  std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7f800000u) == 0x7f800000u) {             // infinity or NaN
    if ((bits & 0x007fffffu) != 0) bits |= 0x00400000u;  // a NaN stays one after the cut
    return std::bit_cast<float>(bits & ~((1u << drop) - 1));
  }
  const std::uint32_t half = (1u << (drop - 1)) - 1;
  const std::uint32_t odd = (bits >> drop) & 1u;
  bits += half + odd;
  return std::bit_cast<float>(bits & ~((1u << drop) - 1));
}

/// dst[i] = round_to(p, src[i]) for i < n (dst may be src).
void round_into(math_precision p, const float* src, std::size_t n, float* dst) noexcept;

}  // namespace coach::kernels
