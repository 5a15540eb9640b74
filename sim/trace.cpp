#include "sim/trace.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>

#include "common/format.hpp"

namespace coach::scheduler {
namespace {

namespace fs = std::filesystem;

constexpr std::uintmax_t max_file_bytes = 256u << 20;  // a million-job trace is ~40 MB

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

/// A value quoted in a message: printable, at most 40 characters.
std::string printable(std::string_view text) {
  std::string s;
  for (char c : text.substr(0, 40)) s.push_back(static_cast<unsigned char>(c) < 0x20 ? '?' : c);
  if (text.size() > 40) s += "...";
  return s;
}

struct csv_row {
  std::size_t line = 0;
  std::vector<std::string_view> cells;
};

struct csv_table {
  csv_row header;
  std::vector<csv_row> rows;
};

/// Splits CSV text into a header and rows (see trace.hpp for what is accepted).
result<csv_table> read_csv(std::string_view text, std::string_view source) {
  csv_table out;
  bool have_header = false;
  std::size_t line = 0;
  while (!text.empty()) {
    ++line;
    const std::size_t nl = text.find('\n');
    std::string_view raw = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    const std::string_view body = trim(raw);
    if (body.empty() || body.front() == '#') continue;
    if (body.find('"') != std::string_view::npos)
      return fail(errc::parse_error, "{}:{}: quoted cells are not supported", source, line);
    csv_row row{line, {}};
    std::string_view rest = body;
    while (true) {
      const std::size_t comma = rest.find(',');
      row.cells.push_back(trim(rest.substr(0, comma)));
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
    if (!have_header) {
      out.header = std::move(row);
      have_header = true;
    } else {
      if (row.cells.size() != out.header.cells.size())
        return fail(errc::parse_error, "{}:{}: {} cells, but the header (line {}) has {}", source,
                    line, row.cells.size(), out.header.line, out.header.cells.size());
      out.rows.push_back(std::move(row));
    }
  }
  if (!have_header) return fail(errc::parse_error, "{}: empty: no header line", source);
  return out;
}

/// Maps each known column name to its index in the header; rejects unknown and repeated ones
/// and checks that the required ones are there.
result<std::vector<int>> map_columns(const csv_row& header, std::span<const std::string_view> known,
                                     std::span<const std::string_view> required,
                                     std::string_view source) {
  std::vector<int> index(known.size(), -1);
  for (std::size_t c = 0; c < header.cells.size(); ++c) {
    const auto name = header.cells[c];
    const auto it = std::find(known.begin(), known.end(), name);
    if (it == known.end()) {
      std::string list;
      for (auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return fail(errc::invalid_argument, "{}:{}: unknown column '{}' (known: {})", source,
                  header.line, printable(name), list);
    }
    auto& slot = index[std::size_t(it - known.begin())];
    if (slot >= 0)
      return fail(errc::invalid_argument, "{}:{}: column '{}' appears twice", source, header.line,
                  name);
    slot = int(c);
  }
  for (auto r : required) {
    const auto it = std::find(known.begin(), known.end(), r);
    if (index[std::size_t(it - known.begin())] < 0)
      return fail(errc::invalid_argument, "{}:{}: missing column '{}'", source, header.line, r);
  }
  return index;
}

result<double> parse_number(std::string_view cell, std::string_view column, std::string_view source,
                            std::size_t line) {
  double v = 0;
  const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
  if (cell.empty() || ec != std::errc{} || end != cell.data() + cell.size() || !std::isfinite(v))
    return fail(errc::parse_error, "{}:{}: column '{}': '{}' is not a number", source, line, column,
                printable(cell));
  return v;
}

result<int> parse_int(std::string_view cell, std::string_view column, std::string_view source,
                      std::size_t line) {
  int v = 0;
  const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
  if (cell.empty() || ec != std::errc{} || end != cell.data() + cell.size())
    return fail(errc::parse_error, "{}:{}: column '{}': '{}' is not an integer", source, line,
                column, printable(cell));
  return v;
}

bool valid_name(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

result<std::string> read_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return fail(errc::not_found, "{}: no such file", path);
  if (!fs::is_regular_file(path, ec))
    return fail(errc::invalid_argument, "{}: not a regular file", path);
  const auto size = fs::file_size(path, ec);
  if (ec) return fail(errc::io_error, "{}: cannot read: {}", path, ec.message());
  if (size > max_file_bytes)
    return fail(errc::invalid_argument, "{}: {} bytes, more than the {} accepted", path, size,
                max_file_bytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(errc::io_error, "{}: cannot open", path);
  std::string text(std::size_t(size), '\0');
  in.read(text.data(), std::streamsize(size));
  if (in.gcount() != std::streamsize(size)) return fail(errc::io_error, "{}: short read", path);
  return text;
}

// Columns of a trace, in the order of trace_job.
enum trace_column { c_submit, c_duration, c_gpus, c_model, c_min, c_max, c_shards, c_elastic };
constexpr std::array<std::string_view, 8> trace_columns{"submit_time", "duration", "num_gpus",
                                                        "model",       "min_gpus", "max_gpus",
                                                        "num_shards",  "elastic"};
constexpr std::array<std::string_view, 3> trace_required{"submit_time", "duration", "num_gpus"};

constexpr std::array<std::string_view, 6> model_columns{"model",  "theta0", "theta1",
                                                        "theta2", "theta3", "theta4"};
// The columns a models file may have: the required ones, then the network model's.
constexpr std::array<std::string_view, 8> model_known{"model",  "theta0", "theta1",   "theta2",
                                                      "theta3", "theta4", "param_mb", "steps"};

// --- the generator's random source: splitmix64 and distributions written out, so that a seed
// gives the same trace with any standard library.
class rng {
 public:
  explicit rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in (0, 1).
  double uniform() { return (double(next() >> 11) + 0.5) * 0x1.0p-53; }
  double normal() {
    // Box–Muller; one of the pair is enough here.
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
  }
  double exponential(double rate) { return -std::log(uniform()) / rate; }

 private:
  std::uint64_t state_;
};

}  // namespace

const model_curve* model_table::find(std::string_view name) const noexcept {
  for (const auto& m : models)
    if (m.name == name) return &m;
  return nullptr;
}

model_table model_table::builtin() {
  return model_table{{model_curve{"default", {10, 600, 4, 1, 2}}}};
}

result<trace> parse_trace(std::string_view text, std::string_view source) {
  auto table = read_csv(text, source);
  if (!table) return std::unexpected(table.error());
  auto cols = map_columns(table->header, trace_columns, trace_required, source);
  if (!cols) return std::unexpected(cols.error());
  const auto& col = *cols;
  trace out;
  out.source = std::string(source);
  out.jobs.reserve(table->rows.size());
  for (const auto& row : table->rows) {
    trace_job j;
    j.line = row.line;
    const auto cell = [&](trace_column c) { return row.cells[std::size_t(col[c])]; };
    const auto has = [&](trace_column c) { return col[c] >= 0 && !cell(c).empty(); };
    const auto number = [&](trace_column c) {
      return parse_number(cell(c), trace_columns[c], source, row.line);
    };
    const auto integer = [&](trace_column c) {
      return parse_int(cell(c), trace_columns[c], source, row.line);
    };
    auto submit = number(c_submit);
    if (!submit) return std::unexpected(submit.error());
    if (*submit < 0)
      return fail(errc::invalid_argument, "{}:{}: column 'submit_time': {} is negative", source,
                  row.line, *submit);
    j.submit_time = *submit;
    auto duration = number(c_duration);
    if (!duration) return std::unexpected(duration.error());
    if (!(*duration > 0))
      return fail(errc::invalid_argument, "{}:{}: column 'duration': {} is not > 0", source,
                  row.line, *duration);
    j.duration = *duration;
    auto gpus = integer(c_gpus);
    if (!gpus) return std::unexpected(gpus.error());
    if (*gpus < 1)
      return fail(errc::invalid_argument, "{}:{}: column 'num_gpus': {} is not >= 1", source,
                  row.line, *gpus);
    j.num_gpus = *gpus;
    if (has(c_model)) {
      if (!valid_name(cell(c_model)))
        return fail(errc::invalid_argument,
                    "{}:{}: column 'model': '{}' is not a name (letters, digits, '.', '_', '-')",
                    source, row.line, printable(cell(c_model)));
      j.model = std::string(cell(c_model));
    }
    if (has(c_elastic)) {
      if (cell(c_elastic) != "0" && cell(c_elastic) != "1")
        return fail(errc::invalid_argument, "{}:{}: column 'elastic': '{}' is not 0 or 1", source,
                    row.line, printable(cell(c_elastic)));
      j.elastic = cell(c_elastic) == "1";
    }
    for (auto c : {c_min, c_max, c_shards}) {
      if (!has(c)) continue;
      auto v = integer(c);
      if (!v) return std::unexpected(v.error());
      if (*v < 1)
        return fail(errc::invalid_argument, "{}:{}: column '{}': {} is not >= 1", source, row.line,
                    trace_columns[c], *v);
      (c == c_min ? j.min_gpus : c == c_max ? j.max_gpus : j.num_shards) = *v;
    }
    if (j.min_gpus && *j.min_gpus > j.num_gpus)
      return fail(errc::invalid_argument, "{}:{}: min_gpus {} is more than num_gpus {}", source,
                  row.line, *j.min_gpus, j.num_gpus);
    if (j.max_gpus && *j.max_gpus < j.num_gpus)
      return fail(errc::invalid_argument, "{}:{}: max_gpus {} is less than num_gpus {}", source,
                  row.line, *j.max_gpus, j.num_gpus);
    out.jobs.push_back(std::move(j));
  }
  return out;
}

result<trace> load_trace(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::unexpected(text.error());
  return parse_trace(*text, path);
}

result<model_table> parse_models(std::string_view text, std::string_view source) {
  auto table = read_csv(text, source);
  if (!table) return std::unexpected(table.error());
  auto cols = map_columns(table->header, model_known, model_columns, source);
  if (!cols) return std::unexpected(cols.error());
  model_table out;
  for (const auto& row : table->rows) {
    model_curve m;
    m.name = std::string(row.cells[std::size_t((*cols)[0])]);
    if (!valid_name(m.name))
      return fail(errc::invalid_argument,
                  "{}:{}: column 'model': '{}' is not a name (letters, digits, '.', '_', '-')",
                  source, row.line, printable(m.name));
    if (out.find(m.name))
      return fail(errc::invalid_argument, "{}:{}: model '{}' is listed twice", source, row.line,
                  m.name);
    double sum = 0;
    for (std::size_t k = 0; k < perf_terms; ++k) {
      const auto cell = row.cells[std::size_t((*cols)[k + 1])];
      auto v = parse_number(cell, model_columns[k + 1], source, row.line);
      if (!v) return std::unexpected(v.error());
      if (*v < 0)
        return fail(errc::invalid_argument, "{}:{}: column '{}': {} is negative", source, row.line,
                    model_columns[k + 1], *v);
      m.theta[k] = *v;
      sum += *v;
    }
    if (!(sum > 0))
      return fail(errc::invalid_argument, "{}:{}: model '{}' has every theta 0 (no epoch time)",
                  source, row.line, m.name);
    for (std::size_t k : {std::size_t(6), std::size_t(7)}) {
      const int c = (*cols)[k];
      if (c < 0 || row.cells[std::size_t(c)].empty()) continue;
      auto v = parse_number(row.cells[std::size_t(c)], model_known[k], source, row.line);
      if (!v) return std::unexpected(v.error());
      if (*v < 0)
        return fail(errc::invalid_argument, "{}:{}: column '{}': {} is negative", source, row.line,
                    model_known[k], *v);
      (k == 6 ? m.param_mb : m.steps) = *v;
    }
    out.models.push_back(std::move(m));
  }
  if (out.models.empty()) return fail(errc::invalid_argument, "{}: lists no model", source);
  return out;
}

result<model_table> load_models(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::unexpected(text.error());
  return parse_models(*text, path);
}

std::vector<trace_job> generate_trace(const trace_generator_options& o, const model_table& models) {
  rng r(o.seed);
  const int total = std::max(1, o.nodes * o.gpus_per_node);
  constexpr std::array<std::pair<int, double>, 5> sizes{
      {{1, 0.45}, {2, 0.20}, {4, 0.20}, {8, 0.10}, {16, 0.05}}};
  std::vector<trace_job> jobs(o.jobs);
  double gpu_seconds = 0;
  for (auto& j : jobs) {
    double u = r.uniform();
    j.num_gpus = sizes.back().first;
    for (const auto& [n, p] : sizes) {
      if (u < p) {
        j.num_gpus = n;
        break;
      }
      u -= p;
    }
    j.num_gpus = std::min(j.num_gpus, total);
    const double d = o.median_duration_s * std::exp(o.duration_sigma * r.normal());
    j.duration = std::round(std::clamp(d, o.min_duration_s, o.max_duration_s));
    j.model = models.models.empty()
                  ? std::string("default")
                  : models.models[std::size_t(r.next() % models.models.size())].name;
    gpu_seconds += j.duration * j.num_gpus;
  }
  // Poisson arrivals at the rate that offers `load`: rate × mean GPU-seconds = load × GPUs.
  const double mean = jobs.empty() ? 1.0 : gpu_seconds / double(jobs.size());
  const double rate = std::max(1e-12, o.load) * total / mean;
  double t = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (i > 0) t += r.exponential(rate);
    jobs[i].submit_time = std::round(t * 10) / 10;
  }
  return jobs;
}

std::string format_trace(std::span<const trace_job> jobs, std::string_view comment) {
  std::string out;
  while (!comment.empty()) {
    const std::size_t nl = comment.find('\n');
    out += "# " + std::string(comment.substr(0, nl)) + "\n";
    comment = nl == std::string_view::npos ? std::string_view{} : comment.substr(nl + 1);
  }
  out += "submit_time,duration,num_gpus,model\n";
  char buf[64];
  for (const auto& j : jobs) {
    std::snprintf(buf, sizeof buf, "%.10g,%.10g,%d,", j.submit_time, j.duration, j.num_gpus);
    out += buf;
    out += j.model;
    out += '\n';
  }
  return out;
}

}  // namespace coach::scheduler
