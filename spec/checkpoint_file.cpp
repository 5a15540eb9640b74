#include "spec/checkpoint_file.hpp"

#include <nlohmann/json.hpp>

#include <cstring>
#include <map>

#include "common/format.hpp"
#include "worker/tables_file.hpp"

namespace coach::scheduler {
namespace {

using json = nlohmann::json;

constexpr const char* info_key = "coach.checkpoint";
/// The tensors of a sparse model's rows: one a shard (pack_checkpoint).
const std::string rows_prefix = "coach.rows.";

/// The tensor name prefixes of the optimizer state: state_a's, then state_b's (PyTorch's
/// names of SGD's and Adam's state).
std::vector<std::string> state_prefixes(std::size_t state_per_param) {
  if (state_per_param == 1) return {"optimizer.momentum_buffer."};
  if (state_per_param == 2) return {"optimizer.exp_avg.", "optimizer.exp_avg_sq."};
  return {};
}

json to_json(const checkpoint_info& i) {
  return {{"epochs_completed", i.epochs_completed},
          {"version", i.version},
          {"updates", i.updates},
          {"samples_applied", i.samples_applied},
          {"workers", i.workers},
          {"shards", i.shards},
          {"seed", i.seed},
          {"optimizer", i.optimizer},
          {"state_per_param", i.state_per_param},
          {"train_samples", i.train_samples},
          {"batch_size", i.batch_size},
          {"epochs", i.epochs},
          {"consistency", i.consistency}};
}

}  // namespace

checkpoint_info describe_checkpoint(const job_spec& spec, const ps::training_state& state,
                                    std::uint32_t epochs_completed, std::uint32_t workers,
                                    std::uint32_t shards, std::uint64_t train_samples) {
  checkpoint_info i;
  i.epochs_completed = epochs_completed;
  i.version = state.version;
  i.updates = state.updates;
  i.samples_applied = state.samples_applied;
  i.workers = workers;
  i.shards = shards;
  i.seed = spec.seed;
  i.optimizer = std::string(spec.optimizer.type_name());
  i.state_per_param = shard_optimizer(spec).state_per_param();
  i.train_samples = train_samples;
  i.batch_size = spec.batch_size;
  i.epochs = spec.epochs;
  i.consistency = to_string(spec.consistency);
  return i;
}

worker::safetensors_file pack_checkpoint(const worker::network& net,
                                         const ps::training_state& state,
                                         const checkpoint_info& info, const std::string& name,
                                         const worker::model_labels& labels,
                                         const std::map<std::string, std::string>& extra) {
  auto meta = extra;
  meta["coach.name"] = name;
  meta["coach.epochs"] = std::to_string(info.epochs_completed);
  meta[info_key] = to_json(info).dump();
  auto file = worker::pack_model(net, state.values, labels.class_names, labels.transform, meta);
  const auto prefixes = state_prefixes(info.state_per_param);
  const std::vector<float>* states[] = {&state.state_a, &state.state_b};
  for (std::size_t k = 0; k < prefixes.size(); ++k)
    for (auto& t : worker::pack_tensors(net, *states[k], prefixes[k], true))
      file.tensors.push_back(std::move(t));
  // Sparse tables: each shard's rows and their optimizer state, as the shard transferred them
  // (sparse::row_store's layout), one U8 tensor a shard: coach.rows.0, coach.rows.1, ...
  for (std::size_t i = 0; i < state.rows.size(); ++i) {
    const auto& blob = state.rows[i];
    worker::stored_tensor t{rows_prefix + std::to_string(i), "U8", {std::int64_t(blob.size())}, {}};
    t.bytes.resize(blob.size());
    if (!blob.empty()) std::memcpy(t.bytes.data(), blob.data(), blob.size());
    file.tensors.push_back(std::move(t));
  }
  return file;
}

result<void> write_checkpoint(const std::string& path, const worker::network& net,
                              const ps::training_state& state, const checkpoint_info& info,
                              const std::string& name, const worker::model_labels& labels,
                              const std::map<std::string, std::string>& extra) {
  return worker::write_safetensors(path, pack_checkpoint(net, state, info, name, labels, extra));
}

result<checkpoint_info> checkpoint_info_of(const worker::safetensors_file& file) {
  auto it = file.metadata.find(info_key);
  if (it == file.metadata.end())
    return fail(errc::invalid_argument,
                "not a checkpoint (no {} metadata: a model saved by --save has no optimizer "
                "state; write checkpoints with --checkpoint)",
                info_key);
  checkpoint_info i;
  try {
    const json j = json::parse(it->second);
    j.at("epochs_completed").get_to(i.epochs_completed);
    j.at("version").get_to(i.version);
    j.at("updates").get_to(i.updates);
    j.at("samples_applied").get_to(i.samples_applied);
    j.at("workers").get_to(i.workers);
    j.at("shards").get_to(i.shards);
    j.at("seed").get_to(i.seed);
    j.at("optimizer").get_to(i.optimizer);
    j.at("state_per_param").get_to(i.state_per_param);
    j.at("train_samples").get_to(i.train_samples);
    j.at("batch_size").get_to(i.batch_size);
    j.at("epochs").get_to(i.epochs);
    j.at("consistency").get_to(i.consistency);
  } catch (const std::exception& e) {
    return fail(errc::parse_error, "{} does not parse: {}", info_key, e.what());
  }
  if (i.version < 0 || i.updates < 0 || i.updates > i.version || i.state_per_param > 2)
    return fail(errc::parse_error, "{} is impossible: {} steps, {} updates, {} state floats",
                info_key, i.version, i.updates, i.state_per_param);
  return i;
}

result<loaded_checkpoint> load_checkpoint(const std::string& path, const job_spec& spec,
                                          const worker::network& net, std::uint64_t train_samples) {
  // read_safetensors names the path in its errors; the rest are prefixed with it here.
  auto file = worker::read_safetensors(path);
  if (!file) return std::unexpected(file.error());
  auto bad = [&](errc code, const std::string& what) -> result<loaded_checkpoint> {
    return fail(code, "{}: {}", path, what);
  };
  auto info = checkpoint_info_of(*file);
  if (!info) return bad(info.error().code, info.error().message);
  const auto text = [&](const char* key) {
    auto it = file->metadata.find(key);
    return it == file->metadata.end() ? std::string("(none)") : it->second;
  };
  const std::string model = worker::model_yaml(net);
  if (text("coach.model") != model)
    return bad(errc::invalid_argument,
               coach::format("the checkpoint's model differs from the spec's: {} against {}",
                             text("coach.model"), model));
  if (text("coach.classes") != std::to_string(net.classes()))
    return bad(errc::invalid_argument,
               coach::format("the checkpoint's model has {} classes, the spec's data set {}",
                             text("coach.classes"), net.classes()));
  if (info->optimizer != spec.optimizer.type_name())
    return bad(errc::invalid_argument,
               coach::format("the checkpoint was trained with optimizer {}, the spec asks for {}",
                             info->optimizer, spec.optimizer.type_name()));
  const std::size_t per = shard_optimizer(spec).state_per_param();
  if (info->state_per_param != per)
    return bad(errc::invalid_argument,
               coach::format("the checkpoint keeps {} optimizer floats per parameter, the "
                             "spec's shards keep {} (consistency {})",
                             info->state_per_param, per, to_string(spec.consistency)));
  if (info->train_samples != train_samples)
    return bad(errc::invalid_argument,
               coach::format("the checkpoint was trained on {} training samples, the spec's data "
                             "set has {}",
                             info->train_samples, train_samples));
  if (info->seed != spec.seed)
    return bad(errc::invalid_argument,
               coach::format("the checkpoint ran with seed {}, the spec says {} (the data set's "
                             "split and order follow the seed)",
                             info->seed, spec.seed));
  if (std::int64_t(info->epochs_completed) >= spec.epochs)
    return bad(errc::invalid_argument,
               coach::format("the checkpoint has completed {} epoch(s) and the spec asks for {}: "
                             "nothing left to train (raise epochs to train on)",
                             info->epochs_completed, spec.epochs));
  loaded_checkpoint out;
  out.info = *info;
  auto values = worker::unpack_params(net, *file);
  if (!values) return bad(values.error().code, values.error().message);
  out.state.values = std::move(*values);
  const auto prefixes = state_prefixes(per);
  std::vector<float>* states[] = {&out.state.state_a, &out.state.state_b};
  for (std::size_t k = 0; k < prefixes.size(); ++k) {
    auto s = worker::unpack_tensors(net, *file, prefixes[k], true);
    if (!s) return bad(s.error().code, s.error().message);
    *states[k] = std::move(*s);
  }
  for (std::size_t i = 0;; ++i) {
    const auto* t = file->find(rows_prefix + std::to_string(i));
    if (!t) break;
    if (t->dtype != "U8")
      return bad(errc::invalid_argument, coach::format("{}{} must be U8", rows_prefix, i));
    out.state.rows.emplace_back(
        reinterpret_cast<const std::byte*>(t->bytes.data()),
        reinterpret_cast<const std::byte*>(t->bytes.data()) + t->bytes.size());
  }
  if (!net.tables().empty() && out.state.rows.empty())
    return bad(errc::invalid_argument,
               "the model has embedding tables but the checkpoint holds none of their rows");
  out.state.version = info->version;
  out.state.updates = info->updates;
  out.state.samples_applied = info->samples_applied;
  if (auto ok = ps::check(out.state, net.num_params(), per); !ok)
    return bad(ok.error().code, ok.error().message);
  return out;
}

result<worker::network> network_of_model_file(const worker::safetensors_file& file,
                                              const std::string& path) {
  const auto meta = [&](const char* key) -> result<std::string> {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end())
      return fail(errc::invalid_argument,
                  "{}: no '{}' in the file's metadata: not a model saved by coach train --save",
                  path, key);
    return it->second;
  };
  auto model_text = meta("coach.model");
  if (!model_text) return std::unexpected(model_text.error());
  auto classes_text = meta("coach.classes");
  if (!classes_text) return std::unexpected(classes_text.error());
  auto model = parse_model_yaml(*model_text, path + " (coach.model)");
  if (!model) return std::unexpected(model.error());
  if (model->script)
    return fail(errc::unsupported,
                "{}: a script's model ({}): load it with its framework, e.g. "
                "model.load_state_dict(safetensors.torch.load_file(\"{}\")) (docs/python.md)",
                path, model->script->path, path);
  int classes = 0;
  if (std::sscanf(classes_text->c_str(), "%d", &classes) != 1 || classes < 2)
    return fail(errc::invalid_argument, "{}: coach.classes '{}' is not a class count", path,
                *classes_text);
  result<worker::network> net;
  if (model->embeddings.empty()) {
    net = worker::network::build(*model, model->input_shape, classes);
  } else {
    // A model with embedding tables is resolved against its data set's columns, as it was in
    // training.
    auto features = meta("coach.features");
    if (!features) return std::unexpected(features.error());
    auto fields = meta("coach.fields");
    if (!fields) return std::unexpected(fields.error());
    worker::dataset shape;
    shape.classes = classes;
    if (std::sscanf(features->c_str(), "%zu", &shape.features) != 1 ||
        std::sscanf(fields->c_str(), "%zu", &shape.fields) != 1)
      return fail(errc::invalid_argument, "{}: coach.features and coach.fields must be counts",
                  path);
    model->input_shape = {0, 0, 0};
    net = worker::network::for_data(*model, shape);
  }
  if (!net) return fail(net.error().code, "{}: {}", path, net.error().message);
  return net;
}

result<void> write_model(const std::string& path, const job_spec& spec, const job_result& result) {
  // The network as the run resolved it against its data set's shape and classes.
  worker::dataset shape_of;
  shape_of.shape = result.sample_shape;
  shape_of.features = result.features;
  shape_of.classes = result.classes;
  shape_of.fields = result.fields;
  auto model = spec.model;
  if (model.script && !model.external) model.external = result.external;
  auto net = worker::network::for_data(model, shape_of);
  if (!net) return std::unexpected(std::move(net.error()));
  if (net->num_params() != result.params.size())
    return fail(errc::invalid_argument, "{}: the run has {} parameters, the model {}", path,
                result.params.size(), net->num_params());
  std::map<std::string, std::string> extra = {
      {"coach.name", spec.name},
      // Absolute: a resumed run's reports number its epochs as the run it continues does.
      {"coach.epochs", std::to_string(result.epochs.empty() ? 0 : result.epochs.back().epoch + 1)},
      {"coach.test_accuracy", coach::format("{:.6f}", result.test_accuracy)}};
  if (!net->tables().empty()) {
    // What loading needs to rebuild the tables' lookups (coach eval): the data set's columns.
    extra["coach.features"] = std::to_string(result.features);
    extra["coach.fields"] = std::to_string(result.fields);
    if (result.rows.empty())
      return fail(errc::internal, "{}: the run's final sparse rows did not come back", path);
    // The tables first: a model file is never left beside tables of another run.
    auto tables = worker::pack_tables(*net, spec.seed, result.rows, spec.sparse_optimizer);
    if (!tables) return fail(tables.error().code, "{}: {}", path, tables.error().message);
    if (auto ok = worker::write_safetensors(worker::tables_path(path), *tables); !ok) return ok;
  }
  return worker::write_safetensors(
      path, worker::pack_model(*net, result.params, result.class_names, result.transform, extra));
}

}  // namespace coach::scheduler
