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
  /// The model section alone (a map), as parse() reads it.
  result<worker::model_config> parse_model_section(const YAML::Node& model) {
    YAML::Node root(YAML::NodeType::Map);
    root["model"] = model;
    auto top = open_map(root, "", 1, {"model"});
    if (!top) return std::unexpected(std::move(top.error()));
    job_spec spec;
    if (auto r = parse_model(*top, spec); !r) return std::unexpected(std::move(r.error()));
    return spec.model;
  }
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
  result<void> parse_layers(const entry& e, std::vector<worker::layer_config>& out) const;
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
  auto f = open_map(*d, {"format", "path", "test_fraction", "train_limit", "test_limit",
                         "normalize", "header", "label_column", "delimiter"});
  if (!f) return std::unexpected(std::move(f.error()));
  worker::dataset_config& cfg = spec.dataset;
  if (const entry* e = f->find("format")) {
    auto v = get_enum<worker::dataset_format>(*e,
                                              {{"idx", worker::dataset_format::idx},
                                               {"csv", worker::dataset_format::csv},
                                               {"npy", worker::dataset_format::npy}},
                                              "idx, csv, npy");
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
    if (cfg.format == worker::dataset_format::idx) {
      return bad(*e, "applies only to format csv or npy (format idx has its own test files)");
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
  if (const entry* e = f->find("normalize")) {
    auto v = get_enum<worker::normalization>(*e,
                                             {{"none", worker::normalization::none},
                                              {"max", worker::normalization::max},
                                              {"standardize", worker::normalization::standardize}},
                                             "none, max, standardize");
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.normalize = *v;
  }
  // The options of the csv reader: refused with the other formats, which have no columns.
  for (std::string_view key : {"header", "label_column", "delimiter"}) {
    const entry* e = f->find(key);
    if (e != nullptr && cfg.format != worker::dataset_format::csv) {
      return bad(*e, "applies only to format csv, not {}", worker::to_string(cfg.format));
    }
  }
  if (const entry* e = f->find("header")) {
    auto v = get_enum<bool>(*e, {{"true", true}, {"false", false}}, "true, false");
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.header = *v;
  }
  if (const entry* e = f->find("delimiter")) {
    auto s = get_string(*e);
    if (!s) return std::unexpected(std::move(s.error()));
    auto v = worker::parse_delimiter(*s);
    if (!v) return bad(*e, "{}", v.error().message);
    cfg.delimiter = *v;
  }
  if (const entry* e = f->find("label_column")) {
    // An integer is an index; any other text, or a quoted one ('3'), is a header column name.
    if (!e->value.IsScalar()) {
      return bad(*e, "must be a column index or a column name, got {}", describe(e->value));
    }
    const std::string& text = e->value.Scalar();
    const bool quoted = e->value.Tag() == "!";
    std::string_view digits = text;
    if (digits.size() > 1 && (digits.front() == '+' || digits.front() == '-')) {
      digits.remove_prefix(1);
    }
    const bool integer =
        !quoted && !digits.empty() &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (integer) {
      auto v = get_int(*e, -std::int64_t(max_width), std::int64_t(max_width));
      if (!v) return std::unexpected(std::move(v.error()));
      cfg.label_column = {*v, {}};
    } else {
      if (text.empty()) return bad(*e, "must be a column index or a column name, got ''");
      if (!cfg.header) {
        return bad(*e, "names a column ({}), which needs header: true (or give its 0-based index)",
                   describe(e->value));
      }
      cfg.label_column = {-1, text};
    }
  }
  return {};
}

result<void> spec_parser::parse_model(const fields& top, job_spec& spec) const {
  const entry* m = top.find("model");
  if (m == nullptr) return missing(top, "model");
  auto f = open_map(*m, {"type", "hidden", "activation", "layers", "input_shape"});
  if (!f) return std::unexpected(std::move(f.error()));
  const entry* layers = f->find("layers");
  spec.model.type = layers != nullptr ? "layers" : "mlp";
  if (const entry* e = f->find("type")) {
    auto v = get_enum<int>(*e, {{"mlp", 0}, {"layers", 1}}, "mlp, layers");
    if (!v) return std::unexpected(std::move(v.error()));
    spec.model.type = *v == 0 ? "mlp" : "layers";
  }
  const bool mlp = spec.model.type == "mlp";
  if (mlp && layers != nullptr)
    return bad(*layers, "is for type layers; type mlp takes 'hidden' (and 'activation')");
  if (!mlp && layers == nullptr) return missing(*f, "layers");
  for (const char* only_mlp : {"hidden", "activation"}) {
    if (const entry* e = f->find(only_mlp); e != nullptr && !mlp)
      return bad(*e, "is for type mlp; with 'layers' each layer is listed");
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
  if (const entry* e = f->find("input_shape")) {
    if (!e->value.IsSequence() || e->value.size() != 3)
      return bad(*e, "must be a list [channels, height, width], got {}", describe(e->value));
    for (std::size_t i = 0; i < 3; ++i) {
      const entry item{e->key, e->value[i], coach::format("{}[{}]", e->path, i)};
      auto v = get_int(item, 1, max_width);
      if (!v) return std::unexpected(std::move(v.error()));
      spec.model.input_shape[i] = int(*v);
    }
  }
  if (layers != nullptr) {
    if (auto r = parse_layers(*layers, spec.model.layers); !r) return r;
  }
  return {};
}

result<void> spec_parser::parse_layers(const entry& e,
                                       std::vector<worker::layer_config>& out) const {
  using worker::layer_kind;
  if (!e.value.IsSequence() || e.value.size() == 0)
    return bad(e, "must be a non-empty list of layers, got {}", describe(e.value));
  constexpr std::string_view kinds =
      "dense, conv2d, max_pool2d, avg_pool2d, flatten, dropout, batch_norm, relu, tanh, sigmoid, "
      "gelu";
  const std::initializer_list<std::pair<std::string_view, layer_kind>> names = {
      {"dense", layer_kind::dense},
      {"conv2d", layer_kind::conv2d},
      {"max_pool2d", layer_kind::max_pool2d},
      {"avg_pool2d", layer_kind::avg_pool2d},
      {"flatten", layer_kind::flatten},
      {"dropout", layer_kind::dropout},
      {"batch_norm", layer_kind::batch_norm},
      {"relu", layer_kind::relu},
      {"tanh", layer_kind::tanh},
      {"sigmoid", layer_kind::sigmoid},
      {"gelu", layer_kind::gelu}};
  const std::size_t count = e.value.size();
  for (std::size_t i = 0; i < count; ++i) {
    const entry item{e.key, e.value[i], coach::format("{}[{}]", e.path, i)};
    worker::layer_config l;
    const bool last = i + 1 == count;
    if (item.value.IsScalar()) {  // `- relu`
      auto k = get_enum<layer_kind>(item, names, kinds);
      if (!k) return std::unexpected(std::move(k.error()));
      l.kind = *k;
      if (l.kind == layer_kind::conv2d)
        return bad(item,
                   "conv2d needs its channels and kernel: {{type: conv2d, channels: N, "
                   "kernel: K}}");
      if (l.kind == layer_kind::dense && !last)
        return bad(item,
                   "dense needs its units ({{type: dense, units: N}}); only the last layer "
                   "may leave them out");
      out.push_back(l);
      continue;
    }
    if (!item.value.IsMap())
      return bad(item, "must be a layer name or a map with a 'type', got {}", describe(item.value));
    const YAML::Node type = item.value["type"];
    if (!type) return bad(item, "needs a 'type' (one of {})", kinds);
    const entry type_entry{e.key, type, item.path + ".type"};
    auto k = get_enum<layer_kind>(type_entry, names, kinds);
    if (!k) return std::unexpected(std::move(k.error()));
    l.kind = *k;
    auto lf = [&]() -> result<fields> {
      switch (l.kind) {
        case layer_kind::dense:
          return open_map(item, {"type", "units"});
        case layer_kind::conv2d:
          return open_map(item, {"type", "channels", "kernel", "stride", "padding"});
        case layer_kind::max_pool2d:
        case layer_kind::avg_pool2d:
          return open_map(item, {"type", "kernel", "stride", "padding"});
        case layer_kind::dropout:
          return open_map(item, {"type", "p"});
        case layer_kind::batch_norm:
          return open_map(item, {"type", "momentum", "epsilon"});
        default:
          return open_map(item, {"type"});
      }
    }();
    if (!lf) return std::unexpected(std::move(lf.error()));
    const auto int_field = [&](std::string_view key, std::int64_t lo, std::int64_t hi,
                               int& into) -> result<bool> {
      const entry* fe = lf->find(key);
      if (fe == nullptr) return false;
      auto v = get_int(*fe, lo, hi);
      if (!v) return std::unexpected(std::move(v.error()));
      into = int(*v);
      return true;
    };
    constexpr std::int64_t max_window = 1024;
    result<bool> got = false;
    switch (l.kind) {
      case layer_kind::dense:
        got = int_field("units", 1, max_width, l.units);
        if (!got) return std::unexpected(std::move(got.error()));
        if (!*got && !last) return missing(*lf, "units");
        break;
      case layer_kind::conv2d:
        got = int_field("channels", 1, 65536, l.channels);
        if (!got) return std::unexpected(std::move(got.error()));
        if (!*got) return missing(*lf, "channels");
        got = int_field("kernel", 1, max_window, l.kernel);
        if (!got) return std::unexpected(std::move(got.error()));
        if (!*got) return missing(*lf, "kernel");
        [[fallthrough]];
      case layer_kind::max_pool2d:
      case layer_kind::avg_pool2d:
        if (l.kind != layer_kind::conv2d) {
          got = int_field("kernel", 1, max_window, l.kernel);
          if (!got) return std::unexpected(std::move(got.error()));
        }
        got = int_field("stride", 1, max_window, l.stride);
        if (!got) return std::unexpected(std::move(got.error()));
        got = int_field("padding", 0, max_window, l.padding);
        if (!got) return std::unexpected(std::move(got.error()));
        if (const entry* pe = lf->find("padding")) {
          const int window = l.kernel != 0 ? l.kernel : 2;
          if (l.padding >= window)
            return bad(*pe,
                       "must be smaller than the kernel ({}) so that every window touches "
                       "the input, got {}",
                       window, l.padding);
        }
        break;
      case layer_kind::dropout:
        if (const entry* fe = lf->find("p")) {
          auto v = get_float(*fe, 0.0, false, 1.0, true);
          if (!v) return std::unexpected(std::move(v.error()));
          l.p = *v;
        }
        break;
      case layer_kind::batch_norm:
        if (const entry* fe = lf->find("momentum")) {
          auto v = get_float(*fe, 0.0, true, 1.0, false);
          if (!v) return std::unexpected(std::move(v.error()));
          l.momentum = *v;
        }
        if (const entry* fe = lf->find("epsilon")) {
          auto v = get_float(*fe, 0.0, true, 1.0, false);
          if (!v) return std::unexpected(std::move(v.error()));
          l.epsilon = *v;
        }
        break;
      default:
        break;
    }
    out.push_back(l);
  }
  if (out.back().kind != layer_kind::dense) {
    const entry item{e.key, e.value[count - 1], coach::format("{}[{}]", e.path, count - 1)};
    return bad(item,
               "must be dense: the last layer gives the class scores (softmax "
               "cross-entropy follows it), got {}",
               worker::to_string(out.back().kind));
  }
  return {};
}

result<void> spec_parser::parse_optimizer(const fields& top, job_spec& spec) const {
  const entry* o = top.find("optimizer");
  if (o == nullptr) return missing(top, "optimizer");
  auto f = open_map(*o, {"type", "learning_rate", "momentum", "weight_decay", "beta1", "beta2",
                         "epsilon", "clip_norm", "schedule"});
  if (!f) return std::unexpected(std::move(f.error()));
  ps::optimizer_config& cfg = spec.optimizer;
  const entry* t = f->find("type");
  if (t == nullptr) return missing(*f, "type");
  // adamw is adam with the weight decay decoupled (kernels::adam_options::decoupled).
  using kind_and_decoupled = std::pair<ps::optimizer_kind, bool>;
  auto kind = get_enum<kind_and_decoupled>(*t,
                                           {{"sgd", {ps::optimizer_kind::sgd, false}},
                                            {"momentum", {ps::optimizer_kind::momentum, false}},
                                            {"adam", {ps::optimizer_kind::adam, false}},
                                            {"adamw", {ps::optimizer_kind::adam, true}}},
                                           "sgd, momentum, adam, adamw");
  if (!kind) return std::unexpected(std::move(kind.error()));
  cfg = ps::optimizer_config{};
  cfg.kind = kind->first;
  cfg.adam.decoupled = kind->second;
  const bool adam = cfg.kind == ps::optimizer_kind::adam;
  if (cfg.kind == ps::optimizer_kind::momentum) cfg.sgd.momentum = 0.9f;
  if (cfg.adam.decoupled) cfg.sgd.weight_decay = cfg.adam.weight_decay = 0.01f;  // PyTorch's

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
      return bad(*e, "applies only to type momentum, not {}", cfg.type_name());
    }
    auto v = get_float(*e, 0.0, false, 1.0, true);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.sgd.momentum = *v;
  }
  for (std::string_view key : {"beta1", "beta2", "epsilon"}) {
    const entry* e = f->find(key);
    if (e == nullptr) continue;
    if (!adam) return bad(*e, "applies only to type adam or adamw, not {}", cfg.type_name());
    auto v = key == "epsilon" ? get_float(*e, 0.0, true, inf, false)
                              : get_float(*e, 0.0, false, 1.0, true);
    if (!v) return std::unexpected(std::move(v.error()));
    if (key == "beta1") cfg.adam.beta1 = *v;
    if (key == "beta2") cfg.adam.beta2 = *v;
    if (key == "epsilon") cfg.adam.epsilon = *v;
  }
  if (const entry* e = f->find("clip_norm")) {
    auto v = get_float(*e, 0.0, true, inf, false);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.clip_norm = *v;
    const entry* c = top.find("consistency");
    if (c != nullptr && c->value.IsScalar() && c->value.Scalar().starts_with("averaging"))
      return bad(*e,
                 "is not supported with consistency {}: the workers push model deltas there, not "
                 "gradients",
                 printable(c->value.Scalar()));
  }
  const entry* s = f->find("schedule");
  if (s == nullptr) return {};
  auto sf = open_map(*s, {"type", "every_epochs", "gamma", "min_lr", "warmup_epochs"});
  if (!sf) return std::unexpected(std::move(sf.error()));
  ps::lr_schedule& sched = cfg.schedule;
  if (const entry* e = sf->find("type")) {
    auto v = get_enum<ps::schedule_kind>(*e,
                                         {{"constant", ps::schedule_kind::constant},
                                          {"step", ps::schedule_kind::step},
                                          {"cosine", ps::schedule_kind::cosine}},
                                         "constant, step, cosine");
    if (!v) return std::unexpected(std::move(v.error()));
    sched.kind = *v;
  }
  for (std::string_view key : {"every_epochs", "gamma", "min_lr"}) {
    const entry* e = sf->find(key);
    if (e == nullptr) continue;
    const auto owner = key == "min_lr" ? ps::schedule_kind::cosine : ps::schedule_kind::step;
    if (sched.kind != owner) {
      return bad(*e, "applies only to type {}, not {}", ps::to_string(owner),
                 ps::to_string(sched.kind));
    }
    auto v = key == "every_epochs" ? get_number(*e, 0.0, true, inf, false)
             : key == "gamma"      ? get_number(*e, 0.0, true, 1.0, false)
                                   : get_number(*e, 0.0, false, inf, false);
    if (!v) return std::unexpected(std::move(v.error()));
    if (key == "every_epochs") sched.every_epochs = *v;
    if (key == "gamma") sched.gamma = *v;
    if (key == "min_lr") {
      // Compared as the float the rate is: a min_lr equal to the rate is refused too.
      if (!(float(*v) < cfg.base_learning_rate())) {
        return bad(*e, "must be < the learning_rate ({}), got {}", cfg.base_learning_rate(),
                   describe(e->value));
      }
      sched.min_lr = *v;
    }
  }
  if (sched.kind == ps::schedule_kind::step && sf->find("every_epochs") == nullptr) {
    return bad(errc::invalid_argument, sf->line(), sf->path("every_epochs"),
               "is required with type step");
  }
  if (const entry* e = sf->find("warmup_epochs")) {
    auto v = get_number(*e, 0.0, false, inf, false);
    if (!v) return std::unexpected(std::move(v.error()));
    sched.warmup_epochs = *v;
  }
  // Under averaging:K the shards average models (scheduler::shard_optimizer) and the workers
  // train with the constant rate: a schedule would be silently ignored.
  const entry* c = top.find("consistency");
  const bool averaging =
      c != nullptr && c->value.IsScalar() && c->value.Scalar().starts_with("averaging");
  if (cfg.scheduled() && averaging) {
    return bad(*s,
               "is not supported with consistency {}: the workers train with the constant "
               "learning_rate there",
               printable(c->value.Scalar()));
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

ps::optimizer_config shard_optimizer(const job_spec& spec, std::uint64_t train_rows,
                                     std::vector<ps::statistic_range> statistics) {
  ps::optimizer_config opt = shard_optimizer(spec);
  opt.samples_per_epoch = train_rows;
  opt.epochs = spec.epochs;
  // Under averaging the statistics are averaged like every other key.
  if (spec.consistency.kind != consistency_kind::averaging) opt.statistics = std::move(statistics);
  return opt;
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

result<worker::model_config> parse_model_yaml(std::string_view yaml_text,
                                              std::string_view source_name) {
  const std::string source(source_name.empty() ? "<model>" : source_name);
  try {
    auto root = detail::load_single_document(std::string(yaml_text), source);
    if (!root) return std::unexpected(std::move(root.error()));
    return detail::spec_parser(source).parse_model_section(*root);
  } catch (const std::exception& e) {
    return fail(errc::parse_error, "{}: cannot parse the model: {}", source,
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
