#include "kernels/layer_shapes_check.hpp"

#include <climits>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <utility>

namespace coach::kernels {
namespace {

/// Product of the sizes (non-negative), saturated at SIZE_MAX so that validate() sees an
/// oversized shape instead of a wrapped count.
std::size_t product(std::initializer_list<int> sizes) {
  std::size_t p = 1;
  for (int s : sizes) {
    const auto v = static_cast<std::size_t>(s < 0 ? 0 : s);
    if (v != 0 && p > SIZE_MAX / v) return SIZE_MAX;
    p *= v;
  }
  return p;
}

/// invalid_argument naming `field` unless value > 0.
result<void> positive(std::string_view what, std::string_view field, int value) {
  if (value > 0) return {};
  return fail(errc::invalid_argument, "{}: field '{}' must be > 0, got {}", what, field, value);
}

/// Checks one spatial dimension: pad in [0, window), the window fits the padded input.
result<void> dimension(std::string_view what, std::string_view axis, int in, int window, int pad) {
  if (pad < 0 || pad >= window)
    return fail(errc::invalid_argument,
                "{}: padding along {} must be in [0, window {}) so that every window touches the "
                "input, got {}",
                what, axis, window, pad);
  // in, window and pad are positive and below INT_MAX / 4 here (checked before), so no overflow.
  if (in + 2 * pad < window)
    return fail(errc::invalid_argument, "{}: window {} along {} exceeds the padded input {}", what,
                window, axis, in + 2 * pad);
  return {};
}

/// Rejects sizes whose element counts (each tensor, and each plane) do not fit an int.
result<void> fits(std::string_view what, std::initializer_list<std::size_t> counts) {
  for (std::size_t c : counts)
    if (c > static_cast<std::size_t>(INT_MAX))
      return fail(errc::invalid_argument, "{}: a tensor of {} elements exceeds the int index range",
                  what, c);
  return {};
}

constexpr int size_cap = INT_MAX / 4;

result<void> not_huge(std::string_view what, std::initializer_list<int> sizes) {
  for (int s : sizes)
    if (s > size_cap) return fail(errc::invalid_argument, "{}: size {} is too large", what, s);
  return {};
}

}  // namespace

// --- conv2d_shape ---------------------------------------------------------------------------

result<void> validate(const conv2d_shape& s) {
  constexpr std::string_view what = "conv2d";
  for (auto [field, value] : {std::pair<std::string_view, int>{"batch", s.batch},
                              {"channels", s.channels},
                              {"height", s.height},
                              {"width", s.width},
                              {"filters", s.filters},
                              {"kernel_h", s.kernel_h},
                              {"kernel_w", s.kernel_w},
                              {"stride_h", s.stride_h},
                              {"stride_w", s.stride_w}})
    if (auto ok = positive(what, field, value); !ok) return ok;
  if (auto ok = not_huge(what, {s.batch, s.channels, s.height, s.width, s.filters, s.kernel_h,
                                s.kernel_w, s.stride_h, s.stride_w, s.pad_h, s.pad_w});
      !ok)
    return ok;
  if (auto ok = dimension(what, "height", s.height, s.kernel_h, s.pad_h); !ok) return ok;
  if (auto ok = dimension(what, "width", s.width, s.kernel_w, s.pad_w); !ok) return ok;
  const int oh = s.out_h(), ow = s.out_w();
  return fits(what, {product({s.batch, s.channels, s.height, s.width}),
                     product({s.batch, s.filters, oh, ow}),
                     product({s.filters, s.channels, s.kernel_h, s.kernel_w}),
                     product({s.channels, s.kernel_h, s.kernel_w, oh, ow})});
}

// --- pool2d_shape ---------------------------------------------------------------------------

result<void> validate(const pool2d_shape& s) {
  constexpr std::string_view what = "pool2d";
  for (auto [field, value] : {std::pair<std::string_view, int>{"batch", s.batch},
                              {"channels", s.channels},
                              {"height", s.height},
                              {"width", s.width},
                              {"window_h", s.window_h},
                              {"window_w", s.window_w},
                              {"stride_h", s.stride_h},
                              {"stride_w", s.stride_w}})
    if (auto ok = positive(what, field, value); !ok) return ok;
  if (auto ok = not_huge(what, {s.batch, s.channels, s.height, s.width, s.window_h, s.window_w,
                                s.stride_h, s.stride_w, s.pad_h, s.pad_w});
      !ok)
    return ok;
  if (auto ok = dimension(what, "height", s.height, s.window_h, s.pad_h); !ok) return ok;
  if (auto ok = dimension(what, "width", s.width, s.window_w, s.pad_w); !ok) return ok;
  return fits(what, {product({s.batch, s.channels, s.height, s.width}),
                     product({s.batch, s.channels, s.out_h(), s.out_w()})});
}

// --- batch_norm_shape -----------------------------------------------------------------------

result<void> validate(const batch_norm_shape& s) {
  constexpr std::string_view what = "batch_norm";
  for (auto [field, value] : {std::pair<std::string_view, int>{"batch", s.batch},
                              {"channels", s.channels},
                              {"spatial", s.spatial}})
    if (auto ok = positive(what, field, value); !ok) return ok;
  return fits(what, {product({s.batch, s.channels, s.spatial})});
}

}  // namespace coach::kernels
