// spec/job_spec_data.cpp: the `dataset:` section of a job spec (job_spec_sections.hpp).
#include <algorithm>
#include <filesystem>
#include <limits>
#include <string_view>
#include <system_error>
#include <utility>

#include "spec/job_spec_sections.hpp"

namespace coach::scheduler::detail {

std::string resolve_path(const std::string& base_dir, const std::string& path) {
  // Relative paths mean: relative to base_dir, or to the working directory of whoever parses
  // the spec when there is none.
  std::error_code ec;
  std::filesystem::path rel(path);
  if (!base_dir.empty() && rel.is_relative()) rel = std::filesystem::path(base_dir) / rel;
  const auto abs = std::filesystem::absolute(rel, ec);
  return ec ? path : abs.lexically_normal().string();
}

namespace {

namespace fs = std::filesystem;

/// `path`, required and not empty, made absolute against `base_dir`.
result<void> parse_dataset_path(const spec_parser& p, const fields& f, const std::string& base_dir,
                                worker::dataset_config& cfg) {
  const entry* e = f.find("path");
  if (e == nullptr) return p.missing(f, "path");
  auto path = p.get_string(*e);
  if (!path) return std::unexpected(std::move(path.error()));
  if (path->empty()) return p.bad(*e, "must not be empty");
  cfg.path = resolve_path(base_dir, *path);
  return {};
}

/// test_fraction, train_limit, test_limit and normalize.
result<void> parse_dataset_numbers(const spec_parser& p, const fields& f,
                                   worker::dataset_config& cfg) {
  if (const entry* e = f.find("test_fraction")) {
    if (cfg.format == worker::dataset_format::idx) {
      return p.bad(*e,
                   "applies only to format csv, npy or ctr (format idx has its own test files)");
    }
    auto v = p.get_number(*e, 0.0, true, 1.0, true);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.test_fraction = *v;
  }
  if (const entry* e = f.find("train_limit")) {
    auto v = p.get_uint(*e, 0);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.train_limit = std::size_t(*v);
  }
  if (const entry* e = f.find("test_limit")) {
    auto v = p.get_uint(*e, 0);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.test_limit = std::size_t(*v);
  }
  if (const entry* e = f.find("normalize")) {
    auto v =
        p.get_enum<worker::normalization>(*e,
                                          {{"none", worker::normalization::none},
                                           {"max", worker::normalization::max},
                                           {"standardize", worker::normalization::standardize}},
                                          "none, max, standardize");
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.normalize = *v;
  } else if (cfg.format == worker::dataset_format::ctr) {
    cfg.normalize = worker::normalization::none;  // load_ctr's features are log(1 + x) already
  }
  return {};
}

/// The largest n_dense and n_fields of a ctr data set.
constexpr std::int64_t max_ctr_columns = 4096;

/// The options of the ctr reader: n_dense, n_fields; refused with the other formats.
result<void> parse_ctr_options(const spec_parser& p, const fields& f, worker::dataset_config& cfg) {
  for (std::string_view key : {"n_dense", "n_fields", "min_count"}) {
    const entry* e = f.find(key);
    if (e != nullptr && cfg.format != worker::dataset_format::ctr)
      return p.bad(*e, "applies only to format ctr, not {}", worker::to_string(cfg.format));
  }
  if (const entry* e = f.find("n_dense")) {
    auto v = p.get_int(*e, 0, max_ctr_columns);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.n_dense = std::size_t(*v);
  }
  if (const entry* e = f.find("n_fields")) {
    auto v = p.get_int(*e, 0, max_ctr_columns);
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.n_fields = std::size_t(*v);
  }
  if (const entry* e = f.find("min_count")) {
    auto v = p.get_int(*e, 0, std::numeric_limits<std::int32_t>::max());
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.min_count = std::size_t(*v);
  }
  if (cfg.n_dense + cfg.n_fields == 0 && cfg.format == worker::dataset_format::ctr)
    return p.bad(*f.find("n_dense"), "and n_fields are both 0: a row needs a column");
  return {};
}

/// label_column: an integer is an index; any other text, or a quoted one ('3'), is a header
/// column name.
result<void> parse_label_column(const spec_parser& p, const entry& e, worker::dataset_config& cfg) {
  if (!e.value.IsScalar()) {
    return p.bad(e, "must be a column index or a column name, got {}", describe(e.value));
  }
  const std::string& text = e.value.Scalar();
  const bool quoted = e.value.Tag() == "!";
  std::string_view digits = text;
  if (digits.size() > 1 && (digits.front() == '+' || digits.front() == '-')) {
    digits.remove_prefix(1);
  }
  const bool integer =
      !quoted && !digits.empty() &&
      std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (integer) {
    auto v = p.get_int(e, -std::int64_t(max_width), std::int64_t(max_width));
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.label_column = {*v, {}};
    return {};
  }
  if (text.empty()) return p.bad(e, "must be a column index or a column name, got ''");
  if (!cfg.header) {
    return p.bad(e, "names a column ({}), which needs header: true (or give its 0-based index)",
                 describe(e.value));
  }
  cfg.label_column = {-1, text};
  return {};
}

/// The options of the csv reader: header, delimiter, label_column; refused with the other
/// formats, which have no columns.
result<void> parse_csv_options(const spec_parser& p, const fields& f, worker::dataset_config& cfg) {
  for (std::string_view key : {"header", "label_column", "delimiter"}) {
    const entry* e = f.find(key);
    if (e != nullptr && cfg.format != worker::dataset_format::csv) {
      return p.bad(*e, "applies only to format csv, not {}", worker::to_string(cfg.format));
    }
  }
  if (const entry* e = f.find("header")) {
    auto v = p.get_enum<bool>(*e, {{"true", true}, {"false", false}}, "true, false");
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.header = *v;
  }
  if (const entry* e = f.find("delimiter")) {
    auto s = p.get_string(*e);
    if (!s) return std::unexpected(std::move(s.error()));
    auto v = worker::parse_delimiter(*s);
    if (!v) return p.bad(*e, "{}", v.error().message);
    cfg.delimiter = *v;
  }
  if (const entry* e = f.find("label_column")) return parse_label_column(p, *e, cfg);
  return {};
}

}  // namespace

result<void> parse_dataset(const spec_parser& p, const fields& top, const std::string& base_dir,
                           job_spec& spec) {
  const entry* d = top.find("dataset");
  if (d == nullptr) return p.missing(top, "dataset");
  auto f =
      p.open_map(*d, {"format", "path", "test_fraction", "train_limit", "test_limit", "normalize",
                      "header", "label_column", "delimiter", "n_dense", "n_fields", "min_count"});
  if (!f) return std::unexpected(std::move(f.error()));
  worker::dataset_config& cfg = spec.dataset;
  if (const entry* e = f->find("format")) {
    auto v = p.get_enum<worker::dataset_format>(*e,
                                                {{"idx", worker::dataset_format::idx},
                                                 {"csv", worker::dataset_format::csv},
                                                 {"npy", worker::dataset_format::npy},
                                                 {"ctr", worker::dataset_format::ctr}},
                                                "idx, csv, npy, ctr");
    if (!v) return std::unexpected(std::move(v.error()));
    cfg.format = *v;
  }
  if (auto r = parse_dataset_path(p, *f, base_dir, cfg); !r) return r;
  if (auto r = parse_dataset_numbers(p, *f, cfg); !r) return r;
  if (auto r = parse_ctr_options(p, *f, cfg); !r) return r;
  return parse_csv_options(p, *f, cfg);
}

}  // namespace coach::scheduler::detail
