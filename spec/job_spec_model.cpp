// spec/job_spec_model.cpp: the `model:` section of a job spec and its list of layers
// (job_spec_sections.hpp).
#include <algorithm>
#include <initializer_list>
#include <string_view>
#include <utility>
#include <vector>

#include "spec/job_spec_sections.hpp"

namespace coach::scheduler::detail {
namespace {

using worker::layer_kind;

constexpr std::string_view layer_kinds =
    "dense, conv2d, max_pool2d, avg_pool2d, flatten, dropout, batch_norm, relu, tanh, sigmoid, "
    "gelu";

const std::initializer_list<std::pair<std::string_view, layer_kind>> layer_names = {
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

/// The fields of each layer type's map besides `type`: what open_layer accepts, and what
/// layer_types() shows (README.md's table of layers is checked against it).
constexpr std::string_view dense_fields[] = {"units"};
constexpr std::string_view conv2d_fields[] = {"channels", "kernel", "stride", "padding"};
constexpr std::string_view pool_fields[] = {"kernel", "stride", "padding"};
constexpr std::string_view dropout_fields[] = {"p"};
constexpr std::string_view batch_norm_fields[] = {"momentum", "epsilon"};

constexpr layer_type_fields layer_table[] = {{"dense", dense_fields},
                                             {"conv2d", conv2d_fields},
                                             {"max_pool2d", pool_fields},
                                             {"avg_pool2d", pool_fields},
                                             {"flatten", {}},
                                             {"dropout", dropout_fields},
                                             {"batch_norm", batch_norm_fields},
                                             {"relu", {}},
                                             {"tanh", {}},
                                             {"sigmoid", {}},
                                             {"gelu", {}}};

/// The largest kernel, stride and padding of a layer.
constexpr std::int64_t max_window = 1024;

/// A layer given by its name alone (`- relu`); the last in the list when `last`.
result<worker::layer_config> parse_layer_name(const spec_parser& p, const entry& item, bool last) {
  worker::layer_config l;
  auto k = p.get_enum<layer_kind>(item, layer_names, layer_kinds);
  if (!k) return std::unexpected(std::move(k.error()));
  l.kind = *k;
  if (l.kind == layer_kind::conv2d)
    return p.bad(item,
                 "conv2d needs its channels and kernel: {{type: conv2d, channels: N, "
                 "kernel: K}}");
  if (l.kind == layer_kind::dense && !last)
    return p.bad(item,
                 "dense needs its units ({{type: dense, units: N}}); only the last layer "
                 "may leave them out");
  return l;
}

/// The fields of a layer map of kind `kind`: `type` and the options of that kind (layer_table).
result<fields> open_layer(const spec_parser& p, const entry& item, layer_kind kind) {
  const std::string_view name = worker::to_string(kind);
  std::vector<std::string_view> allowed{"type"};
  for (const auto& row : layer_table)
    if (row.type == name) allowed.insert(allowed.end(), row.fields.begin(), row.fields.end());
  // PyTorch's nn.Dropout calls its probability p; `rate` (Keras') is refused naming it.
  if (kind == layer_kind::dropout)
    if (const YAML::Node rate = item.value["rate"])
      return p.bad(errc::invalid_argument, spec_parser::line_of(rate, spec_parser::line_of(item)),
                   item.path + ".rate",
                   "is not a dropout field: its probability is p, as PyTorch's nn.Dropout(p) "
                   "({{type: dropout, p: 0.2}})");
  return p.open_map(item, allowed);
}

/// Reads the integer field `key` of `lf` in [lo, hi] into `into`; false when it is not there.
result<bool> int_field(const spec_parser& p, const fields& lf, std::string_view key,
                       std::int64_t lo, std::int64_t hi, int& into) {
  const entry* fe = lf.find(key);
  if (fe == nullptr) return false;
  auto v = p.get_int(*fe, lo, hi);
  if (!v) return std::unexpected(std::move(v.error()));
  into = int(*v);
  return true;
}

/// The window of a conv2d (channels and kernel required) or a pooling layer: kernel, stride,
/// padding (smaller than the kernel).
result<void> parse_window(const spec_parser& p, const fields& lf, worker::layer_config& l) {
  result<bool> got = false;
  if (l.kind == layer_kind::conv2d) {
    got = int_field(p, lf, "channels", 1, 65536, l.channels);
    if (!got) return std::unexpected(std::move(got.error()));
    if (!*got) return p.missing(lf, "channels");
    got = int_field(p, lf, "kernel", 1, max_window, l.kernel);
    if (!got) return std::unexpected(std::move(got.error()));
    if (!*got) return p.missing(lf, "kernel");
  } else {
    got = int_field(p, lf, "kernel", 1, max_window, l.kernel);
    if (!got) return std::unexpected(std::move(got.error()));
  }
  got = int_field(p, lf, "stride", 1, max_window, l.stride);
  if (!got) return std::unexpected(std::move(got.error()));
  got = int_field(p, lf, "padding", 0, max_window, l.padding);
  if (!got) return std::unexpected(std::move(got.error()));
  if (const entry* pe = lf.find("padding")) {
    const int window = l.kernel != 0 ? l.kernel : 2;
    if (l.padding >= window)
      return p.bad(*pe,
                   "must be smaller than the kernel ({}) so that every window touches "
                   "the input, got {}",
                   window, l.padding);
  }
  return {};
}

/// The options of a layer map `lf` for l.kind; `last`: the last layer (dense may leave out
/// its units).
result<void> parse_layer_options(const spec_parser& p, const fields& lf, bool last,
                                 worker::layer_config& l) {
  switch (l.kind) {
    case layer_kind::dense: {
      auto got = int_field(p, lf, "units", 1, max_width, l.units);
      if (!got) return std::unexpected(std::move(got.error()));
      if (!*got && !last) return p.missing(lf, "units");
      return {};
    }
    case layer_kind::conv2d:
    case layer_kind::max_pool2d:
    case layer_kind::avg_pool2d:
      return parse_window(p, lf, l);
    case layer_kind::dropout:
      if (const entry* fe = lf.find("p")) {
        auto v = p.get_float(*fe, 0.0, false, 1.0, true);
        if (!v) return std::unexpected(std::move(v.error()));
        l.p = *v;
      }
      return {};
    case layer_kind::batch_norm:
      if (const entry* fe = lf.find("momentum")) {
        auto v = p.get_float(*fe, 0.0, true, 1.0, false);
        if (!v) return std::unexpected(std::move(v.error()));
        l.momentum = *v;
      }
      if (const entry* fe = lf.find("epsilon")) {
        auto v = p.get_float(*fe, 0.0, true, 1.0, false);
        if (!v) return std::unexpected(std::move(v.error()));
        l.epsilon = *v;
      }
      return {};
    default:
      return {};
  }
}

/// A layer given as a map with a `type` (`- {type: dense, units: 10}`), item of the list `e`.
result<worker::layer_config> parse_layer_map(const spec_parser& p, const entry& e,
                                             const entry& item, bool last) {
  if (!item.value.IsMap())
    return p.bad(item, "must be a layer name or a map with a 'type', got {}", describe(item.value));
  const YAML::Node type = item.value["type"];
  if (!type) return p.bad(item, "needs a 'type' (one of {})", layer_kinds);
  const entry type_entry{e.key, type, item.path + ".type"};
  auto k = p.get_enum<layer_kind>(type_entry, layer_names, layer_kinds);
  if (!k) return std::unexpected(std::move(k.error()));
  worker::layer_config l;
  l.kind = *k;
  auto lf = open_layer(p, item, l.kind);
  if (!lf) return std::unexpected(std::move(lf.error()));
  if (auto ok = parse_layer_options(p, *lf, last, l); !ok) {
    return std::unexpected(std::move(ok.error()));
  }
  return l;
}

/// `layers`: a non-empty list of layers whose last is dense.
result<void> parse_layers(const spec_parser& p, const entry& e,
                          std::vector<worker::layer_config>& out) {
  if (!e.value.IsSequence() || e.value.size() == 0)
    return p.bad(e, "must be a non-empty list of layers, got {}", describe(e.value));
  const std::size_t count = e.value.size();
  for (std::size_t i = 0; i < count; ++i) {
    const entry item{e.key, e.value[i], coach::format("{}[{}]", e.path, i)};
    const bool last = i + 1 == count;
    auto l =
        item.value.IsScalar() ? parse_layer_name(p, item, last) : parse_layer_map(p, e, item, last);
    if (!l) return std::unexpected(std::move(l.error()));
    out.push_back(*l);
  }
  if (out.back().kind != layer_kind::dense) {
    const entry item{e.key, e.value[count - 1], coach::format("{}[{}]", e.path, count - 1)};
    return p.bad(item,
                 "must be dense: the last layer gives the class scores (softmax "
                 "cross-entropy follows it), got {}",
                 worker::to_string(out.back().kind));
  }
  return {};
}

/// The mlp shorthand: `hidden` widths and `activation`.
result<void> parse_mlp(const spec_parser& p, const fields& f, worker::model_config& model) {
  if (const entry* e = f.find("hidden")) {
    if (!e->value.IsSequence()) {
      return p.bad(*e, "must be a list of layer widths, got {}", describe(e->value));
    }
    std::vector<int> widths;
    for (std::size_t i = 0; i < e->value.size(); ++i) {
      const entry item{e->key, e->value[i], coach::format("{}[{}]", e->path, i)};
      auto w = p.get_int(item, 1, max_width);
      if (!w) return std::unexpected(std::move(w.error()));
      widths.push_back(int(*w));
    }
    model.hidden = std::move(widths);
  }
  if (const entry* e = f.find("activation")) {
    auto v = p.get_enum<worker::activation>(*e, {{"relu", worker::activation::relu}}, "relu");
    if (!v) return std::unexpected(std::move(v.error()));
    model.act = *v;
  }
  return {};
}

/// `input_shape`: [channels, height, width].
result<void> parse_input_shape(const spec_parser& p, const entry& e, worker::model_config& model) {
  if (!e.value.IsSequence() || e.value.size() != 3)
    return p.bad(e, "must be a list [channels, height, width], got {}", describe(e.value));
  for (std::size_t i = 0; i < 3; ++i) {
    const entry item{e.key, e.value[i], coach::format("{}[{}]", e.path, i)};
    auto v = p.get_int(item, 1, max_width);
    if (!v) return std::unexpected(std::move(v.error()));
    model.input_shape[i] = int(*v);
  }
  return {};
}

/// The most rows of an embedding table (ids are hashed into them) and floats of a row.
constexpr std::uint64_t max_table_rows = std::uint64_t{1} << 40;
constexpr std::uint64_t max_table_dim = 65536;

/// `fields` of an embedding: `all`, or a non-empty list of distinct field indices.
result<void> parse_embedding_fields(const spec_parser& p, const entry& e,
                                    worker::embedding_config& emb) {
  if (e.value.IsScalar() && e.value.Scalar() == "all") {
    emb.fields.clear();
    return {};
  }
  if (!e.value.IsSequence() || e.value.size() == 0)
    return p.bad(e, "must be all or a non-empty list of field indices, got {}", describe(e.value));
  for (std::size_t i = 0; i < e.value.size(); ++i) {
    const entry item{e.key, e.value[i], coach::format("{}[{}]", e.path, i)};
    auto v = p.get_int(item, 0, max_width);
    if (!v) return std::unexpected(std::move(v.error()));
    if (std::find(emb.fields.begin(), emb.fields.end(), int(*v)) != emb.fields.end())
      return p.bad(item, "lists field {} a second time", *v);
    emb.fields.push_back(int(*v));
  }
  return {};
}

/// One entry of `embeddings`: {fields, rows, dim, pooling, init_scale, per_field}.
result<worker::embedding_config> parse_embedding(const spec_parser& p, const entry& item) {
  auto f = p.open_map(item, {"fields", "rows", "dim", "pooling", "init_scale", "per_field"});
  if (!f) return std::unexpected(std::move(f.error()));
  worker::embedding_config emb;
  if (const entry* e = f->find("fields")) {
    if (auto r = parse_embedding_fields(p, *e, emb); !r) return std::unexpected(r.error());
  }
  const entry* rows = f->find("rows");
  if (rows == nullptr) return p.missing(*f, "rows");
  auto r = p.get_uint(*rows, 1);
  if (!r) return std::unexpected(std::move(r.error()));
  if (*r > max_table_rows) return p.bad(*rows, "must be <= {} (2^40), got {}", max_table_rows, *r);
  emb.rows = *r;
  const entry* dim = f->find("dim");
  if (dim == nullptr) return p.missing(*f, "dim");
  auto d = p.get_uint(*dim, 1);
  if (!d) return std::unexpected(std::move(d.error()));
  if (*d > max_table_dim) return p.bad(*dim, "must be <= {}, got {}", max_table_dim, *d);
  emb.dim = std::uint32_t(*d);
  if (const entry* e = f->find("pooling")) {
    auto v = p.get_enum<sparse::pooling>(
        *e, {{"sum", sparse::pooling::sum}, {"mean", sparse::pooling::mean}}, "sum, mean");
    if (!v) return std::unexpected(std::move(v.error()));
    emb.pooling = *v;
  }
  if (const entry* e = f->find("init_scale")) {
    auto v = p.get_float(*e, 0.0, false, 1e6, false);
    if (!v) return std::unexpected(std::move(v.error()));
    emb.init_scale = *v;
  }
  if (const entry* e = f->find("per_field")) {
    auto v = p.get_enum<bool>(*e, {{"true", true}, {"false", false}}, "true, false");
    if (!v) return std::unexpected(std::move(v.error()));
    emb.per_field = *v;
  }
  return emb;
}

/// `embeddings`: a list of tables in front of the layers (docs/sparse.md).
result<void> parse_embeddings(const spec_parser& p, const entry& e, worker::model_config& model) {
  if (!e.value.IsSequence())
    return p.bad(e, "must be a list of embedding tables, got {}", describe(e.value));
  for (std::size_t i = 0; i < e.value.size(); ++i) {
    const entry item{e.key, e.value[i], coach::format("{}[{}]", e.path, i)};
    auto emb = parse_embedding(p, item);
    if (!emb) return std::unexpected(std::move(emb.error()));
    model.embeddings.push_back(std::move(*emb));
  }
  return {};
}

/// `interaction` (none | dot), read after `embeddings`: only with embedding tables, and dot only
/// over entries of one dim (every two tables' vectors meet in a dot product).
result<void> parse_interaction(const spec_parser& p, const entry& e, const fields& f,
                               worker::model_config& model) {
  auto v = p.get_enum<worker::interaction>(
      e, {{"none", worker::interaction::none}, {"dot", worker::interaction::dot}}, "none, dot");
  if (!v) return std::unexpected(std::move(v.error()));
  if (model.embeddings.empty())
    return p.bad(e, "is for a model with embedding tables (model.embeddings), which this has not");
  model.interaction = *v;
  if (model.interaction != worker::interaction::dot) return {};
  const auto& tables = model.embeddings;
  for (std::size_t i = 1; i < tables.size(); ++i) {
    if (tables[i].dim == tables[0].dim) continue;
    const entry* list = f.find("embeddings");
    const entry dim{list->key, list->value[i]["dim"], coach::format("{}[{}].dim", list->path, i)};
    return p.bad(dim,
                 "must equal model.embeddings[0].dim ({}) with interaction dot (the dot products "
                 "pair every two tables), got {}",
                 tables[0].dim, tables[i].dim);
  }
  return {};
}

/// A script's model: `script` (a file), `args` (a list of strings), `start_timeout_s`, `warm`.
result<void> parse_script(const spec_parser& p, const fields& f, worker::model_config& model) {
  for (const char* native :
       {"hidden", "activation", "layers", "input_shape", "embeddings", "interaction"})
    if (const entry* e = f.find(native))
      return p.bad(*e, "is for a model of layers; a script builds its own model");
  const entry* e = f.find("script");
  if (e == nullptr) return p.missing(f, "script");
  auto path = p.get_string(*e);
  if (!path) return std::unexpected(std::move(path.error()));
  if (path->empty()) return p.bad(*e, "must name the script's file");
  worker::script_config sc;
  sc.path = *path;
  if (const entry* a = f.find("args")) {
    if (!a->value.IsSequence())
      return p.bad(*a, "must be a list of the script's arguments, got {}", describe(a->value));
    for (std::size_t i = 0; i < a->value.size(); ++i) {
      const entry item{a->key, a->value[i], coach::format("{}[{}]", a->path, i)};
      auto v = p.get_string(item);
      if (!v) return std::unexpected(std::move(v.error()));
      sc.args.push_back(*v);
    }
  }
  if (const entry* w = f.find("warm")) {
    auto v = p.get_int(*w, 0, 64);
    if (!v) return std::unexpected(std::move(v.error()));
    sc.warm = int(*v);
  }
  if (const entry* t = f.find("start_timeout_s")) {
    auto v = p.get_number(*t, 0, true, 86400, false);
    if (!v) return std::unexpected(std::move(v.error()));
    sc.start_timeout_s = *v;
  }
  model.type = "script";
  model.script = std::move(sc);
  return {};
}

}  // namespace

bool names_a_script(const fields& top) {
  const entry* m = top.find("model");
  if (m == nullptr || !m->value.IsMap()) return false;
  if (m->value["script"]) return true;
  const YAML::Node type = m->value["type"];
  return type && type.IsScalar() && type.Scalar() == "script";
}

result<void> check_script_model(const spec_parser& p, const fields& top, const job_spec& spec) {
  if (!spec.model.script) return {};
  if (spec.consistency.kind == consistency_kind::averaging)
    return p.bad(*top.find("consistency"),
                 "averaging runs a model of layers on the workers; a script's model takes bsp, "
                 "ssp:S or asp");
  if (const entry* e = top.find("gpus_per_worker"); e != nullptr && spec.gpus_per_worker > 0)
    return p.bad(*e, "is for a model of layers; a script puts its model on a device itself");
  if (const entry* e = top.find("backend");
      e != nullptr && spec.backend == kernels::backend_kind::cuda)
    return p.bad(*e, "is for a model of layers; a script puts its model on a device itself");
  return {};
}

}  // namespace coach::scheduler::detail

namespace coach::scheduler {

result<void> apply_script_tables(job_spec& spec, const worker::external_layout& layout) {
  if (layout.tables.empty()) {
    if (spec.sparse_optimizer != sparse::row_optimizer_config{})
      return fail(errc::invalid_argument,
                  "field 'sparse_optimizer' is for a model with embedding tables, and the script "
                  "declares none (coach.torch.Embedding)");
    return {};
  }
  const auto refuse = [&](std::string_view field, std::string_view why) {
    return fail(errc::unsupported,
                "field '{}' {}: a script with embedding tables ('{}'{}) runs under consistency "
                "bsp, without host_reduce, so far",
                field, why, layout.tables.front().name,
                layout.tables.size() > 1 ? coach::format(" and {} more", layout.tables.size() - 1)
                                         : std::string());
  };
  if (spec.consistency.kind != consistency_kind::bsp)
    return refuse("consistency", coach::format("is {}", to_string(spec.consistency)));
  if (spec.host_reduce) return refuse("host_reduce", "is true");
  // As for model.embeddings: the rows ride with the dense keys, so the slices must be many.
  if (spec.slice_size == job_spec{}.slice_size) spec.slice_size = sparse_slice_size;
  return {};
}

}  // namespace coach::scheduler

namespace coach::scheduler::detail {

result<void> check_embeddings(const spec_parser& p, const fields& top, const job_spec& spec) {
  if (spec.model.embeddings.empty()) return {};
  const entry* m = top.find("model");
  const YAML::Node list = m->value["embeddings"];
  const entry whole{m->key, list, "model.embeddings"};
  if (spec.dataset.format != worker::dataset_format::ctr)
    return p.bad(whole,
                 "needs a data set with categorical fields (dataset.format: ctr), got format {}",
                 worker::to_string(spec.dataset.format));
  const std::size_t n_fields = spec.dataset.n_fields;
  for (std::size_t i = 0; i < spec.model.embeddings.size(); ++i) {
    const auto& emb = spec.model.embeddings[i];
    const std::string at = coach::format("model.embeddings[{}]", i);
    if (emb.fields.empty() && n_fields == 0)
      return p.bad(entry{m->key, list[i], at + ".fields"},
                   "is all, but the data set has no categorical fields (dataset.n_fields: 0)");
    const YAML::Node fields_node = list[i]["fields"];
    for (std::size_t j = 0; j < emb.fields.size(); ++j) {
      if (std::size_t(emb.fields[j]) < n_fields) continue;
      return p.bad(entry{m->key, fields_node[j], coach::format("{}.fields[{}]", at, j)},
                   "must be < the data set's n_fields ({}), got {}", n_fields, emb.fields[j]);
    }
  }
  return {};
}

result<void> parse_model(const spec_parser& p, const fields& top, job_spec& spec) {
  const entry* m = top.find("model");
  if (m == nullptr) return p.missing(top, "model");
  auto f = p.open_map(*m, {"type", "hidden", "activation", "layers", "input_shape", "embeddings",
                           "interaction", "script", "args", "start_timeout_s", "warm"});
  if (!f) return std::unexpected(std::move(f.error()));
  const entry* type_entry = f->find("type");
  const bool script =
      f->find("script") != nullptr || (type_entry != nullptr && type_entry->value.IsScalar() &&
                                       type_entry->value.Scalar() == "script");
  if (script) return parse_script(p, *f, spec.model);
  for (const char* only_script : {"args", "start_timeout_s", "warm"})
    if (const entry* e = f->find(only_script))
      return p.bad(*e, "is for a script's model (model: {{script: FILE}})");
  const entry* layers = f->find("layers");
  spec.model.type = layers != nullptr ? "layers" : "mlp";
  if (const entry* e = f->find("type")) {
    auto v = p.get_enum<int>(*e, {{"mlp", 0}, {"layers", 1}}, "mlp, layers, script");
    if (!v) return std::unexpected(std::move(v.error()));
    spec.model.type = *v == 0 ? "mlp" : "layers";
  }
  const bool mlp = spec.model.type == "mlp";
  if (mlp && layers != nullptr)
    return p.bad(*layers, "is for type layers; type mlp takes 'hidden' (and 'activation')");
  if (!mlp && layers == nullptr) return p.missing(*f, "layers");
  for (const char* only_mlp : {"hidden", "activation"}) {
    if (const entry* e = f->find(only_mlp); e != nullptr && !mlp)
      return p.bad(*e, "is for type mlp; with 'layers' each layer is listed");
  }
  if (auto r = parse_mlp(p, *f, spec.model); !r) return r;
  if (const entry* e = f->find("embeddings")) {
    if (auto r = parse_embeddings(p, *e, spec.model); !r) return r;
  }
  if (const entry* e = f->find("interaction")) {
    if (auto r = parse_interaction(p, *e, *f, spec.model); !r) return r;
  }
  if (const entry* e = f->find("input_shape")) {
    if (auto r = parse_input_shape(p, *e, spec.model); !r) return r;
  }
  if (layers != nullptr) return parse_layers(p, *layers, spec.model.layers);
  return {};
}

}  // namespace coach::scheduler::detail

namespace coach::scheduler {

std::span<const layer_type_fields> layer_types() {
  return detail::layer_table;
}

}  // namespace coach::scheduler
