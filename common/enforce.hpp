#pragma once
// COACH_ENFORCE: invariant checks. A failure is a programming error, never bad input: it prints
// file:line and the message, then aborts. Input from users, files or the network gets a
// coach::error instead (common/error.hpp).

#include <cstdio>
#include <cstdlib>

#define COACH_ENFORCE(cond, msg)                                                                  \
  do {                                                                                            \
    if (!(cond)) [[unlikely]] {                                                                   \
      std::fprintf(stderr, "%s:%d: invariant failed: %s (%s)\n", __FILE__, __LINE__, #cond, msg); \
      std::abort();                                                                               \
    }                                                                                             \
  } while (false)
