#include "worker/npy.hpp"

#include <array>
#include <bit>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

namespace coach::worker {
namespace {

// The elements are little-endian; the conversions below copy them as they lie.
static_assert(std::endian::native == std::endian::little,
              "worker/npy.cpp reads little-endian .npy data on a little-endian host only");

constexpr std::string_view npy_magic{"\x93NUMPY", 6};
constexpr std::size_t max_header_bytes = std::size_t{1} << 20;

struct dtype_name {
  std::string_view descr;
  npy_dtype type;
};

constexpr std::array<dtype_name, 10> dtype_names{{{"|u1", npy_dtype::u1},
                                                  {"|i1", npy_dtype::i1},
                                                  {"<u2", npy_dtype::u2},
                                                  {"<i2", npy_dtype::i2},
                                                  {"<u4", npy_dtype::u4},
                                                  {"<i4", npy_dtype::i4},
                                                  {"<u8", npy_dtype::u8},
                                                  {"<i8", npy_dtype::i8},
                                                  {"<f4", npy_dtype::f4},
                                                  {"<f8", npy_dtype::f8}}};

/// Text quoted in a message: printable, at most 60 characters.
std::string printable(std::string_view text) {
  std::string s;
  for (char c : text.substr(0, 60)) {
    s.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c);
  }
  if (text.size() > 60) s += "...";
  return s;
}

/// A cursor over the header dict; every method skips the blanks before its token.
class dict_reader {
 public:
  explicit dict_reader(std::string_view text) : text_(text) {}

  bool at_end() {
    skip_blanks();
    return pos_ >= text_.size();
  }
  /// Consumes `c` when it is next.
  bool take(char c) {
    skip_blanks();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool peek(char c) {
    skip_blanks();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  /// A Python string literal in single or double quotes, without escapes.
  bool string(std::string_view& out) {
    skip_blanks();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) return false;
    const char quote = text_[pos_];
    const std::size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) return false;
    out = text_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return true;
  }
  /// True or False.
  bool boolean(bool& out) {
    skip_blanks();
    for (const auto& [word, value] :
         {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        out = value;
        return true;
      }
    }
    return false;
  }
  /// A non-negative integer (Python 2 wrote a trailing L on longs).
  bool integer(std::uint64_t& out) {
    skip_blanks();
    const char* first = text_.data() + pos_;
    const char* last = text_.data() + text_.size();
    const auto [ptr, ec] = std::from_chars(first, last, out);
    if (ec != std::errc() || ptr == first) return false;
    pos_ += std::size_t(ptr - first);
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
    return true;
  }
  /// Skips a value this reader does not interpret: up to the next ',' or '}' at depth 0.
  std::string_view rest_of_value() {
    skip_blanks();
    const std::size_t start = pos_;
    int depth = 0;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '[' || c == '(' || c == '{') ++depth;
      if (c == ']' || c == ')' || c == '}') {
        if (depth == 0) break;
        --depth;
      }
      if (c == ',' && depth == 0) break;
      ++pos_;
    }
    return text_.substr(start, pos_ - start);
  }

 private:
  void skip_blanks() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

template <class T>
T load(const unsigned char* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
void convert(const unsigned char* src, std::size_t count, float* dst) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, count * sizeof(float));
  } else {
    for (std::size_t i = 0; i < count; ++i) dst[i] = float(load<T>(src + i * sizeof(T)));
  }
}

}  // namespace

std::string_view to_string(npy_dtype t) noexcept {
  for (const auto& d : dtype_names) {
    if (d.type == t) return d.descr;
  }
  return "?";
}

std::size_t size_of(npy_dtype t) noexcept {
  switch (t) {
    case npy_dtype::u1:
    case npy_dtype::i1:
      return 1;
    case npy_dtype::u2:
    case npy_dtype::i2:
      return 2;
    case npy_dtype::u4:
    case npy_dtype::i4:
    case npy_dtype::f4:
      return 4;
    case npy_dtype::u8:
    case npy_dtype::i8:
    case npy_dtype::f8:
      return 8;
  }
  return 1;
}

bool is_float(npy_dtype t) noexcept {
  return t == npy_dtype::f4 || t == npy_dtype::f8;
}

std::string_view supported_npy_dtypes() noexcept {
  return "|u1, |i1, <u2, <i2, <u4, <i4, <u8, <i8, <f4, <f8";
}

result<npy_preamble> parse_npy_preamble(std::string_view bytes, std::string_view file) {
  if (bytes.size() < npy_magic.size() || bytes.substr(0, npy_magic.size()) != npy_magic) {
    std::string found;
    for (unsigned char c : bytes.substr(0, npy_magic.size())) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "%02X", unsigned(c));
      found += hex;
    }
    return fail(errc::parse_error,
                "{}: not a .npy file: bad magic 0x{}, expected 0x934E554D5059 (\\x93NUMPY)", file,
                found.empty() ? std::string("(empty)") : found);
  }
  if (bytes.size() < npy_preamble_v1) {
    return fail(errc::parse_error, "{}: truncated header: expected at least {} bytes, got {}", file,
                npy_preamble_v1, bytes.size());
  }
  npy_preamble p;
  p.major = static_cast<unsigned char>(bytes[6]);
  p.minor = static_cast<unsigned char>(bytes[7]);
  if (p.minor != 0 || p.major < 1 || p.major > 3) {
    return fail(errc::parse_error,
                "{}: .npy format version {}.{} is not supported (1.0, 2.0, 3.0 are)", file, p.major,
                p.minor);
  }
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  if (p.major == 1) {
    p.preamble_bytes = npy_preamble_v1;
    p.header_bytes = std::size_t(u[8]) | (std::size_t(u[9]) << 8);
  } else {
    p.preamble_bytes = npy_preamble_v2;
    if (bytes.size() < npy_preamble_v2) return p;  // the caller reads 2 more bytes
    p.header_bytes = std::size_t(u[8]) | (std::size_t(u[9]) << 8) | (std::size_t(u[10]) << 16) |
                     (std::size_t(u[11]) << 24);
  }
  if (p.header_bytes > max_header_bytes) {
    return fail(errc::parse_error, "{}: header of {} bytes is implausibly long (at most {})", file,
                p.header_bytes, max_header_bytes);
  }
  return p;
}

result<npy_header> parse_npy_header(std::string_view text, std::string_view file,
                                    std::size_t data_offset) {
  const auto malformed = [&](std::string_view what) {
    return fail(errc::parse_error, "{}: malformed .npy header ({}): {}", file, what,
                printable(text));
  };
  npy_header h;
  h.data_offset = data_offset;
  dict_reader in(text);
  if (!in.take('{')) return malformed("expected a dict");
  bool have_descr = false, have_order = false, have_shape = false;
  while (!in.take('}')) {
    std::string_view key;
    if (!in.string(key)) return malformed("expected a quoted key");
    if (!in.take(':')) return malformed("expected ':' after a key");
    if (key == "descr") {
      std::string_view descr;
      if (!in.string(descr)) {
        return fail(errc::invalid_argument,
                    "{}: dtype {} is not supported (a structured dtype); supported: {}", file,
                    printable(in.rest_of_value()), supported_npy_dtypes());
      }
      // Byte order means nothing for one-byte types: numpy writes '|', other writers '<' or '='.
      std::string name(descr);
      if (name.size() == 3 && name[2] == '1' &&
          (name[0] == '<' || name[0] == '>' || name[0] == '=')) {
        name[0] = '|';
      }
      const dtype_name* found = nullptr;
      for (const auto& d : dtype_names) {
        if (d.descr == name) found = &d;
      }
      if (found == nullptr) {
        return fail(errc::invalid_argument, "{}: dtype '{}' is not supported; supported: {}", file,
                    printable(descr), supported_npy_dtypes());
      }
      h.dtype = found->type;
      have_descr = true;
    } else if (key == "fortran_order") {
      if (!in.boolean(h.fortran_order)) return malformed("fortran_order must be True or False");
      have_order = true;
    } else if (key == "shape") {
      if (!in.take('(')) return malformed("shape must be a tuple");
      while (!in.take(')')) {
        std::uint64_t d = 0;
        if (!in.integer(d)) return malformed("shape must hold non-negative integers");
        h.shape.push_back(d);
        if (!in.take(',') && !in.peek(')')) return malformed("expected ',' or ')' in the shape");
      }
      have_shape = true;
    } else {
      return malformed("unknown key '" + printable(key) + "'");
    }
    if (!in.take(',') && !in.peek('}')) return malformed("expected ',' or '}' after a value");
  }
  if (!have_descr) return malformed("no 'descr'");
  if (!have_order) return malformed("no 'fortran_order'");
  if (!have_shape) return malformed("no 'shape'");
  // Elements and bytes must fit: a corrupt shape must not wrap around to a small size.
  const std::uint64_t limit = (std::uint64_t{1} << 63) / size_of(h.dtype);
  h.elements = 1;
  for (std::uint64_t d : h.shape) {
    if (d != 0 && h.elements > limit / d) {
      return fail(errc::parse_error, "{}: shape {} is too large", file, shape_text(h.shape));
    }
    h.elements *= d;
  }
  return h;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

void npy_to_float(npy_dtype t, const unsigned char* src, std::size_t count, float* dst) noexcept {
  switch (t) {
    case npy_dtype::u1:
      return convert<std::uint8_t>(src, count, dst);
    case npy_dtype::i1:
      return convert<std::int8_t>(src, count, dst);
    case npy_dtype::u2:
      return convert<std::uint16_t>(src, count, dst);
    case npy_dtype::i2:
      return convert<std::int16_t>(src, count, dst);
    case npy_dtype::u4:
      return convert<std::uint32_t>(src, count, dst);
    case npy_dtype::i4:
      return convert<std::int32_t>(src, count, dst);
    case npy_dtype::u8:
      return convert<std::uint64_t>(src, count, dst);
    case npy_dtype::i8:
      return convert<std::int64_t>(src, count, dst);
    case npy_dtype::f4:
      return convert<float>(src, count, dst);
    case npy_dtype::f8:
      return convert<double>(src, count, dst);
  }
}

double npy_to_double(npy_dtype t, const unsigned char* src) noexcept {
  switch (t) {
    case npy_dtype::u1:
      return double(load<std::uint8_t>(src));
    case npy_dtype::i1:
      return double(load<std::int8_t>(src));
    case npy_dtype::u2:
      return double(load<std::uint16_t>(src));
    case npy_dtype::i2:
      return double(load<std::int16_t>(src));
    case npy_dtype::u4:
      return double(load<std::uint32_t>(src));
    case npy_dtype::i4:
      return double(load<std::int32_t>(src));
    case npy_dtype::u8:
      return double(load<std::uint64_t>(src));
    case npy_dtype::i8:
      return double(load<std::int64_t>(src));
    case npy_dtype::f4:
      return double(load<float>(src));
    case npy_dtype::f8:
      return load<double>(src);
  }
  return 0;
}

}  // namespace coach::worker
