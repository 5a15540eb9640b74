#include "scheduler/job_spec.hpp"

#include <yaml-cpp/anchor.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <new>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

namespace coach::scheduler {
namespace detail {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t max_width = 1 << 20;  // batch size and hidden widths
constexpr std::size_t max_name_length = 128;
constexpr std::uintmax_t max_spec_bytes = 1 << 20;  // a job spec is a small text file

/// A value quoted for an error message: printable, at most `limit` characters.
std::string printable(std::string_view text, std::size_t limit = 40) {
  std::string s;
  for (char c : text.substr(0, limit)) {
    s.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c);
  }
  if (text.size() > limit) s += "...";
  return s;
}

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

/// The first document of `text` (null when there is none). Fails on a stream of several
/// documents, and on a token that no document can start with: yaml-cpp 0.7's LoadAll loops
/// forever, allocating, on such input (e.g. a leading ','; fixed upstream in yaml-cpp PR #1319),
/// so documents are counted here with a bound and only the first is loaded.
/// Throws what yaml-cpp throws.
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

/// What a node holds, for "got ..." in messages.
std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + printable(n.Scalar()) + "'";
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

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string join(std::string_view prefix, std::string_view key) {
  if (prefix.empty()) return std::string(key);
  return std::string(prefix) + "." + std::string(key);
}

/// One `key: value` of a map, with the dotted path of the key.
struct entry {
  YAML::Node key;
  YAML::Node value;
  std::string path;
};

/// Parses one document into a job_spec. Every method returns the first error it meets.
class spec_parser {
 public:
  explicit spec_parser(std::string_view source) : source_(source.empty() ? "<job spec>" : source) {}

  result<job_spec> parse(const YAML::Node& root);
  void set_base_dir(std::string dir) { base_dir_ = std::move(dir); }

 private:
  /// The checked fields of one map: no unknown and no duplicate keys.
  class fields {
   public:
    const entry* find(std::string_view key) const {
      for (const entry& e : entries_) {
        if (e.key.Scalar() == key) return &e;
      }
      return nullptr;
    }
    std::string path(std::string_view key) const { return join(prefix_, key); }
    int line() const { return line_; }

   private:
    friend class spec_parser;
    std::vector<entry> entries_;
    std::string prefix_;
    int line_ = 1;
  };

  static int line_of(const YAML::Node& n, int fallback) {
    const int l = n.Mark().line;
    return l >= 0 ? l + 1 : fallback;
  }
  /// Where a value sits: its own line, or its key's line when it is empty.
  static int line_of(const entry& e) {
    const int key_line = line_of(e.key, 1);
    return e.value.IsNull() ? key_line : line_of(e.value, key_line);
  }

  template <class... Args>
  std::unexpected<error> bad(errc code, int line, std::string_view path, std::string_view fmt,
                             const Args&... args) const {
    return fail(code, "{}:{}: field '{}' {}", source_, line, path, coach::format(fmt, args...));
  }
  template <class... Args>
  std::unexpected<error> bad(const entry& e, std::string_view fmt, const Args&... args) const {
    return bad(errc::invalid_argument, line_of(e), e.path, fmt, args...);
  }

  result<fields> open_map(const YAML::Node& map, std::string_view prefix, int line,
                          std::initializer_list<std::string_view> allowed) const;
  result<fields> open_map(const entry& e, std::initializer_list<std::string_view> allowed) const {
    if (!e.value.IsMap()) return bad(e, "must be a map, got {}", describe(e.value));
    // A missing field is reported at the line of the key that opens the map.
    return open_map(e.value, e.path, line_of(e.key, 1), allowed);
  }
  std::unexpected<error> missing(const fields& f, std::string_view key) const {
    return bad(errc::invalid_argument, f.line(), f.path(key), "is required");
  }

  result<std::string> get_string(const entry& e) const;
  result<std::int64_t> get_int(const entry& e, std::int64_t lo, std::int64_t hi) const;
  result<std::uint64_t> get_uint(const entry& e, std::uint64_t lo) const;
  /// A finite number in [lo, hi] (or (lo, hi] / [lo, hi) when the end is open).
  result<double> get_number(const entry& e, double lo, bool lo_open, double hi, bool hi_open) const;
  result<float> get_float(const entry& e, double lo, bool lo_open, double hi, bool hi_open) const;
  template <class T>
  result<T> get_enum(const entry& e, std::initializer_list<std::pair<std::string_view, T>> values,
                     std::string_view allowed) const;

  result<void> parse_name(const fields& top, job_spec& spec) const;
  result<void> parse_dataset(const fields& top, job_spec& spec) const;
  result<void> parse_model(const fields& top, job_spec& spec) const;
  result<void> parse_optimizer(const fields& top, job_spec& spec) const;
  result<void> parse_consistency(const entry& e, job_spec& spec);
  result<count_range> parse_count_range(const entry& e) const;
  result<void> parse_function(const entry& e, job_spec& spec) const;
  result<void> parse_schedule(const entry& e, job_spec& spec) const;

  std::string source_;
  std::string base_dir_;  // relative dataset paths are resolved against it; empty: the cwd
  int consistency_line_ = 0;
};

result<spec_parser::fields> spec_parser::open_map(
    const YAML::Node& map, std::string_view prefix, int line,
    std::initializer_list<std::string_view> allowed) const {
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
      std::string_view best;
      std::size_t best_d = 3;
      for (std::string_view a : allowed) {
        const std::size_t d = edit_distance(e.key.Scalar(), a);
        if (d < best_d) {
          best_d = d;
          best = a;
        }
      }
      std::string hint;
      if (!best.empty()) hint = coach::format(" (did you mean '{}'?)", join(prefix, best));
      return fail(errc::invalid_argument, "{}:{}: unknown field '{}'{}", source_, key_line,
                  printable(e.path), hint);
    }
    if (const entry* first = f.find(e.key.Scalar())) {
      return bad(errc::invalid_argument, key_line, e.path, "appears twice (first on line {})",
                 line_of(first->key, line));
    }
    f.entries_.push_back(std::move(e));
  }
  return f;
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

template <class T>
result<T> spec_parser::get_enum(const entry& e,
                                std::initializer_list<std::pair<std::string_view, T>> values,
                                std::string_view allowed) const {
  if (!e.value.IsScalar()) {
    return bad(e, "must be one of {}, got {}", allowed, describe(e.value));
  }
  for (const auto& [name, v] : values) {
    if (e.value.Scalar() == name) return v;
  }
  return bad(e, "must be one of {}, got {}", allowed, describe(e.value));
}

result<void> spec_parser::parse_name(const fields& top, job_spec& spec) const {
  const entry* e = top.find("name");
  if (e == nullptr) return missing(top, "name");
  auto s = get_string(*e);
  if (!s) return std::unexpected(std::move(s.error()));
  const bool ok_chars = std::all_of(s->begin(), s->end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
  if (s->empty() || s->size() > max_name_length || !ok_chars) {
    return bad(*e, "must be 1 to {} letters, digits, '.', '_' or '-', got {}", max_name_length,
               describe(e->value));
  }
  spec.name = std::move(*s);
  return {};
}

result<void> spec_parser::parse_dataset(const fields& top, job_spec& spec) const {
  const entry* d = top.find("dataset");
  if (d == nullptr) return missing(top, "dataset");
  auto f = open_map(*d, {"format", "path", "test_fraction", "train_limit", "test_limit"});
  if (!f) return std::unexpected(std::move(f.error()));
  worker::dataset_config& cfg = spec.dataset;
  if (const entry* e = f->find("format")) {
    auto v = get_enum<worker::dataset_format>(
        *e, {{"idx", worker::dataset_format::idx}, {"csv", worker::dataset_format::csv}},
        "idx, csv");
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.format = *v;
  }
  const entry* p = f->find("path");
  if (p == nullptr) return missing(*f, "path");
  auto path = get_string(*p);
  if (!path) return std::unexpected(std::move(path.error()));
  if (path->empty()) return bad(*p, "must not be empty");
  // Relative paths mean: relative to base_dir_, or to the working directory of whoever parses
  // the spec when there is none.
  std::error_code ec;
  fs::path rel(*path);
  if (!base_dir_.empty() && rel.is_relative()) rel = fs::path(base_dir_) / rel;
  fs::path abs = fs::absolute(rel, ec);
  cfg.path = ec ? *path : abs.lexically_normal().string();
  if (const entry* e = f->find("test_fraction")) {
    if (cfg.format != worker::dataset_format::csv) {
      return bad(*e, "applies only to format csv (format idx has its own test files)");
    }
    auto v = get_number(*e, 0.0, true, 1.0, true);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.test_fraction = *v;
  }
  if (const entry* e = f->find("train_limit")) {
    auto v = get_uint(*e, 0);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.train_limit = std::size_t(*v);
  }
  if (const entry* e = f->find("test_limit")) {
    auto v = get_uint(*e, 0);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.test_limit = std::size_t(*v);
  }
  return {};
}

result<void> spec_parser::parse_model(const fields& top, job_spec& spec) const {
  const entry* m = top.find("model");
  if (m == nullptr) return missing(top, "model");
  auto f = open_map(*m, {"type", "hidden", "activation"});
  if (!f) return std::unexpected(std::move(f.error()));
  if (const entry* e = f->find("type")) {
    auto v = get_enum<int>(*e, {{"mlp", 0}}, "mlp");
    if (!v) return std::unexpected(std::move(v.error()));
    spec.model.type = "mlp";
  }
  if (const entry* e = f->find("hidden")) {
    if (!e->value.IsSequence()) {
      return bad(*e, "must be a list of layer widths, got {}", describe(e->value));
    }
    std::vector<int> widths;
    for (std::size_t i = 0; i < e->value.size(); ++i) {
      const entry item{e->key, e->value[i], coach::format("{}[{}]", e->path, i)};
      auto w = get_int(item, 1, max_width);
      if (!w) return std::unexpected(std::move(w.error()));
      widths.push_back(int(*w));
    }
    spec.model.hidden = std::move(widths);
  }
  if (const entry* e = f->find("activation")) {
    auto v = get_enum<worker::activation>(*e, {{"relu", worker::activation::relu}}, "relu");
    if (!v) return std::unexpected(std::move(v.error()));
    spec.model.act = *v;
  }
  return {};
}

result<void> spec_parser::parse_optimizer(const fields& top, job_spec& spec) const {
  const entry* o = top.find("optimizer");
  if (o == nullptr) return missing(top, "optimizer");
  auto f = open_map(
      *o, {"type", "learning_rate", "momentum", "weight_decay", "beta1", "beta2", "epsilon"});
  if (!f) return std::unexpected(std::move(f.error()));
  ps::optimizer_config& cfg = spec.optimizer;
  const entry* t = f->find("type");
  if (t == nullptr) return missing(*f, "type");
  auto kind = get_enum<ps::optimizer_kind>(*t,
                                           {{"sgd", ps::optimizer_kind::sgd},
                                            {"momentum", ps::optimizer_kind::momentum},
                                            {"adam", ps::optimizer_kind::adam}},
                                           "sgd, momentum, adam");
  if (!kind) return std::unexpected(std::move(kind.error()));
  cfg = ps::optimizer_config{};
  cfg.kind = *kind;
  const bool adam = cfg.kind == ps::optimizer_kind::adam;
  if (cfg.kind == ps::optimizer_kind::momentum) cfg.sgd.momentum = 0.9f;

  constexpr double inf = std::numeric_limits<double>::infinity();
  if (const entry* e = f->find("learning_rate")) {
    auto v = get_float(*e, 0.0, true, inf, false);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.sgd.learning_rate = *v;
    cfg.adam.learning_rate = *v;
  }
  if (const entry* e = f->find("weight_decay")) {
    auto v = get_float(*e, 0.0, false, inf, false);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.sgd.weight_decay = *v;
    cfg.adam.weight_decay = *v;
  }
  if (const entry* e = f->find("momentum")) {
    if (cfg.kind != ps::optimizer_kind::momentum) {
      return bad(*e, "applies only to type momentum, not {}", ps::to_string(cfg.kind));
    }
    auto v = get_float(*e, 0.0, false, 1.0, true);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.sgd.momentum = *v;
  }
  for (std::string_view key : {"beta1", "beta2", "epsilon"}) {
    const entry* e = f->find(key);
    if (e == nullptr) continue;
    if (!adam) return bad(*e, "applies only to type adam, not {}", ps::to_string(cfg.kind));
    auto v = key == "epsilon" ? get_float(*e, 0.0, true, inf, false)
                              : get_float(*e, 0.0, false, 1.0, true);
    if (!v) return std::unexpected(std::move(v.error()));
    if (key == "beta1") cfg.adam.beta1 = *v;
    if (key == "beta2") cfg.adam.beta2 = *v;
    if (key == "epsilon") cfg.adam.epsilon = *v;
  }
  return {};
}

result<void> spec_parser::parse_consistency(const entry& e, job_spec& spec) {
  constexpr std::string_view forms = "bsp, ssp:S, asp, averaging:K";
  if (!e.value.IsScalar()) return bad(e, "must be one of {}, got {}", forms, describe(e.value));
  const std::string& text = e.value.Scalar();
  consistency_config c;
  const auto parameter = [&](std::string_view prefix, std::string_view what,
                             int lo) -> result<int> {
    const std::string_view arg =
        text.size() > prefix.size() ? std::string_view(text).substr(prefix.size()) : "";
    int v = 0;
    const auto [ptr, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), v);
    if (ec != std::errc() || ptr != arg.data() + arg.size() || arg.empty() || v < lo) {
      return bad(e, "needs {} as an integer >= {} after '{}' (e.g. '{}{}'), got '{}'", what, lo,
                 prefix, prefix, lo + 2, printable(text));
    }
    return v;
  };
  if (text == "bsp") {
    c.kind = consistency_kind::bsp;
  } else if (text == "asp") {
    c.kind = consistency_kind::asp;
  } else if (text == "ssp" || text.starts_with("ssp:")) {
    auto s = parameter("ssp:", "the staleness", 0);
    if (!s) return std::unexpected(std::move(s.error()));
    c.kind = consistency_kind::ssp;
    c.staleness = *s;
  } else if (text == "averaging" || text.starts_with("averaging:")) {
    auto k = parameter("averaging:", "the local steps", 1);
    if (!k) return std::unexpected(std::move(k.error()));
    c.kind = consistency_kind::averaging;
    c.local_steps = *k;
  } else {
    return bad(e, "must be one of {}, got {}", forms, describe(e.value));
  }
  consistency_line_ = line_of(e);
  spec.consistency = c;
  return {};
}

result<count_range> spec_parser::parse_count_range(const entry& e) const {
  constexpr std::int64_t int_max = std::numeric_limits<int>::max();
  count_range r;
  if (e.value.IsScalar()) {
    auto n = get_int(e, 1, int_max);
    if (!n) return std::unexpected(std::move(n.error()));
    r.min = r.max = r.initial = int(*n);
    return r;
  }
  if (!e.value.IsMap()) {
    return bad(e, "must be an integer or a map {{min, max, initial}}, got {}", describe(e.value));
  }
  auto f = open_map(e, {"min", "max", "initial"});
  if (!f) return std::unexpected(std::move(f.error()));
  std::optional<int> min, max, initial;
  for (std::string_view key : {"min", "max", "initial"}) {
    const entry* k = f->find(key);
    if (k == nullptr) continue;
    auto v = get_int(*k, 1, int_max);
    if (!v) return std::unexpected(std::move(v.error()));
    (key == "min" ? min : key == "max" ? max : initial) = int(*v);
  }
  r.min = min.value_or(1);
  r.initial = initial.value_or(r.min);
  r.max = max.value_or(std::max(r.min, r.initial));
  if (!(r.min <= r.initial && r.initial <= r.max)) {
    return bad(e, "needs min <= initial <= max, got min {}, initial {}, max {}", r.min, r.initial,
               r.max);
  }
  return r;
}

result<void> spec_parser::parse_function(const entry& e, job_spec& spec) const {
  auto f = open_map(e, {"deadline_s", "memory_mb", "chunks_per_invocation"});
  if (!f) return std::unexpected(std::move(f.error()));
  function_limits limits;
  if (const entry* d = f->find("deadline_s")) {
    auto v = get_number(*d, 0.0, false, std::numeric_limits<double>::infinity(), false);
    if (!v) return std::unexpected(std::move(v.error()));
    limits.deadline_s = *v;
  }
  if (const entry* m = f->find("memory_mb")) {
    auto v = get_uint(*m, 0);
    if (!v) return std::unexpected(std::move(v.error()));
    limits.memory_mb = *v;
  }
  if (const entry* c = f->find("chunks_per_invocation")) {
    auto v = get_int(*c, 1, 1'000'000);
    if (!v) return std::unexpected(std::move(v.error()));
    limits.chunks_per_invocation = std::uint32_t(*v);
  }
  spec.function = limits;
  return {};
}

result<void> spec_parser::parse_schedule(const entry& e, job_spec& spec) const {
  if (!e.value.IsSequence())
    return bad(e, "must be a list of changes such as {{at_step: 20, workers: 3}}, got {}",
               describe(e.value));
  for (std::size_t i = 0; i < e.value.size(); ++i) {
    // The item stands as its own key, so a missing field names the item's line.
    const entry item{e.value[i], e.value[i], coach::format("{}[{}]", e.path, i)};
    auto f = open_map(item, {"at_step", "workers", "shards", "migrate"});
    if (!f) return std::unexpected(std::move(f.error()));
    schedule_action a;
    const entry* at = f->find("at_step");
    if (at == nullptr) return missing(*f, "at_step");
    auto step = get_int(*at, 1, std::int64_t(1e12));
    if (!step) return std::unexpected(std::move(step.error()));
    a.at_step = *step;
    if (!spec.schedule.empty() && a.at_step <= spec.schedule.back().at_step)
      return bad(*at, "must be greater than the previous change's ({}), got {}",
                 spec.schedule.back().at_step, a.at_step);
    int given = 0;
    for (std::string_view key : {"workers", "shards", "migrate"}) {
      const entry* k = f->find(key);
      if (k == nullptr) continue;
      if (++given > 1)
        return bad(*k, "is a second change in one entry; give one of workers, shards, migrate");
      const auto& range = key == "workers" ? spec.workers : spec.shards;
      if (key == "migrate") {
        auto v = get_int(*k, 0, std::numeric_limits<std::uint32_t>::max());
        if (!v) return std::unexpected(std::move(v.error()));
        a.kind = schedule_action::kind_type::migrate;
        a.value = std::uint32_t(*v);
      } else {
        auto v = get_int(*k, range.min, range.max);
        if (!v) return std::unexpected(std::move(v.error()));
        a.kind = key == "workers" ? schedule_action::kind_type::workers
                                  : schedule_action::kind_type::shards;
        a.value = std::uint32_t(*v);
      }
    }
    if (given == 0)
      return bad(errc::invalid_argument, f->line(), item.path,
                 "needs one change: workers, shards or migrate");
    spec.schedule.push_back(a);
  }
  return {};
}

result<job_spec> spec_parser::parse(const YAML::Node& root) {
  if (root.IsNull()) {
    return fail(errc::invalid_argument, "{}:{}: the document is empty; expected a map of fields",
                source_, line_of(root, 1));
  }
  if (!root.IsMap()) {
    return fail(errc::invalid_argument, "{}:{}: the top level must be a map of fields, got {}",
                source_, line_of(root, 1), describe(root));
  }
  auto top = open_map(root, "", line_of(root, 1),
                      {"name", "dataset", "model", "optimizer", "batch_size", "epochs",
                       "consistency", "seed", "workers", "shards", "gpus_per_worker", "backend",
                       "slice_size", "host_reduce", "placement", "function", "schedule"});
  if (!top) return std::unexpected(std::move(top.error()));

  job_spec spec;
  if (auto r = parse_name(*top, spec); !r) return std::unexpected(std::move(r.error()));
  if (auto r = parse_dataset(*top, spec); !r) return std::unexpected(std::move(r.error()));
  if (auto r = parse_model(*top, spec); !r) return std::unexpected(std::move(r.error()));
  if (auto r = parse_optimizer(*top, spec); !r) return std::unexpected(std::move(r.error()));

  constexpr std::int64_t int_max = std::numeric_limits<int>::max();
  const entry* e = top->find("batch_size");
  if (e == nullptr) return missing(*top, "batch_size");
  auto batch = get_int(*e, 1, max_width);
  if (!batch) return std::unexpected(std::move(batch.error()));
  spec.batch_size = int(*batch);

  e = top->find("epochs");
  if (e == nullptr) return missing(*top, "epochs");
  auto epochs = get_int(*e, 1, int_max);
  if (!epochs) return std::unexpected(std::move(epochs.error()));
  spec.epochs = int(*epochs);

  if ((e = top->find("consistency"))) {
    if (auto r = parse_consistency(*e, spec); !r) return std::unexpected(std::move(r.error()));
  }
  if ((e = top->find("seed"))) {
    auto v = get_uint(*e, 0);
    if (!v) return std::unexpected(std::move(v.error()));
    spec.seed = *v;
  }
  if ((e = top->find("workers"))) {
    auto v = parse_count_range(*e);
    if (!v) return std::unexpected(std::move(v.error()));
    spec.workers = *v;
  }
  if ((e = top->find("shards"))) {
    auto v = parse_count_range(*e);
    if (!v) return std::unexpected(std::move(v.error()));
    spec.shards = *v;
  }
  if ((e = top->find("gpus_per_worker"))) {
    auto v = get_int(*e, 0, int_max);
    if (!v) return std::unexpected(std::move(v.error()));
    spec.gpus_per_worker = int(*v);
  }
  if ((e = top->find("backend"))) {
    auto s = get_string(*e);
    if (!s) return std::unexpected(std::move(s.error()));
    auto kind = kernels::parse_backend_kind(*s);
    if (!kind) return bad(*e, "must be one of auto, cpu, cuda, got {}", describe(e->value));
    spec.backend = *kind;
  }
  if ((e = top->find("slice_size"))) {
    auto v = get_uint(*e, 1);
    if (!v) return std::unexpected(std::move(v.error()));
    if (*v > std::numeric_limits<std::uint32_t>::max()) {
      return bad(*e, "must be in [1, {}], got {}", std::numeric_limits<std::uint32_t>::max(), *v);
    }
    spec.slice_size = std::size_t(*v);
  }
  if ((e = top->find("host_reduce"))) {
    auto v = get_enum<bool>(*e, {{"true", true}, {"false", false}}, "true, false");
    if (!v) return std::unexpected(std::move(v.error()));
    spec.host_reduce = *v;
  }
  if ((e = top->find("placement"))) {
    auto v = get_enum<std::string>(
        *e,
        {{"spread", "spread"}, {"best-fit", "best-fit"}, {"random", "random"}, {"dltap", "dltap"}},
        "spread, best-fit, random, dltap");
    if (!v) return std::unexpected(std::move(v.error()));
    spec.placement = *v;
  }
  if ((e = top->find("function"))) {
    if (auto r = parse_function(*e, spec); !r) return std::unexpected(std::move(r.error()));
  }
  // After workers and shards: a change is checked against their ranges.
  if ((e = top->find("schedule"))) {
    if (auto r = parse_schedule(*e, spec); !r) return std::unexpected(std::move(r.error()));
  }
  // Model averaging runs the optimizer on the workers, where it has no state across rounds.
  if (spec.consistency.kind == consistency_kind::averaging &&
      spec.optimizer.kind == ps::optimizer_kind::adam) {
    return std::unexpected(
        error{errc::invalid_argument,
              coach::format("{}:{}: field 'consistency': averaging trains each worker with sgd or "
                            "momentum from the pulled parameters; optimizer adam is not supported "
                            "with it",
                            source_, consistency_line_)});
  }
  return spec;
}

}  // namespace
}  // namespace detail

ps::optimizer_config shard_optimizer(const job_spec& spec) {
  if (spec.consistency.kind != consistency_kind::averaging) return spec.optimizer;
  ps::optimizer_config avg;
  avg.kind = ps::optimizer_kind::sgd;
  avg.sgd = kernels::sgd_options{1.0f, 0.0f, 0.0f};
  return avg;
}

std::string to_string(const consistency_config& c) {
  switch (c.kind) {
    case consistency_kind::bsp:
      return "bsp";
    case consistency_kind::ssp:
      return coach::format("ssp:{}", c.staleness);
    case consistency_kind::asp:
      return "asp";
    case consistency_kind::averaging:
      return coach::format("averaging:{}", c.local_steps);
  }
  return "unknown";
}

result<job_spec> parse_job_spec(std::string_view yaml_text, std::string_view source_name) {
  return parse_job_spec(yaml_text, source_name, {});
}

result<job_spec> parse_job_spec(std::string_view yaml_text, std::string_view source_name,
                                std::string_view base_dir) {
  const std::string source(source_name.empty() ? "<job spec>" : source_name);
  try {
    auto root = detail::load_single_document(std::string(yaml_text), source);
    if (!root) return std::unexpected(std::move(root.error()));
    detail::spec_parser p(source);
    p.set_base_dir(std::string(base_dir));
    return p.parse(*root);
  } catch (const YAML::Exception& e) {
    // ParserException and the rest: yaml-cpp's message may quote the offending character.
    return fail(errc::parse_error, "{}:{}: malformed YAML: {}", source,
                e.mark.line >= 0 ? e.mark.line + 1 : 1, detail::printable(e.msg, 200));
  } catch (const std::bad_alloc&) {
    return fail(errc::resource_exhausted, "{}: out of memory while parsing", source);
  } catch (const std::exception& e) {
    return fail(errc::parse_error, "{}: cannot parse: {}", source,
                detail::printable(e.what(), 200));
  }
}

result<job_spec> load_job_spec(const std::string& path) {
  try {
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    if (st.type() == std::filesystem::file_type::not_found) {
      return fail(errc::not_found, "{}: job spec file not found", path);
    }
    if (st.type() == std::filesystem::file_type::directory) {
      return fail(errc::io_error, "{}: is a directory, expected a job spec file", path);
    }
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec && size > detail::max_spec_bytes) {
      return fail(errc::invalid_argument, "{}: is {} bytes; a job spec may have at most {}", path,
                  size, detail::max_spec_bytes);
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) return fail(errc::io_error, "{}: cannot open the job spec file", path);
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) return fail(errc::io_error, "{}: cannot read the job spec file", path);
    return parse_job_spec(text.str(), path);
  } catch (const std::bad_alloc&) {
    return fail(errc::resource_exhausted, "{}: out of memory while reading", path);
  } catch (const std::exception& e) {
    return fail(errc::io_error, "{}: cannot read the job spec file: {}", path, e.what());
  }
}

}  // namespace coach::scheduler
