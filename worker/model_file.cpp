#include "worker/model_file.hpp"

#include "worker/external_pool.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/format.hpp"

namespace coach::worker {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need a byte swap");

namespace {

using json = nlohmann::json;

std::size_t dtype_bytes(std::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL") return 1;
  return 0;
}

template <class T>
std::string json_array(const std::vector<T>& v) {
  return json(v).dump();
}

}  // namespace

const stored_tensor* safetensors_file::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

result<void> write_safetensors(const std::string& path, const safetensors_file& file) {
  json header = json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::uint64_t at = 0;
  for (const auto& t : file.tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes.size()}}};
    at += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail(errc::io_error, "cannot write {}: {}", tmp, std::strerror(errno));
  auto put = [fd](const void* data, std::size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      p += w;
      n -= std::size_t(w);
    }
    return true;
  };
  const std::uint64_t n = text.size();
  bool ok = put(&n, 8) && put(text.data(), text.size());
  for (const auto& t : file.tensors) ok = ok && put(t.bytes.data(), t.bytes.size());
  // On the disk before the rename: a machine that goes down leaves the old file or this one.
  ok = ok && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) {
    std::filesystem::remove(tmp);
    return fail(errc::io_error, "cannot write {}: {}", tmp, std::strerror(err));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    return fail(errc::io_error, "cannot write {}: {}", path, ec.message());
  }
  // The rename itself lasts once the directory is on the disk too.
  auto dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

result<safetensors_file> read_safetensors(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return fail(errc::not_found, "{}: no such file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(errc::io_error, "cannot read {}: {}", path, std::strerror(errno));
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return fail(errc::io_error, "cannot read {}: {}", path, ec.message());
  std::uint64_t n = 0;
  if (size < 8 || !in.read(reinterpret_cast<char*>(&n), 8))
    return fail(errc::parse_error,
                "{}: not a safetensors file (shorter than its 8-byte header "
                "length)",
                path);
  if (n > size - 8)
    return fail(errc::parse_error,
                "{}: not a safetensors file (its header length {} exceeds the file's {} bytes)",
                path, n, size);
  std::string text(n, '\0');
  in.read(text.data(), std::streamsize(n));
  json header = json::parse(text, nullptr, false);
  if (header.is_discarded() || !header.is_object())
    return fail(errc::parse_error, "{}: the safetensors header is not a JSON object", path);
  const std::uint64_t data_size = size - 8 - n;
  safetensors_file f;
  struct range {
    std::string name;
    std::uint64_t begin, end;
  };
  std::vector<range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object())
        return fail(errc::parse_error, "{}: __metadata__ is not a map of strings", path);
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          return fail(errc::parse_error, "{}: metadata '{}' is not a string", path, m.key());
        f.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const json& t = *it;
    stored_tensor st;
    st.name = it.key();
    try {
      st.dtype = t.at("dtype").get<std::string>();
      st.shape = t.at("shape").get<std::vector<std::int64_t>>();
      const auto off = t.at("data_offsets").get<std::vector<std::uint64_t>>();
      if (off.size() != 2) throw std::runtime_error("data_offsets");
      ranges.push_back({st.name, off[0], off[1]});
    } catch (const std::exception&) {
      return fail(errc::parse_error,
                  "{}: tensor '{}' needs dtype, shape and data_offsets [begin, "
                  "end]",
                  path, st.name);
    }
    const auto& r = ranges.back();
    if (r.begin > r.end || r.end > data_size)
      return fail(errc::parse_error, "{}: tensor '{}' lies at bytes [{}, {}) of {} data bytes",
                  path, st.name, r.begin, r.end, data_size);
    std::uint64_t count = 1;
    for (auto d : st.shape) {
      if (d < 0)
        return fail(errc::parse_error, "{}: tensor '{}' has a negative size", path, st.name);
      count *= std::uint64_t(d);
    }
    const std::size_t per = dtype_bytes(st.dtype);
    if (per == 0)
      return fail(errc::parse_error, "{}: tensor '{}' has unknown dtype '{}'", path, st.name,
                  st.dtype);
    if (count * per != r.end - r.begin)
      return fail(errc::parse_error,
                  "{}: tensor '{}' of shape {} and dtype {} needs {} bytes, "
                  "has {}",
                  path, st.name, shape_text(st.shape), st.dtype, count * per, r.end - r.begin);
    f.tensors.push_back(std::move(st));
  }
  for (std::size_t i = 0; i < f.tensors.size(); ++i) {
    auto& st = f.tensors[i];
    st.bytes.resize(ranges[i].end - ranges[i].begin);
    in.seekg(std::streamoff(8 + n + ranges[i].begin));
    if (!in.read(reinterpret_cast<char*>(st.bytes.data()), std::streamsize(st.bytes.size())))
      return fail(errc::io_error, "cannot read {}: tensor '{}'", path, st.name);
  }
  return f;
}

std::string model_yaml(const network& net) {
  if (const auto& ext = net.external()) {  // a script's model: its framework loads it
    const auto name = std::filesystem::path(ext->pool->options().script).filename().string();
    return coach::format("{{script: {}}}", json(name).dump());
  }
  std::string out;
  const auto in = net.input_shape();
  out += coach::format("{{type: layers, input_shape: [{}, {}, {}], ", in[0], in[1], in[2]);
  if (!net.tables().empty()) {
    // One entry per table, its fields explicit: the same tables for any data set of as many
    // fields or more (the rows themselves live in the shards, not in this file).
    out += "embeddings: [";
    for (std::size_t t = 0; t < net.tables().size(); ++t) {
      const auto& table = net.tables()[t];
      std::string fields;
      for (int f : table.fields) fields += coach::format("{}{}", fields.empty() ? "" : ", ", f);
      out += coach::format(
          "{}{{fields: [{}], rows: {}, dim: {}, pooling: {}, init_scale: {}, per_field: false}}",
          t == 0 ? "" : ", ", fields, table.config.rows, table.config.dim,
          sparse::to_string(table.pooling), table.config.init_scale);
    }
    out += "], ";
    if (net.interaction() != interaction::none)
      out += coach::format("interaction: {}, ", to_string(net.interaction()));
  }
  out += "layers: [";
  bool first = true;
  for (const auto& l : net.layers()) {
    const auto& c = l.cfg;
    std::string item = coach::format("{{type: {}", to_string(c.kind));
    switch (c.kind) {
      case layer_kind::dense:
        item += coach::format(", units: {}", c.units);
        break;
      case layer_kind::conv2d:
        item += coach::format(", channels: {}, kernel: {}, stride: {}, padding: {}", c.channels,
                              c.kernel, c.stride, c.padding);
        break;
      case layer_kind::max_pool2d:
      case layer_kind::avg_pool2d:
        item +=
            coach::format(", kernel: {}, stride: {}, padding: {}", c.kernel, c.stride, c.padding);
        break;
      case layer_kind::dropout:
        item += coach::format(", p: {}", c.p);
        break;
      case layer_kind::batch_norm:
        item += coach::format(", momentum: {}, epsilon: {}", c.momentum, c.epsilon);
        break;
      default:
        break;
    }
    out += (first ? "" : ", ") + item + "}";
    first = false;
  }
  return out + "]}";
}

safetensors_file pack_model(const network& net, std::span<const float> params,
                            const std::vector<std::string>& class_names,
                            const feature_transform& transform,
                            const std::map<std::string, std::string>& extra) {
  safetensors_file f;
  f.metadata = extra;
  f.metadata["format"] = "pt";
  f.metadata["coach.model"] = model_yaml(net);
  const auto in = net.input_shape();
  f.metadata["coach.input_shape"] = coach::format("{},{},{}", in[0], in[1], in[2]);
  f.metadata["coach.classes"] = std::to_string(net.classes());
  if (!class_names.empty()) f.metadata["coach.class_names"] = json_array(class_names);
  f.metadata["coach.normalize"] = std::string(to_string(transform.kind));
  if (!transform.offset.empty()) f.metadata["coach.feature_offset"] = json_array(transform.offset);
  if (!transform.scale.empty()) f.metadata["coach.feature_scale"] = json_array(transform.scale);
  for (auto& t : pack_tensors(net, params, "", false)) f.tensors.push_back(std::move(t));
  return f;
}

namespace {

/// Whether the tensor lies in one of the network's statistic ranges.
bool is_statistic(const network& net, const param_tensor& t) {
  for (const auto& r : net.statistic_ranges())
    if (t.offset >= r.keys.begin && t.offset < r.keys.end) return true;
  return false;
}

}  // namespace

std::vector<stored_tensor> pack_tensors(const network& net, std::span<const float> values,
                                        const std::string& prefix, bool skip_statistics) {
  std::vector<stored_tensor> out;
  for (const auto& t : net.tensors()) {
    if (skip_statistics && is_statistic(net, t)) continue;
    stored_tensor st{prefix + t.name, "F32", t.shape, {}};
    st.bytes.resize(t.size() * sizeof(float));
    auto* dst = reinterpret_cast<float*>(st.bytes.data());
    const float* src = values.data() + t.offset;
    if (t.transposed) {  // flat: in x out; PyTorch: out x in
      const std::size_t rows = std::size_t(t.shape[0]), cols = std::size_t(t.shape[1]);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) dst[r * cols + c] = src[c * rows + r];
    } else {
      std::memcpy(dst, src, st.bytes.size());
    }
    out.push_back(std::move(st));
  }
  return out;
}

result<std::vector<float>> unpack_params(const network& net, const safetensors_file& file) {
  return unpack_tensors(net, file, "", false);
}

result<std::vector<float>> unpack_tensors(const network& net, const safetensors_file& file,
                                          const std::string& prefix, bool skip_statistics) {
  std::vector<float> params(net.num_params(), 0.0f);
  for (const auto& t : net.tensors()) {
    if (skip_statistics && is_statistic(net, t)) continue;
    const std::string name = prefix + t.name;
    const stored_tensor* st = file.find(name);
    if (st == nullptr)
      return fail(errc::invalid_argument, "the file has no tensor '{}' (shape {}) of this model",
                  name, shape_text(t.shape));
    if (st->dtype != "F32")
      return fail(errc::invalid_argument, "tensor '{}' is {}; Coach reads F32", name, st->dtype);
    if (st->shape != t.shape)
      return fail(errc::invalid_argument, "tensor '{}' has shape {}; the model's is {}", name,
                  shape_text(st->shape), shape_text(t.shape));
    const auto* in = reinterpret_cast<const float*>(st->bytes.data());
    float* dst = params.data() + t.offset;
    if (t.transposed) {
      const std::size_t rows = std::size_t(t.shape[0]), cols = std::size_t(t.shape[1]);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) dst[c * rows + r] = in[r * cols + c];
    } else {
      std::memcpy(dst, in, st->bytes.size());
    }
  }
  return params;
}

result<model_labels> labels_of(const safetensors_file& file) {
  model_labels out;
  const auto text = [&](const char* key) -> const std::string* {
    auto it = file.metadata.find(key);
    return it == file.metadata.end() ? nullptr : &it->second;
  };
  try {
    if (const auto* names = text("coach.class_names"))
      out.class_names = json::parse(*names).get<std::vector<std::string>>();
    if (const auto* kind = text("coach.normalize")) {
      auto k = parse_normalization(*kind);
      if (!k) return std::unexpected(k.error());
      out.transform.kind = *k;
    }
    if (const auto* v = text("coach.feature_offset"))
      out.transform.offset = json::parse(*v).get<std::vector<float>>();
    if (const auto* v = text("coach.feature_scale"))
      out.transform.scale = json::parse(*v).get<std::vector<float>>();
  } catch (const std::exception& e) {
    return fail(errc::parse_error, "the file's coach metadata does not parse: {}", e.what());
  }
  return out;
}

}  // namespace coach::worker
