#pragma once
// worker::npy: the header of a NumPy .npy file, and the element types the loaders convert to
// float (worker/dataset.hpp, format npy). Pure: bytes in, values out; the loader does the I/O.
//
// A .npy file is the magic "\x93NUMPY", the format version (major, minor bytes), the length of
// the header text (little-endian: 2 bytes in version 1.0, 4 bytes in 2.0 and 3.0), the header
// text, a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }
// padded with spaces and a newline, then the elements in the order the header says.
// (Version 3.0 only allows UTF-8 in the header; the loaders read the same keys from it.)

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace coach::worker {

/// The element types read: little-endian integers and IEEE floats.
enum class npy_dtype { u1, i1, u2, i2, u4, i4, u8, i8, f4, f8 };

/// "|u1", "<f4", ...: the descr numpy writes for the type.
std::string_view to_string(npy_dtype t) noexcept;

/// Bytes per element.
std::size_t size_of(npy_dtype t) noexcept;

/// True for f4 and f8.
bool is_float(npy_dtype t) noexcept;

/// The descrs read, for messages: "|u1, |i1, <u2, ...".
std::string_view supported_npy_dtypes() noexcept;

/// Bytes before the header text: magic (6), version (2) and the header length (2 or 4).
inline constexpr std::size_t npy_preamble_v1 = 10;
inline constexpr std::size_t npy_preamble_v2 = 12;

/// What the preamble says.
struct npy_preamble {
  int major = 1;
  int minor = 0;
  std::size_t preamble_bytes = npy_preamble_v1;  ///< 10 (version 1.0) or 12 (2.0, 3.0)
  std::size_t header_bytes = 0;                  ///< the length of the header text
};

/// Checks the magic and the version of `bytes`, the first npy_preamble_v1 bytes of the file or
/// more, and reads the header length (which needs npy_preamble_v2 bytes for versions 2 and 3:
/// with fewer, header_bytes stays 0 and preamble_bytes says how many to read).
/// Errors (parse_error, naming `file`): bad magic, a version other than 1.0, 2.0 or 3.0.
result<npy_preamble> parse_npy_preamble(std::string_view bytes, std::string_view file);

/// A parsed header.
struct npy_header {
  npy_dtype dtype = npy_dtype::f4;
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;  ///< () for a scalar
  std::size_t data_offset = 0;       ///< bytes before the first element
  std::uint64_t elements = 1;        ///< the product of shape; checked not to overflow
};

/// Parses the header text (the dict literal). `data_offset` is stored as given.
/// Errors, naming `file`: parse_error for text that is not such a dict (a missing key, a value of
/// the wrong kind, a shape whose product overflows 2^63 bytes), invalid_argument for a descr that
/// is not one of supported_npy_dtypes() (big-endian, structured, strings, objects ...).
result<npy_header> parse_npy_header(std::string_view text, std::string_view file,
                                    std::size_t data_offset);

/// "(60000, 28, 28)", "(5,)", "()": the shape as Python writes it.
std::string shape_text(const std::vector<std::uint64_t>& shape);

/// Converts `count` elements of type `t` at `src` (little-endian, any alignment) to float at dst.
void npy_to_float(npy_dtype t, const unsigned char* src, std::size_t count, float* dst) noexcept;

/// The element at `src` as a double (exact for the integer types up to 2^53, and for f4, f8).
double npy_to_double(npy_dtype t, const unsigned char* src) noexcept;

}  // namespace coach::worker
