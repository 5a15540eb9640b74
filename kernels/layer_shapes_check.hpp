#pragma once
// validate(shape): whether a layer shape (kernels/layer_shapes.hpp) can run. The model layer calls
// it on its configuration and reports the error; the backends COACH_ENFORCE it (an invalid shape
// reaching a kernel is a programming error).

#include "common/error.hpp"
#include "kernels/layer_shapes.hpp"

namespace coach::kernels {

/// invalid_argument naming the field unless every size is > 0, pads are in [0, kernel) (every
/// window touches the input), the kernel fits the padded input and every tensor's element count
/// (input, output, weights, one image's column matrix) fits an int.
result<void> validate(const conv2d_shape& s);

/// As for conv2d_shape: sizes > 0, pads in [0, window), the window fits the padded input, the
/// input and output counts fit an int.
result<void> validate(const pool2d_shape& s);

/// invalid_argument unless every size is > 0 and N C S fits an int.
result<void> validate(const batch_norm_shape& s);

}  // namespace coach::kernels
