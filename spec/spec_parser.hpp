#pragma once
// scheduler::detail::spec_parser: the generic reader of a YAML spec (spec/job_spec.hpp):
// maps opened with their allowed keys (an unknown key gets a "did you mean" suggestion, a
// duplicate is refused), and scalars read as strings, integers, numbers and enums within
// bounds. Every failure is one line "SOURCE:LINE: field 'PATH' ...", naming the value at fault.
// It knows nothing of what a job spec holds: the sections are read by the job_spec*.cpp sources
// (spec/job_spec_sections.hpp). Private to them.

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.hpp"

namespace coach::scheduler::detail {

/// A value quoted for an error message: printable, at most `limit` characters.
std::string printable(std::string_view text, std::size_t limit = 40);

/// The first document of `text` (null when there is none). Fails on a stream of several
/// documents, and on a token that no document can start with: yaml-cpp 0.7's LoadAll loops
/// forever, allocating, on such input (e.g. a leading ','; fixed upstream in yaml-cpp PR #1319),
/// so documents are counted here with a bound and only the first is loaded.
/// Throws what yaml-cpp throws.
result<YAML::Node> load_single_document(const std::string& text, const std::string& source);

/// The error of a tab in the indentation of a line at or before `line` (1-based; the first
/// such line): "SOURCE:LINE:COLUMN: a tab indents this line: YAML indents with spaces",
/// or nothing. yaml-cpp's own words for it ("illegal map value") name no tab.
std::optional<error> indenting_tab(std::string_view text, std::string_view source, int line);

/// What a node holds, for "got ..." in messages: 'text', a list, a map, nothing.
std::string describe(const YAML::Node& n);

/// "prefix.key", or "key" with no prefix.
std::string join(std::string_view prefix, std::string_view key);

/// One `key: value` of a map, with the dotted path of the key.
struct entry {
  YAML::Node key;
  YAML::Node value;
  std::string path;
};

class spec_parser;

/// The checked fields of one map (spec_parser::open_map): no unknown and no duplicate keys.
class fields {
 public:
  /// The entry of `key`, or null when the map does not hold it.
  const entry* find(std::string_view key) const {
    for (const entry& e : entries_) {
      if (e.key.Scalar() == key) return &e;
    }
    return nullptr;
  }
  /// The dotted path of `key` in this map.
  std::string path(std::string_view key) const { return join(prefix_, key); }
  /// The line of the key that opened the map (1 for the top level).
  int line() const { return line_; }

 private:
  friend class spec_parser;
  std::vector<entry> entries_;
  std::string prefix_;
  int line_ = 1;
};

/// Reads the fields of one YAML document for the source named `source`. Every method returns
/// the first error it meets.
class spec_parser {
 public:
  explicit spec_parser(std::string_view source) : source_(source.empty() ? "<job spec>" : source) {}

  /// The name messages start with ("<job spec>" when none was given).
  const std::string& source() const noexcept { return source_; }

  /// The 1-based line of `n`, or `fallback` when it has none.
  static int line_of(const YAML::Node& n, int fallback) {
    const int l = n.Mark().line;
    return l >= 0 ? l + 1 : fallback;
  }
  /// Where a value sits: its own line, or its key's line when it is empty.
  static int line_of(const entry& e) {
    const int key_line = line_of(e.key, 1);
    return e.value.IsNull() ? key_line : line_of(e.value, key_line);
  }

  /// "SOURCE:LINE: field 'PATH' " followed by the formatted text, as an error of `code`.
  template <class... Args>
  std::unexpected<error> bad(errc code, int line, std::string_view path, std::string_view fmt,
                             const Args&... args) const {
    return fail(code, "{}:{}: field '{}' {}", source_, line, path, coach::format(fmt, args...));
  }
  /// bad() for the value of `e`: invalid_argument at its line.
  template <class... Args>
  std::unexpected<error> bad(const entry& e, std::string_view fmt, const Args&... args) const {
    return bad(errc::invalid_argument, line_of(e), e.path, fmt, args...);
  }
  /// "... field 'PATH.key' is required", at the line of the map `f`.
  std::unexpected<error> missing(const fields& f, std::string_view key) const {
    return bad(errc::invalid_argument, f.line(), f.path(key), "is required");
  }

  /// The entries of `map` (whose keys are under `prefix`, opened at `line`); keys outside
  /// `allowed` are refused, with the closest allowed key (edit distance < 3) suggested.
  result<fields> open_map(const YAML::Node& map, std::string_view prefix, int line,
                          std::span<const std::string_view> allowed) const;
  result<fields> open_map(const YAML::Node& map, std::string_view prefix, int line,
                          std::initializer_list<std::string_view> allowed) const {
    return open_map(map, prefix, line, std::span(allowed.begin(), allowed.size()));
  }
  /// open_map of the value of `e`, which must be a map.
  result<fields> open_map(const entry& e, std::span<const std::string_view> allowed) const;
  result<fields> open_map(const entry& e, std::initializer_list<std::string_view> allowed) const {
    return open_map(e, std::span(allowed.begin(), allowed.size()));
  }

  result<std::string> get_string(const entry& e) const;
  /// An integer in [lo, hi].
  result<std::int64_t> get_int(const entry& e, std::int64_t lo, std::int64_t hi) const;
  /// An unsigned integer >= lo.
  result<std::uint64_t> get_uint(const entry& e, std::uint64_t lo) const;
  /// A finite number in [lo, hi] (or (lo, hi] / [lo, hi) when the end is open).
  result<double> get_number(const entry& e, double lo, bool lo_open, double hi, bool hi_open) const;
  /// get_number, as a float that keeps the bounds.
  result<float> get_float(const entry& e, double lo, bool lo_open, double hi, bool hi_open) const;
  /// The value of the name `e` holds; `allowed` lists the names for the message.
  template <class T>
  result<T> get_enum(const entry& e, std::initializer_list<std::pair<std::string_view, T>> values,
                     std::string_view allowed) const {
    if (!e.value.IsScalar()) {
      return bad(e, "must be one of {}, got {}", allowed, describe(e.value));
    }
    for (const auto& [name, v] : values) {
      if (e.value.Scalar() == name) return v;
    }
    return bad(e, "must be one of {}, got {}", allowed, describe(e.value));
  }

 private:
  std::string source_;
};

}  // namespace coach::scheduler::detail
