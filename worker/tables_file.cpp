#include "worker/tables_file.hpp"

#include <cstring>

#include <nlohmann/json.hpp>

namespace coach::worker {
namespace {

std::vector<sparse::table_config> configs_of(const network& net) {
  std::vector<sparse::table_config> out;
  for (const auto& t : net.tables()) out.push_back(t.config);
  return out;
}

const sparse::bucket_range every_bucket[] = {{0, sparse::bucket_count}};

}  // namespace

std::string tables_path(const std::string& model_path) {
  constexpr std::string_view ext = ".safetensors";
  if (model_path.size() > ext.size() && model_path.ends_with(ext))
    return model_path.substr(0, model_path.size() - ext.size()) + ".tables" + std::string(ext);
  return model_path + ".tables" + std::string(ext);
}

result<safetensors_file> pack_tables(const network& net, std::uint64_t seed,
                                     std::span<const std::vector<std::byte>> rows,
                                     const sparse::row_optimizer_config& optimizer) {
  auto store = sparse::row_store::create(seed, configs_of(net), optimizer, every_bucket);
  if (!store) return std::unexpected(store.error());
  for (const auto& blob : rows)
    if (auto ok = store->merge(blob); !ok) return std::unexpected(ok.error());
  safetensors_file file;
  nlohmann::json tables = nlohmann::json::array();
  for (std::uint32_t t = 0; t < net.tables().size(); ++t) {
    const auto& c = net.tables()[t].config;
    tables.push_back({{"rows", c.rows}, {"dim", c.dim}, {"init_scale", c.init_scale}});
    const auto ids = store->held_rows(t);
    stored_tensor id_tensor{std::to_string(t) + ".ids", "U64", {std::int64_t(ids.size())}, {}};
    id_tensor.bytes.resize(ids.size() * sizeof(std::uint64_t));
    if (!ids.empty()) std::memcpy(id_tensor.bytes.data(), ids.data(), id_tensor.bytes.size());
    stored_tensor weight{
        std::to_string(t) + ".weight", "F32", {std::int64_t(ids.size()), std::int64_t(c.dim)}, {}};
    weight.bytes.resize(ids.size() * c.dim * sizeof(float));
    for (std::size_t i = 0; i < ids.size(); ++i)
      std::memcpy(weight.bytes.data() + i * c.dim * sizeof(float), store->find(t, ids[i]).data(),
                  c.dim * sizeof(float));
    file.tensors.push_back(std::move(id_tensor));
    file.tensors.push_back(std::move(weight));
  }
  file.metadata["format"] = "coach-tables";
  file.metadata["coach.seed"] = std::to_string(seed);
  file.metadata["coach.tables"] = tables.dump();
  return file;
}

result<sparse::row_store> unpack_tables(const network& net, const safetensors_file& file) {
  const auto seed_text = file.metadata.find("coach.seed");
  const auto tables_text = file.metadata.find("coach.tables");
  if (seed_text == file.metadata.end() || tables_text == file.metadata.end())
    return fail(errc::invalid_argument, "a tables file without coach.seed and coach.tables");
  std::uint64_t seed = 0;
  try {
    seed = std::stoull(seed_text->second);
    const auto tables = nlohmann::json::parse(tables_text->second);
    if (!tables.is_array() || tables.size() != net.tables().size())
      return fail(errc::invalid_argument, "a tables file of {} tables; the model has {}",
                  tables.is_array() ? tables.size() : 0, net.tables().size());
    for (std::size_t t = 0; t < tables.size(); ++t) {
      const auto& c = net.tables()[t].config;
      if (tables[t].at("rows").get<std::uint64_t>() != c.rows ||
          tables[t].at("dim").get<std::uint32_t>() != c.dim)
        return fail(errc::invalid_argument, "table {} of the tables file disagrees with the model",
                    t);
    }
  } catch (const std::exception& e) {
    return fail(errc::invalid_argument, "a tables file's metadata does not parse: {}", e.what());
  }
  sparse::row_optimizer_config values_only;
  values_only.kind = sparse::row_optimizer_kind::sgd;
  auto store = sparse::row_store::create(seed, configs_of(net), values_only, every_bucket);
  if (!store) return std::unexpected(store.error());
  for (std::uint32_t t = 0; t < net.tables().size(); ++t) {
    const auto dim = net.tables()[t].config.dim;
    const auto* ids = file.find(std::to_string(t) + ".ids");
    const auto* weight = file.find(std::to_string(t) + ".weight");
    if (!ids || !weight)
      return fail(errc::invalid_argument, "table {}: tensors {}.ids and {}.weight are required", t,
                  t, t);
    const std::size_t n = ids->bytes.size() / sizeof(std::uint64_t);
    if (ids->dtype != "U64" || weight->dtype != "F32" || ids->shape.size() != 1 ||
        std::size_t(ids->shape[0]) != n || weight->shape.size() != 2 ||
        std::size_t(weight->shape[0]) != n || std::size_t(weight->shape[1]) != dim)
      return fail(errc::invalid_argument,
                  "table {}: {}.ids must be U64 [n] and {}.weight F32 [n, {}]", t, t, t, dim);
    std::uint64_t last = 0;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t row = 0;
      std::memcpy(&row, ids->bytes.data() + i * sizeof row, sizeof row);
      if (i > 0 && row <= last)
        return fail(errc::invalid_argument, "table {}: {}.ids are not ascending at {}", t, t, i);
      last = row;
      std::vector<float> v(dim);
      std::memcpy(v.data(), weight->bytes.data() + i * dim * sizeof(float), dim * sizeof(float));
      if (auto ok = store->put(t, row, v); !ok)
        return fail(errc::invalid_argument, "table {}: {}", t, ok.error().message);
    }
  }
  return store;
}

}  // namespace coach::worker
