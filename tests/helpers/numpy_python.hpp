#pragma once
// The interpreter the tests of script models run their NumPy scripts with: Debian's python3 with
// python3-numpy (a pyenv python3 first on PATH may lack NumPy), and the skip where it cannot.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace coach_tests {

inline const std::string numpy_python = "/usr/bin/python3";

/// Whether numpy_python imports numpy (asked once).
inline bool have_numpy() {
  static const bool ok =
      std::system((numpy_python + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0;
  return ok;
}

}  // namespace coach_tests

/// Skips the test, saying why, where numpy_python cannot import numpy.
#define COACH_NEED_NUMPY()                    \
  if (!::coach_tests::have_numpy())           \
  GTEST_SKIP() << ::coach_tests::numpy_python \
               << " cannot import numpy (apt-get install python3-numpy)"
