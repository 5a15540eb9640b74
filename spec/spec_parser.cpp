#include "spec/spec_parser.hpp"

#include <yaml-cpp/anchor.h>
#include <yaml-cpp/eventhandler.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>
#include <system_error>

#include "common/nearest.hpp"

namespace coach::scheduler::detail {
namespace {

/// Records where each document of a stream starts; ignores everything else.
class document_marks : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

/// " (did you mean 'PATH'?)" for the allowed key closest to `key` (edit distance < 3), or "".
std::string suggestion(std::string_view prefix, std::string_view key,
                       std::span<const std::string_view> allowed) {
  const std::string_view best = nearest(key, allowed);
  if (best.empty()) return {};
  return coach::format(" (did you mean '{}'?)", join(prefix, best));
}

}  // namespace

std::string printable(std::string_view text, std::size_t limit) {
  std::string s;
  for (char c : text.substr(0, limit)) {
    s.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c);
  }
  if (text.size() > limit) s += "...";
  return s;
}

std::optional<error> indenting_tab(std::string_view text, std::string_view source, int line) {
  int number = 1;
  for (std::size_t pos = 0; pos < text.size() && number <= line; ++number) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view l = text.substr(pos, eol - pos);
    pos = eol + 1;
    // yaml-cpp refuses a tab on a line of blanks too ("illegal tab when looking for indentation").
    const std::size_t indent = std::min(l.find_first_not_of(" \t"), l.size());
    if (const std::size_t tab = l.substr(0, indent).find('\t'); tab != std::string_view::npos)
      return error{errc::parse_error,
                   coach::format("{}:{}:{}: a tab indents this line: YAML indents with spaces",
                                 source, number, tab + 1)};
  }
  return std::nullopt;
}

result<YAML::Node> load_single_document(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  document_marks marks;
  while (marks.starts.size() < 2 && parser.HandleNextDocument(marks)) {
    const std::size_t n = marks.starts.size();
    if (n >= 2 && marks.starts[n - 1].pos <= marks.starts[n - 2].pos) {
      // The parser made no progress: the token at this mark cannot start a node.
      const YAML::Mark m = marks.starts[n - 1];
      const std::size_t pos = m.pos >= 0 ? std::size_t(m.pos) : 0;
      if (auto tab = indenting_tab(text, source, m.line >= 0 ? m.line + 1 : 1))
        return std::unexpected(*tab);
      return fail(errc::parse_error, "{}:{}: malformed YAML: unexpected '{}'", source,
                  m.line >= 0 ? m.line + 1 : 1,
                  pos < text.size() ? printable(text.substr(pos, 1)) : std::string("end"));
    }
  }
  if (marks.starts.size() >= 2) {
    const int line = marks.starts[1].line;
    return fail(errc::invalid_argument, "{}:{}: holds several YAML documents; a job spec is one",
                source, line >= 0 ? line + 1 : 1);
  }
  return YAML::Load(text);
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar: {
      // Appended, not "'" + ...: g++ 12 at -O3 warns (-Wrestrict) about that form here.
      std::string quoted = "'";
      quoted += printable(n.Scalar());
      quoted += '\'';
      return quoted;
    }
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

std::string join(std::string_view prefix, std::string_view key) {
  if (prefix.empty()) return std::string(key);
  return std::string(prefix) + "." + std::string(key);
}

result<fields> spec_parser::open_map(const YAML::Node& map, std::string_view prefix, int line,
                                     std::span<const std::string_view> allowed) const {
  fields f;
  f.prefix_ = std::string(prefix);
  f.line_ = line;
  for (auto it = map.begin(); it != map.end(); ++it) {
    entry e{it->first, it->second, {}};
    const int key_line = line_of(e.key, line);
    if (!e.key.IsScalar()) {
      return fail(errc::invalid_argument, "{}:{}: field names in '{}' must be plain words, got {}",
                  source_, key_line, prefix.empty() ? "<top level>" : prefix, describe(e.key));
    }
    e.path = join(prefix, e.key.Scalar());
    if (std::find(allowed.begin(), allowed.end(), e.key.Scalar()) == allowed.end()) {
      return fail(errc::invalid_argument, "{}:{}: unknown field '{}'{}", source_, key_line,
                  printable(e.path), suggestion(prefix, e.key.Scalar(), allowed));
    }
    if (const entry* first = f.find(e.key.Scalar())) {
      return bad(errc::invalid_argument, key_line, e.path, "appears twice (first on line {})",
                 line_of(first->key, line));
    }
    f.entries_.push_back(std::move(e));
  }
  return f;
}

result<fields> spec_parser::open_map(const entry& e,
                                     std::span<const std::string_view> allowed) const {
  if (!e.value.IsMap()) return bad(e, "must be a map, got {}", describe(e.value));
  // A missing field is reported at the line of the key that opens the map.
  return open_map(e.value, e.path, line_of(e.key, 1), allowed);
}

result<std::string> spec_parser::get_string(const entry& e) const {
  if (!e.value.IsScalar()) return bad(e, "must be a string, got {}", describe(e.value));
  return e.value.Scalar();
}

result<std::int64_t> spec_parser::get_int(const entry& e, std::int64_t lo, std::int64_t hi) const {
  if (!e.value.IsScalar()) return bad(e, "must be an integer, got {}", describe(e.value));
  std::string_view s = e.value.Scalar();
  if (s.size() > 1 && s.front() == '+') s.remove_prefix(1);
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) {
    return bad(e, "is out of range, got {}", describe(e.value));
  }
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) {
    return bad(e, "must be an integer, got {}", describe(e.value));
  }
  if (v < lo || v > hi) {
    if (hi == std::numeric_limits<int>::max()) return bad(e, "must be >= {}, got {}", lo, v);
    return bad(e, "must be in [{}, {}], got {}", lo, hi, v);
  }
  return v;
}

result<std::uint64_t> spec_parser::get_uint(const entry& e, std::uint64_t lo) const {
  if (!e.value.IsScalar()) {
    return bad(e, "must be a non-negative integer, got {}", describe(e.value));
  }
  std::string_view s = e.value.Scalar();
  if (s.size() > 1 && s.front() == '+') s.remove_prefix(1);
  std::uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) {
    return bad(e, "is out of range, got {}", describe(e.value));
  }
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) {
    return bad(e, "must be a non-negative integer, got {}", describe(e.value));
  }
  if (v < lo) return bad(e, "must be >= {}, got {}", lo, v);
  return v;
}

result<double> spec_parser::get_number(const entry& e, double lo, bool lo_open, double hi,
                                       bool hi_open) const {
  if (!e.value.IsScalar()) return bad(e, "must be a number, got {}", describe(e.value));
  std::string_view s = e.value.Scalar();
  if (s.size() > 1 && s.front() == '+') s.remove_prefix(1);
  double v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty() || !std::isfinite(v)) {
    return bad(e, "must be a number, got {}", describe(e.value));
  }
  const bool below = lo_open ? !(v > lo) : !(v >= lo);
  const bool above = hi_open ? !(v < hi) : !(v <= hi);
  if (below || above) {
    if (hi == std::numeric_limits<double>::infinity()) {
      return bad(e, "must be {} {}, got {}", lo_open ? ">" : ">=", lo, s);
    }
    return bad(e, "must be in {}{}, {}{}, got {}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]",
               s);
  }
  return v;
}

result<float> spec_parser::get_float(const entry& e, double lo, bool lo_open, double hi,
                                     bool hi_open) const {
  auto v = get_number(e, lo, lo_open, hi, hi_open);
  if (!v) return std::unexpected(std::move(v.error()));
  const float f = float(*v);
  if (!std::isfinite(f)) return bad(e, "is too large for a float, got {}", describe(e.value));
  if (lo_open && !(f > float(lo))) {
    return bad(e, "is too small for a float, got {}", describe(e.value));
  }
  if (hi_open && !(f < float(hi))) {
    return bad(e, "must be in {}{}, {}), got {}", lo_open ? "(" : "[", lo, hi, describe(e.value));
  }
  return f;
}

}  // namespace coach::scheduler::detail
