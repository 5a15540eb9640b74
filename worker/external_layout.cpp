// worker/external_layout.cpp: the layout an external compute process registers
// (external_layout.hpp).
#include "worker/external_layout.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

#include "common/format.hpp"

namespace coach::worker {
namespace {

using json = nlohmann::json;

/// `obj[key]` when it is there and of the type `ok` accepts, else a protocol error.
template <class Ok>
result<const json*> field(const json& obj, std::string_view where, const char* key, Ok ok,
                          const char* expected) {
  auto it = obj.find(key);
  if (it == obj.end()) return fail(errc::protocol_error, "{} has no '{}'", where, key);
  if (!ok(*it)) return fail(errc::protocol_error, "{}: '{}' must be {}", where, key, expected);
  return &*it;
}

bool is_count(const json& j) {
  return j.is_number_unsigned() || (j.is_number_integer() && j >= 0);
}

result<external_tensor> parse_tensor(const json& t, std::size_t i) {
  const auto where = coach::format("hello: tensors[{}]", i);
  if (!t.is_object()) return fail(errc::protocol_error, "{} must be an object", where);
  auto name = field(
      t, where, "name", [](const json& j) { return j.is_string(); }, "a string");
  if (!name) return std::unexpected(name.error());
  external_tensor out;
  out.name = (*name)->get<std::string>();
  if (out.name.empty()) return fail(errc::invalid_argument, "{} has an empty name", where);
  auto dtype = field(
      t, where, "dtype", [](const json& j) { return j.is_string(); }, "a string");
  if (!dtype) return std::unexpected(dtype.error());
  if (const auto d = (*dtype)->get<std::string>(); d != "float32")
    return fail(errc::invalid_argument, "tensor '{}' is {}: the shards hold float32", out.name, d);
  auto shape = field(
      t, where, "shape", [](const json& j) { return j.is_array(); }, "a list");
  if (!shape) return std::unexpected(shape.error());
  if ((*shape)->size() > 16)
    return fail(errc::invalid_argument, "tensor '{}' has {} dimensions (at most 16)", out.name,
                (*shape)->size());
  for (const auto& d : **shape) {
    if (!is_count(d))
      return fail(errc::invalid_argument, "tensor '{}': a dimension is not a whole number >= 0",
                  out.name);
    if (d.get<std::uint64_t>() > max_external_floats)
      return fail(errc::invalid_argument, "tensor '{}' has a dimension of {}", out.name,
                  d.get<std::uint64_t>());
    out.shape.push_back(d.get<std::int64_t>());
  }
  auto kind = field(
      t, where, "kind", [](const json& j) { return j.is_string(); }, "a string");
  if (!kind) return std::unexpected(kind.error());
  const auto k = (*kind)->get<std::string>();
  if (k == "param")
    out.kind = tensor_kind::param;
  else if (k == "buffer")
    out.kind = tensor_kind::buffer;
  else
    return fail(errc::protocol_error, "{}: kind '{}' (expected param or buffer)", where, k);
  return out;
}

result<external_table> parse_table(const json& t, std::size_t i) {
  const auto where = coach::format("hello: tables[{}]", i);
  if (!t.is_object()) return fail(errc::protocol_error, "{} must be an object", where);
  auto name = field(
      t, where, "name", [](const json& j) { return j.is_string(); }, "a string");
  if (!name) return std::unexpected(name.error());
  auto rows = field(t, where, "rows", is_count, "a whole number >= 0");
  if (!rows) return std::unexpected(rows.error());
  auto dim = field(t, where, "dim", is_count, "a whole number >= 0");
  if (!dim) return std::unexpected(dim.error());
  external_table out;
  out.name = (*name)->get<std::string>();
  if (out.name.empty()) return fail(errc::invalid_argument, "{} has an empty name", where);
  const auto r = (*rows)->get<std::uint64_t>();
  const auto d = (*dim)->get<std::uint64_t>();
  if (r < 1 || r > (std::uint64_t(1) << 40))
    return fail(errc::invalid_argument, "table '{}' has {} rows (give 1 to 2^40)", out.name, r);
  if (d < 1 || d > 65536)
    return fail(errc::invalid_argument, "table '{}' has dim {} (give 1 to 65536)", out.name, d);
  out.rows = r;
  out.dim = std::uint32_t(d);
  if (auto it = t.find("init_scale"); it != t.end()) {
    if (!it->is_number() || it->get<double>() < 0 || !std::isfinite(it->get<double>()))
      return fail(errc::invalid_argument, "table '{}': init_scale must be a number >= 0", out.name);
    out.init_scale = it->get<float>();
  }
  return out;
}

}  // namespace

std::string_view to_string(tensor_kind k) noexcept {
  return k == tensor_kind::param ? "param" : "buffer";
}

std::size_t external_tensor::size() const noexcept {
  std::size_t n = 1;
  for (auto d : shape) n *= std::size_t(d);
  return n;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i)
    s += coach::format("{}{}", i ? ", " : "", shape[i]);
  return s + "]";
}

result<external_layout> parse_hello(std::string_view json_text) {
  const json j = json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail(errc::protocol_error, "hello is not a JSON object");
  const char* where = "hello";
  auto samples = field(j, where, "samples", is_count, "a whole number >= 0");
  if (!samples) return std::unexpected(samples.error());
  auto tensors = field(
      j, where, "tensors", [](const json& t) { return t.is_array(); }, "a list");
  if (!tensors) return std::unexpected(tensors.error());
  external_layout out;
  out.samples = (*samples)->get<std::uint64_t>();
  if (out.samples == 0)
    return fail(errc::invalid_argument, "the script has no training samples (samples 0)");
  if (auto it = j.find("test_samples"); it != j.end()) {
    if (!is_count(*it))
      return fail(errc::protocol_error, "hello: 'test_samples' must be a whole number >= 0");
    out.test_samples = it->get<std::uint64_t>();
  }
  if (auto it = j.find("framework"); it != j.end() && it->is_string())
    out.framework = it->get<std::string>().substr(0, 200);
  if ((*tensors)->empty()) return fail(errc::invalid_argument, "the model has no tensors");
  if ((*tensors)->size() > max_external_tensors)
    return fail(errc::invalid_argument, "the model has {} tensors (at most {})", (*tensors)->size(),
                max_external_tensors);
  std::set<std::string> names;
  for (std::size_t i = 0; i < (*tensors)->size(); ++i) {
    auto t = parse_tensor((**tensors)[i], i);
    if (!t) return std::unexpected(t.error());
    if (!names.insert(t->name).second)
      return fail(errc::invalid_argument, "tensor '{}' is listed twice", t->name);
    t->offset = out.floats;
    out.floats += t->size();
    if (out.floats > max_external_floats)
      return fail(errc::invalid_argument, "the model has more than {} floats", max_external_floats);
    out.tensors.push_back(std::move(*t));
  }
  if (out.floats == 0) return fail(errc::invalid_argument, "the model has no parameters");
  if (auto it = j.find("tables"); it != j.end()) {
    if (!it->is_array()) return fail(errc::protocol_error, "hello: 'tables' must be a list");
    if (it->size() > 65536)
      return fail(errc::invalid_argument, "the model has {} tables (at most 65536)", it->size());
    std::set<std::string> table_names;
    for (std::size_t i = 0; i < it->size(); ++i) {
      auto t = parse_table((*it)[i], i);
      if (!t) return std::unexpected(t.error());
      if (!table_names.insert(t->name).second)
        return fail(errc::invalid_argument, "table '{}' is listed twice", t->name);
      out.tables.push_back(std::move(*t));
    }
  }
  return out;
}

std::string hello_json(const external_layout& layout) {
  json tensors = json::array();
  for (const auto& t : layout.tensors)
    tensors.push_back({{"name", t.name},
                       {"shape", t.shape},
                       {"dtype", "float32"},
                       {"kind", std::string(to_string(t.kind))}});
  json hello = {{"op", "hello"},
                {"protocol", 1},
                {"samples", layout.samples},
                {"test_samples", layout.test_samples},
                {"framework", layout.framework},
                {"tensors", std::move(tensors)}};
  if (!layout.tables.empty()) {
    json tables = json::array();
    for (const auto& t : layout.tables)
      tables.push_back(
          {{"name", t.name}, {"rows", t.rows}, {"dim", t.dim}, {"init_scale", t.init_scale}});
    hello["tables"] = std::move(tables);
  }
  // Names are the script's: bytes that are not UTF-8 are replaced rather than thrown on.
  return hello.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<std::string> layout_difference(const external_layout& registered,
                                             const external_layout& got) {
  const std::size_t common = std::min(registered.tensors.size(), got.tensors.size());
  for (std::size_t i = 0; i < common; ++i) {
    const auto& a = registered.tensors[i];
    const auto& b = got.tensors[i];
    if (a.name != b.name)
      return coach::format("tensor {} is '{}' where the first process registered '{}'", i, b.name,
                           a.name);
    if (a.shape != b.shape)
      return coach::format("tensor '{}' has shape {} where the first process registered {}", b.name,
                           shape_text(b.shape), shape_text(a.shape));
    if (a.kind != b.kind)
      return coach::format("tensor '{}' is a {} where the first process registered a {}", b.name,
                           to_string(b.kind), to_string(a.kind));
  }
  if (got.tensors.size() > common)
    return coach::format("tensor '{}' is not in the layout the first process registered",
                         got.tensors[common].name);
  if (registered.tensors.size() > common)
    return coach::format("tensor '{}' of the first process's layout is missing",
                         registered.tensors[common].name);
  const std::size_t tables = std::min(registered.tables.size(), got.tables.size());
  for (std::size_t i = 0; i < tables; ++i) {
    const auto& a = registered.tables[i];
    const auto& b = got.tables[i];
    if (a.name != b.name)
      return coach::format("table {} is '{}' where the first process registered '{}'", i, b.name,
                           a.name);
    if (a.rows != b.rows || a.dim != b.dim || a.init_scale != b.init_scale)
      return coach::format(
          "table '{}' has {} rows of dim {} (init_scale {:g}) where the first process registered "
          "{} rows of dim {} (init_scale {:g})",
          b.name, b.rows, b.dim, b.init_scale, a.rows, a.dim, a.init_scale);
  }
  if (got.tables.size() > tables)
    return coach::format("table '{}' is not in the layout the first process registered",
                         got.tables[tables].name);
  if (registered.tables.size() > tables)
    return coach::format("table '{}' of the first process's layout is missing",
                         registered.tables[tables].name);
  if (registered.samples != got.samples)
    return coach::format("{} training samples where the first process registered {}", got.samples,
                         registered.samples);
  if (registered.test_samples != got.test_samples)
    return coach::format("{} test samples where the first process registered {}", got.test_samples,
                         registered.test_samples);
  return std::nullopt;
}

dataset_pair script_dataset(const external_layout& layout) {
  dataset_pair d;
  d.train.rows = layout.samples;
  d.test.rows = std::max<std::uint64_t>(1, layout.test_samples);
  return d;
}

}  // namespace coach::worker
