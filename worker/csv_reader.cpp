#include "worker/csv_reader.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "worker/dataset_split.hpp"
#include "worker/gz_reader.hpp"
#include "worker/line_reader.hpp"

namespace coach::worker::detail {
namespace {

// --- cells ------------------------------------------------------------------------------------

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

bool parse_number(std::string_view token, double& value) noexcept {
  if (!token.empty() && token.front() == '+') token.remove_prefix(1);
  if (token.empty()) return false;
  const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  return ec == std::errc() && ptr == token.data() + token.size() && std::isfinite(value);
}

/// "tab", "space" or the character itself, for messages.
std::string delimiter_name(char d) {
  if (d == '\t') return "tab";
  if (d == ' ') return "space";
  return std::string("'") + d + "'";
}

enum class split_status { ok, unterminated_quote, text_after_quote };

/// Splits `line` into its cells at `delim`: blanks around a cell are dropped; a cell in double
/// quotes may hold the delimiter, and "" in it stands for one quote (unescaped in place, so the
/// cells point into `line`). On a quote error `cells` ends with the cell at fault.
split_status split_cells(std::span<char> line, char delim, std::vector<std::string_view>& cells) {
  cells.clear();
  char* s = line.data();
  const std::size_t n = line.size();
  const auto blank = [delim](char c) { return (c == ' ' || c == '\t' || c == '\r') && c != delim; };
  std::size_t i = 0;
  for (;;) {
    while (i < n && blank(s[i])) ++i;
    if (i < n && s[i] == '"') {
      std::size_t r = i + 1;
      std::size_t w = i + 1;
      bool closed = false;
      while (r < n) {
        if (s[r] == '"') {
          if (r + 1 < n && s[r + 1] == '"') {
            s[w++] = '"';
            r += 2;
            continue;
          }
          closed = true;
          ++r;
          break;
        }
        s[w++] = s[r++];
      }
      cells.emplace_back(s + i + 1, w - i - 1);
      if (!closed) return split_status::unterminated_quote;
      while (r < n && blank(s[r])) ++r;
      if (r < n && s[r] != delim) return split_status::text_after_quote;
      if (r >= n) return split_status::ok;
      i = r + 1;
    } else {
      std::size_t e = i;
      while (e < n && s[e] != delim) ++e;
      cells.push_back(trim(std::string_view(s + i, e - i)));
      if (e >= n) return split_status::ok;
      i = e + 1;
    }
  }
}

bool blank_line(std::span<const char> line) noexcept {
  return trim(std::string_view(line.data(), line.size())).empty();
}

// --- the first pass: layout -----------------------------------------------------------------

/// What the first pass over a csv file learns.
struct csv_layout {
  std::size_t columns = 0;
  std::size_t label = 0;           ///< the label's column, 0-based
  std::size_t rows = 0;            ///< data rows
  std::size_t first_line = 0;      ///< the line of the first row (the header, if any)
  std::vector<std::string> names;  ///< the header's cells; empty without a header
};

/// " ('name')" for column c when the file has a header, else "".
std::string column_name(const csv_layout& layout, std::size_t c) {
  if (c >= layout.names.size()) return {};
  return " ('" + printable(layout.names[c]) + "')";
}

result<void> check_split(const std::string& path, std::size_t line, std::size_t cells,
                         split_status status) {
  switch (status) {
    case split_status::ok:
      return {};
    case split_status::unterminated_quote:
      return fail(errc::parse_error, "{}: line {}, column {}: a quote is not closed on its line",
                  path, line, cells);
    case split_status::text_after_quote:
      return fail(errc::parse_error,
                  "{}: line {}, column {}: text after the closing quote (a quoted cell must end "
                  "at the delimiter)",
                  path, line, cells);
  }
  return {};
}

std::string ragged_message(const std::string& path, std::size_t line, std::size_t cells,
                           const csv_layout& layout) {
  return coach::format("{}: line {}: row has {} columns, expected {} (as on line {})", path, line,
                       cells, layout.columns, layout.first_line);
}

/// Resolves a label_column given by name against the header.
result<std::size_t> label_column_by_name(const dataset_config& cfg, const csv_layout& layout) {
  const column_ref& want = cfg.label_column;
  if (!cfg.header) {
    return fail(errc::invalid_argument,
                "{}: label_column '{}' is a column name, but header is false; set header: true",
                cfg.path, printable(want.name));
  }
  std::vector<std::size_t> found;
  for (std::size_t c = 0; c < layout.names.size(); ++c) {
    if (layout.names[c] == want.name) found.push_back(c);
  }
  if (found.size() == 1) return found[0];
  if (found.size() > 1) {
    return fail(errc::invalid_argument,
                "{}: label_column '{}' names {} columns of the header on line {} (0-based {} and "
                "{}); give its index instead",
                cfg.path, printable(want.name), found.size(), layout.first_line, found[0],
                found[1]);
  }
  std::string list;
  for (std::size_t c = 0; c < layout.names.size() && c < 12; ++c) {
    list += (c > 0 ? ", " : "") + printable(layout.names[c]);
  }
  if (layout.names.size() > 12) list += ", ...";
  return fail(errc::invalid_argument,
              "{}: label_column '{}' is not a column of the header on line {} (columns: {})",
              cfg.path, printable(want.name), layout.first_line, list);
}

/// Resolves cfg.label_column against the first row (the header, if any).
result<std::size_t> resolve_label_column(const dataset_config& cfg, const csv_layout& layout) {
  const column_ref& want = cfg.label_column;
  if (!want.name.empty()) return label_column_by_name(cfg, layout);
  const auto columns = std::int64_t(layout.columns);
  const std::int64_t index = want.index < 0 ? columns + want.index : want.index;
  if (index < 0 || index >= columns) {
    return fail(errc::invalid_argument,
                "{}: label_column {} is outside the {} columns of line {} (0 to {}, or -1 to -{} "
                "from the end)",
                cfg.path, want.index, columns, layout.first_line, columns - 1, columns);
  }
  return std::size_t(index);
}

/// Counts one non-blank row of the first pass into `layout`: the first row sets the columns
/// (and is the header when cfg.header), every later one must have as many cells.
result<void> scan_row(const dataset_config& cfg, std::size_t line_no,
                      const std::vector<std::string_view>& cells, csv_layout& layout) {
  if (layout.columns == 0) {
    if (cells.size() < 2) {
      return fail(errc::parse_error,
                  "{}: line {}: row has 1 column; a row needs features then the label (cells "
                  "separated by {})",
                  cfg.path, line_no, delimiter_name(cfg.delimiter));
    }
    layout.columns = cells.size();
    layout.first_line = line_no;
    if (cfg.header) {
      layout.names.assign(cells.begin(), cells.end());
      return {};
    }
  } else if (cells.size() != layout.columns) {
    return std::unexpected(
        error{errc::parse_error, ragged_message(cfg.path, line_no, cells.size(), layout)});
  }
  ++layout.rows;
  return {};
}

/// First pass: the columns (from the first row), the label's column and the number of data
/// rows; checks that every row has as many cells as the first.
result<csv_layout> scan_csv(const dataset_config& cfg) {
  auto in = gz_reader::open(cfg.path);
  if (!in) return std::unexpected(std::move(in.error()));
  line_reader lines(std::move(*in));
  csv_layout layout;
  std::vector<std::string_view> cells;
  std::span<char> line;
  for (;;) {
    auto more = lines.next(line);
    if (!more) return std::unexpected(std::move(more.error()));
    if (!*more) break;
    if (blank_line(line)) continue;
    const std::size_t line_no = lines.line_no();
    const split_status status = split_cells(line, cfg.delimiter, cells);
    if (auto ok = check_split(cfg.path, line_no, cells.size(), status); !ok) {
      return std::unexpected(std::move(ok.error()));
    }
    if (auto ok = scan_row(cfg, line_no, cells, layout); !ok) {
      return std::unexpected(std::move(ok.error()));
    }
  }
  if (layout.rows == 0) return fail(errc::parse_error, "{}: no data rows", cfg.path);
  auto label = resolve_label_column(cfg, layout);
  if (!label) return std::unexpected(std::move(label.error()));
  layout.label = *label;
  return layout;
}

// --- labels -----------------------------------------------------------------------------------

/// Turns the label cells of a csv file into classes (the rules are at the top of dataset.hpp).
/// While the file is read, each row stores a provisional id: an integer label as it is, any
/// other cell as string_base + the order of its first appearance; finish() maps them to classes.
class label_mapper {
 public:
  static constexpr std::int32_t string_base = max_label + 1;

  label_mapper(const dataset_config& cfg, const csv_layout& layout)
      : cfg_(cfg), layout_(layout), seen_(std::size_t(max_label) + 1, false) {}

  /// The provisional id of the label cell of data row `row` (0-based) on line `line`.
  result<std::int32_t> add(std::string_view cell, std::size_t line, std::size_t row) {
    if (cell.empty()) {
      return fail(errc::parse_error, "{}: line {}, column {}{}: the label is empty", cfg_.path,
                  line, layout_.label + 1, column_name(layout_, layout_.label));
    }
    double v = 0;
    if (parse_number(cell, v)) {
      if (v >= 0 && v <= double(max_label) && v == std::floor(v)) return add_integer(cell, v, line);
      if (bad_line_ == 0) {
        bad_line_ = line;
        bad_text_ = printable(cell);
      }
    } else {
      ++word_rows_;
      if (row == 0) first_row_word_ = true;
    }
    return add_name(cell, line);
  }

  /// Maps the provisional ids of both sets to classes, sets classes and class_names, and adds
  /// the warnings about an implausible label column.
  result<void> finish(dataset_pair& out) {
    const std::string where =
        coach::format("label_column {}{}", layout_.label, column_name(layout_, layout_.label));
    std::int64_t classes = 0;
    std::size_t distinct = 0;
    auto ok = word_rows_ == 0 ? finish_integers(out, classes, distinct)
                              : finish_names(out, where, classes, distinct);
    if (!ok) return ok;
    add_doubts(out, where, classes, distinct);
    return {};
  }

 private:
  /// The id of an integer label `v` (its own value), written as `cell`.
  std::int32_t add_integer(std::string_view cell, double v, std::size_t line) {
    const auto label = std::int32_t(v);
    if (!seen_[std::size_t(label)]) {
      seen_[std::size_t(label)] = true;
      ++distinct_ints_;
      max_int_ = std::max(max_int_, label);
    }
    if (float_line_ == 0 && cell.find_first_of(".eE") != std::string_view::npos) {
      float_line_ = line;
      float_text_ = printable(cell);
    }
    return label;
  }

  /// The provisional id of a label that is not an integer class: string_base + its order of
  /// first appearance.
  result<std::int32_t> add_name(std::string_view cell, std::size_t line) {
    key_.assign(cell);
    auto it = ids_.find(key_);
    if (it != ids_.end()) return it->second;
    if (strings_.size() >= std::size_t(max_label) + 1) {
      return fail(errc::invalid_argument,
                  "{}: line {}: the label column (label_column {}{}) holds more than {} distinct "
                  "values; is it the label? Set dataset.label_column",
                  cfg_.path, line, layout_.label, column_name(layout_, layout_.label),
                  max_label + 1);
    }
    const auto id = std::int32_t(string_base + std::int32_t(strings_.size()));
    ids_.emplace(key_, id);
    strings_.push_back(key_);
    return id;
  }

  /// finish() when every label is a number: they must be integer classes, used as they are.
  result<void> finish_integers(dataset_pair& out, std::int64_t& classes, std::size_t& distinct) {
    if (bad_line_ != 0) {
      return fail(errc::parse_error,
                  "{}: line {}, column {}: label {} must be an integer in [0, {}] (if column {} "
                  "is not the label, set dataset.label_column)",
                  cfg_.path, bad_line_, layout_.label + 1, bad_text_, max_label, layout_.label + 1);
    }
    if (max_int_ < 1) {
      return fail(errc::invalid_argument,
                  "{}: every label is 0; a classifier needs 2 classes or more", cfg_.path);
    }
    classes = max_int_ + 1;
    distinct = distinct_ints_;
    out.train.classes = out.test.classes = int(classes);
    return {};
  }

  /// The distinct label cells, integers named by their text, each with its provisional id.
  std::vector<std::pair<std::string, std::int32_t>> take_named() {
    std::vector<std::pair<std::string, std::int32_t>> named;
    named.reserve(distinct_ints_ + strings_.size());
    for (std::size_t v = 0; v < seen_.size(); ++v) {
      if (seen_[v]) named.emplace_back(std::to_string(v), std::int32_t(v));
    }
    for (std::size_t k = 0; k < strings_.size(); ++k) {
      named.emplace_back(std::move(strings_[k]), std::int32_t(string_base + std::int32_t(k)));
    }
    strings_.clear();
    ids_.clear();
    return named;
  }

  /// finish() when a label is not a number: the classes are the distinct cells in sorted order.
  result<void> finish_names(dataset_pair& out, const std::string& where, std::int64_t& classes,
                            std::size_t& distinct) {
    if (!cfg_.header && first_row_word_ && word_rows_ == 1 && layout_.rows > 1) {
      return fail(errc::parse_error,
                  "{}: line {}, column {}: label '{}' is the only label that is not a number; "
                  "if the first row holds column names, set header: true",
                  cfg_.path, layout_.first_line, layout_.label + 1, printable(first_word()));
    }
    // Classes are the distinct cells in sorted order; integers are named by their text.
    auto named = take_named();
    if (named.size() > std::size_t(max_label) + 1) {
      return fail(errc::invalid_argument,
                  "{}: the label column ({}) holds {} distinct values, more than {}; is it the "
                  "label? Set dataset.label_column",
                  cfg_.path, where, named.size(), max_label + 1);
    }
    if (named.size() < 2) {
      return fail(errc::invalid_argument,
                  "{}: every label is '{}'; a classifier needs 2 classes or more", cfg_.path,
                  printable(named.front().first));
    }
    std::sort(named.begin(), named.end());
    std::vector<std::int32_t> to_class(std::size_t(string_base) + named.size(), -1);
    std::vector<std::string> class_names;
    class_names.reserve(named.size());
    for (std::size_t c = 0; c < named.size(); ++c) {
      to_class[std::size_t(named[c].second)] = std::int32_t(c);
      class_names.push_back(std::move(named[c].first));
    }
    for (dataset* d : {&out.train, &out.test}) {
      for (auto& y : d->y) y = to_class[std::size_t(y)];
      d->classes = int(class_names.size());
    }
    classes = std::int64_t(class_names.size());
    distinct = class_names.size();
    out.test.class_names = class_names;
    out.train.class_names = std::move(class_names);
    return {};
  }

  /// The warnings about a label column that looks like a feature.
  void add_doubts(dataset_pair& out, const std::string& where, std::int64_t classes,
                  std::size_t distinct) const {
    if (auto doubt = implausible_classes_doubt(classes, distinct, layout_.rows); !doubt.empty()) {
      out.warnings.push_back(coach::format(
          "{}: the label column ({}) {}; if it is not the label, set dataset.label_column to the "
          "label's column (0-based, -1 = the last)",
          cfg_.path, where, doubt));
    }
    if (word_rows_ == 0 && float_line_ != 0) {
      out.warnings.push_back(coach::format(
          "{}: the label column ({}) holds numbers written as floats (e.g. '{}' on line {}); "
          "labels are class indices: if it is not the label, set dataset.label_column to the "
          "label's column (0-based, -1 = the last)",
          cfg_.path, where, float_text_, float_line_));
    }
  }

  /// The one cell that is not a number, when there is only one.
  std::string first_word() const {
    for (const auto& s : strings_) {
      double v = 0;
      if (!parse_number(s, v)) return s;
    }
    return {};
  }

  const dataset_config& cfg_;
  const csv_layout& layout_;
  std::vector<bool> seen_;  // integer labels seen
  std::size_t distinct_ints_ = 0;
  std::int32_t max_int_ = -1;
  std::unordered_map<std::string, std::int32_t> ids_;  // other cells -> provisional id
  std::vector<std::string> strings_;                   // other cells, by first appearance
  std::string key_;
  std::size_t word_rows_ = 0;  // rows whose label is not a number
  bool first_row_word_ = false;
  std::size_t bad_line_ = 0;  // first number that is not a label (1.5, -1, 70000)
  std::string bad_text_;
  std::size_t float_line_ = 0;  // first integer label written as a float (2.0, 1e1)
  std::string float_text_;
};

// --- the second pass: rows --------------------------------------------------------------------

/// Parses the cells of data row `row` (on line `line_no`) into `dst` (the features) and
/// `label` (when not null); `largest` keeps the largest feature value.
result<void> parse_row(const dataset_config& cfg, const csv_layout& layout,
                       const std::vector<std::string_view>& cells, std::size_t line_no,
                       std::size_t row, label_mapper& labels, float* dst, std::int32_t* label,
                       float& largest) {
  for (std::size_t c = 0, f = 0; c < layout.columns; ++c) {
    if (c == layout.label) {
      auto id = labels.add(cells[c], line_no, row);
      if (!id) return std::unexpected(std::move(id.error()));
      if (label != nullptr) *label = *id;
      continue;
    }
    double v = 0;
    if (!parse_number(cells[c], v)) {
      const bool maybe_header = !cfg.header && row == 0;
      return fail(errc::parse_error, "{}: line {}, column {}{}: '{}' is not a number{}", cfg.path,
                  line_no, c + 1, column_name(layout, c), printable(cells[c]),
                  maybe_header ? " (if the first row holds column names, set header: true)" : "");
    }
    dst[f] = float(v);
    largest = std::max(largest, dst[f]);
    ++f;
  }
  return {};
}

/// Second pass: parses every data row straight into its place in out.train or out.test.
/// Returns the largest feature value of the file.
result<float> parse_csv_rows(const dataset_config& cfg, const csv_layout& layout,
                             const split_plan& plan, label_mapper& labels, dataset_pair& out) {
  auto in = gz_reader::open(cfg.path);
  if (!in) return std::unexpected(std::move(in.error()));
  line_reader lines(std::move(*in));
  const std::size_t features = layout.columns - 1;
  std::vector<float> scratch(features);  // a row beyond the limits: checked, not kept
  std::vector<std::string_view> cells;
  float largest = -std::numeric_limits<float>::infinity();
  std::size_t row = 0;
  bool header_seen = !cfg.header;
  std::span<char> line;
  for (;;) {
    auto more = lines.next(line);
    if (!more) return std::unexpected(std::move(more.error()));
    if (!*more) break;
    if (blank_line(line)) continue;
    if (!header_seen) {
      header_seen = true;
      continue;
    }
    const std::size_t line_no = lines.line_no();
    const split_status status = split_cells(line, cfg.delimiter, cells);
    if (status != split_status::ok || cells.size() != layout.columns || row >= layout.rows) {
      return fail(errc::io_error, "{}: changed while it was read (line {} differs)", cfg.path,
                  line_no);
    }
    auto [set, at] = target_of(plan, row, out);
    float* dst = set != nullptr ? set->x.data() + at * features : scratch.data();
    std::int32_t* label = set != nullptr ? &set->y[at] : nullptr;
    if (auto ok = parse_row(cfg, layout, cells, line_no, row, labels, dst, label, largest); !ok) {
      return std::unexpected(std::move(ok.error()));
    }
    ++row;
  }
  if (row != layout.rows) {
    return fail(errc::io_error, "{}: changed while it was read ({} data rows, then {})", cfg.path,
                layout.rows, row);
  }
  return largest;
}

/// The error of a file whose split leaves a set empty (`split_error`), after any fault in the
/// file itself, which comes first: every row is read into nowhere.
error split_error_after_faults(const dataset_config& cfg, const csv_layout& layout,
                               error split_error) {
  split_plan nowhere;
  nowhere.n_train = layout.rows;
  nowhere.slot.assign(layout.rows, 0);
  dataset_pair none;
  label_mapper labels(cfg, layout);
  if (auto ok = parse_csv_rows(cfg, layout, nowhere, labels, none); !ok) return ok.error();
  if (auto ok = labels.finish(none); !ok) return ok.error();
  return split_error;
}

}  // namespace

result<dataset_pair> load_csv(const dataset_config& cfg, std::uint64_t seed) {
  if (auto ok = check_test_fraction(cfg); !ok) return std::unexpected(std::move(ok.error()));
  if (auto d = parse_delimiter(std::string_view(&cfg.delimiter, 1)); !d) {
    return fail(errc::invalid_argument, "{}: delimiter {}", cfg.path, d.error().message);
  }
  auto layout = scan_csv(cfg);
  if (!layout) return std::unexpected(std::move(layout.error()));
  auto plan = plan_split(cfg.path, layout->rows, cfg, seed);
  if (!plan) {
    return std::unexpected(split_error_after_faults(cfg, *layout, std::move(plan.error())));
  }
  const std::size_t features = layout->columns - 1;
  dataset_pair out;
  out.train = sized_set(plan->keep_train, features);
  out.test = sized_set(plan->keep_test, features);
  label_mapper labels(cfg, *layout);
  auto largest = parse_csv_rows(cfg, *layout, *plan, labels, out);
  if (!largest) return std::unexpected(std::move(largest.error()));
  plan->slot = {};
  if (auto ok = labels.finish(out); !ok) return std::unexpected(std::move(ok.error()));
  normalize_pair(out, cfg.normalize, *largest);
  return out;
}

}  // namespace coach::worker::detail
