#include "worker/ctr_data.hpp"

#include <charconv>
#include <span>
#include <string_view>
#include <utility>

#include "worker/dataset_split.hpp"
#include "worker/gz_reader.hpp"
#include "worker/line_reader.hpp"

namespace coach::worker {
namespace {

/// The hex value of a categorical cell, or false: 1 to 8 hex digits, either case.
bool parse_hex(std::string_view cell, std::uint32_t& value) noexcept {
  if (cell.empty() || cell.size() > 8) return false;
  const auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value, 16);
  return ec == std::errc() && ptr == cell.data() + cell.size();
}

bool parse_integer(std::string_view cell, std::int64_t& value) noexcept {
  if (!cell.empty() && cell.front() == '+') cell.remove_prefix(1);
  if (cell.empty()) return false;
  const auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
  return ec == std::errc() && ptr == cell.data() + cell.size();
}

/// Parses one line of `columns` tab-separated cells into the end of `out`.
result<void> parse_line(const ctr_options& opt, std::size_t line_no, std::string_view line,
                        ctr_set& out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const std::size_t columns = 1 + opt.n_dense + opt.n_fields;
  std::size_t cells = 1;
  for (char c : line) cells += c == '\t' ? 1 : 0;
  if (cells != columns) {
    return fail(errc::parse_error,
                "{}: line {}: row has {} tab-separated columns, expected {} (the label, {} "
                "integer and {} categorical)",
                opt.path, line_no, cells, columns, opt.n_dense, opt.n_fields);
  }
  std::size_t at = 0;
  const auto next_cell = [&line, &at] {
    const std::size_t end = std::min(line.find('\t', at), line.size());
    const std::string_view cell = line.substr(at, end - at);
    at = end + 1;
    return cell;
  };
  const std::string_view label = next_cell();
  if (label != "0" && label != "1") {
    return fail(errc::parse_error, "{}: line {}, column 1: label '{}' must be 0 or 1", opt.path,
                line_no, detail::printable(label));
  }
  out.labels.push_back(label == "1" ? 1.0f : 0.0f);
  for (std::size_t i = 0; i < opt.n_dense; ++i) {
    const std::string_view cell = next_cell();
    std::int64_t v = 0;
    if (!cell.empty() && !parse_integer(cell, v)) {
      return fail(errc::parse_error, "{}: line {}, column {} (I{}): '{}' is not an integer",
                  opt.path, line_no, 2 + i, i + 1, detail::printable(cell));
    }
    out.dense.push_back(ctr_dense_transform(v));  // empty: v = 0, the missing value's 0
  }
  for (std::size_t f = 0; f < opt.n_fields; ++f) {
    const std::string_view cell = next_cell();
    std::uint32_t v = ctr_missing;
    if (!cell.empty()) {
      if (!parse_hex(cell, v)) {
        return fail(errc::parse_error,
                    "{}: line {}, column {} (C{}): '{}' is not a categorical value (1 to 8 hex "
                    "digits)",
                    opt.path, line_no, 2 + opt.n_dense + f, f + 1, detail::printable(cell));
      }
      if (v == ctr_missing) {
        return fail(errc::parse_error,
                    "{}: line {}, column {} (C{}): ffffffff is reserved for a missing value",
                    opt.path, line_no, 2 + opt.n_dense + f, f + 1);
      }
    }
    out.categorical.push_back(v);
  }
  ++out.rows;
  return {};
}

}  // namespace

result<ctr_set> load_ctr(const ctr_options& opt) {
  if (opt.n_dense + opt.n_fields == 0) {
    return fail(errc::invalid_argument, "{}: a CTR row needs integer or categorical columns",
                opt.path);
  }
  auto in = detail::gz_reader::open(opt.path);
  if (!in) return std::unexpected(std::move(in.error()));
  ctr_set out;
  out.n_dense = opt.n_dense;
  out.n_fields = opt.n_fields;
  if (auto size = in->plain_size(); size) {
    // Criteo's rows are about 200 bytes: reserve for the rows the file may hold.
    std::size_t guess = std::size_t(*size / 160);
    if (opt.max_rows != 0) guess = std::min(guess, opt.max_rows);
    out.labels.reserve(guess);
    out.dense.reserve(guess * opt.n_dense);
    out.categorical.reserve(guess * opt.n_fields);
  }
  detail::line_reader lines(std::move(*in));
  std::span<char> line;
  while (opt.max_rows == 0 || out.rows < opt.max_rows) {
    auto more = lines.next(line);
    if (!more) return std::unexpected(std::move(more.error()));
    if (!*more) break;
    const std::string_view text(line.data(), line.size());
    if (text.empty() || text == "\r") continue;
    if (auto ok = parse_line(opt, lines.line_no(), text, out); !ok) {
      return std::unexpected(std::move(ok.error()));
    }
  }
  if (out.rows == 0) return fail(errc::parse_error, "{}: no data rows", opt.path);
  return out;
}

}  // namespace coach::worker
