#include "kernels/precision.hpp"

namespace coach::kernels {

result<math_precision> parse_math_precision(std::string_view text) {
  if (text == "fp32") return math_precision::fp32;
  if (text == "tf32") return math_precision::tf32;
  if (text == "bf16") return math_precision::bf16;
  return fail(errc::invalid_argument, "precision '{}' is not one of fp32, tf32, bf16", text);
}

std::string_view to_string(math_precision p) noexcept {
  switch (p) {
    case math_precision::fp32:
      return "fp32";
    case math_precision::tf32:
      return "tf32";
    case math_precision::bf16:
      return "bf16";
  }
  return "unknown";
}

void round_into(math_precision p, const float* src, std::size_t n, float* dst) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = round_to(p, src[i]);
}

}  // namespace coach::kernels
