// spec/job_spec.cpp: the public functions of job_spec.hpp and the top level of a spec;
// the dataset, model and optimizer sections are read by job_spec_{data,model,optimizer}.cpp,
// the resources, function and schedule by job_spec_resources.cpp, every field through the
// generic reader of spec_parser.hpp.
#include "spec/job_spec.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include "spec/job_spec_sections.hpp"
#include "spec/spec_parser.hpp"

namespace coach::scheduler {
namespace detail {
namespace {

constexpr std::size_t max_name_length = 128;
constexpr std::uintmax_t max_spec_bytes = 1 << 20;  // a job spec is a small text file

result<void> parse_name(const spec_parser& p, const fields& top, job_spec& spec) {
  const entry* e = top.find("name");
  if (e == nullptr) return p.missing(top, "name");
  auto s = p.get_string(*e);
  if (!s) return std::unexpected(std::move(s.error()));
  const bool ok_chars = std::all_of(s->begin(), s->end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
  if (s->empty() || s->size() > max_name_length || !ok_chars) {
    return p.bad(*e, "must be 1 to {} letters, digits, '.', '_' or '-', got {}", max_name_length,
                 describe(e->value));
  }
  spec.name = std::move(*s);
  return {};
}

result<void> parse_consistency(const spec_parser& p, const entry& e, job_spec& spec) {
  constexpr std::string_view forms = "bsp, ssp:S, asp, averaging:K";
  if (!e.value.IsScalar()) return p.bad(e, "must be one of {}, got {}", forms, describe(e.value));
  const std::string& text = e.value.Scalar();
  consistency_config c;
  const auto parameter = [&](std::string_view prefix, std::string_view what,
                             int lo) -> result<int> {
    const std::string_view arg =
        text.size() > prefix.size() ? std::string_view(text).substr(prefix.size()) : "";
    int v = 0;
    const auto [ptr, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), v);
    if (ec != std::errc() || ptr != arg.data() + arg.size() || arg.empty() || v < lo) {
      return p.bad(e, "needs {} as an integer >= {} after '{}' (e.g. '{}{}'), got '{}'", what, lo,
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
    return p.bad(e, "must be one of {}, got {}", forms, describe(e.value));
  }
  spec.consistency = c;
  return {};
}

/// batch_size and epochs (required), consistency and seed. `consistency_line` gets the line of
/// a valid consistency.
result<void> parse_training(const spec_parser& p, const fields& top, job_spec& spec,
                            int& consistency_line) {
  const entry* e = top.find("batch_size");
  const entry* b = top.find("batch");
  if (e && b) return p.bad(*b, "give batch_size or batch, not both");
  if (e == nullptr && b == nullptr) return p.missing(top, "batch_size");
  if (e) {
    auto batch = p.get_int(*e, 1, max_width);
    if (!batch) return std::unexpected(std::move(batch.error()));
    spec.batch_size = int(*batch);
    spec.batch = batch_kind::global;  // batch_size × the initial workers, fixed (resolve_batch)
    spec.batch_line = spec_parser::line_of(*e);
  } else {
    auto f = p.open_map(*b, {"global", "per_worker", "lr_scaling"});
    if (!f) return std::unexpected(std::move(f.error()));
    const entry* g = f->find("global");
    const entry* w = f->find("per_worker");
    if ((g == nullptr) == (w == nullptr)) return p.bad(*b, "give one of global: N, per_worker: N");
    auto n = p.get_int(g ? *g : *w, 1, max_width);
    if (!n) return std::unexpected(std::move(n.error()));
    spec.batch = g ? batch_kind::global : batch_kind::per_worker;
    if (g)
      spec.global_batch = int(*n);
    else
      spec.batch_size = int(*n);
    spec.batch_line = spec_parser::line_of(*b);
    if (const entry* l = f->find("lr_scaling")) {
      if (g) return p.bad(*l, "applies to per_worker: N (a global batch does not change)");
      auto k = p.get_enum<ps::lr_scaling_kind>(*l,
                                               {{"none", ps::lr_scaling_kind::none},
                                                {"linear", ps::lr_scaling_kind::linear},
                                                {"sqrt", ps::lr_scaling_kind::sqrt},
                                                {"adascale", ps::lr_scaling_kind::adascale}},
                                               "none, linear, sqrt, adascale");
      if (!k) return std::unexpected(std::move(k.error()));
      spec.optimizer.lr_scaling = *k;
    }
  }

  e = top.find("epochs");
  if (e == nullptr) return p.missing(top, "epochs");
  auto epochs = p.get_int(*e, 1, int_max);
  if (!epochs) return std::unexpected(std::move(epochs.error()));
  spec.epochs = int(*epochs);

  if ((e = top.find("consistency"))) {
    if (auto r = parse_consistency(p, *e, spec); !r) return r;
    consistency_line = spec_parser::line_of(*e);
  }
  if ((e = top.find("seed"))) {
    auto v = p.get_uint(*e, 0);
    if (!v) return std::unexpected(std::move(v.error()));
    spec.seed = *v;
  }
  return {};
}

/// After consistency and workers: the global batch of a job that keeps it fixed (batch_size ×
/// the initial workers, or batch: {global: N}); a job whose consistency has no common step
/// (asp, averaging:K) runs its batch per worker.
result<void> resolve_batch(const spec_parser& p, job_spec& spec) {
  const bool stepwise = ps::make_consistency(spec.consistency)->stepwise();
  if (spec.batch == batch_kind::global && spec.global_batch > 0 && !stepwise)
    return p.bad(errc::invalid_argument, spec.batch_line, "batch",
                 "global: N needs consistency bsp or ssp (asp and averaging:K have no common "
                 "step); give per_worker: N");
  if (spec.batch == batch_kind::global && !stepwise) spec.batch = batch_kind::per_worker;
  if (spec.batch != batch_kind::global) {
    spec.global_batch = 0;
    if (spec.optimizer.lr_scaling != ps::lr_scaling_kind::none) {
      if (!stepwise)
        return p.bad(errc::invalid_argument, spec.batch_line, "batch.lr_scaling",
                     "needs consistency bsp or ssp (a step of asp or averaging:K is one "
                     "worker's)");
      // The rate as configured holds at the initial workers' global batch.
      spec.optimizer.reference_batch =
          std::uint64_t(spec.batch_size) * std::uint64_t(std::max(1, spec.workers.initial));
    }
    return {};
  }
  const int initial = std::max(1, spec.workers.initial);
  if (spec.global_batch == 0) {
    if (std::int64_t(spec.batch_size) * initial > max_width)
      return p.bad(errc::invalid_argument, spec.batch_line, "batch_size",
                   "times the initial workers ({}) must be at most {}", initial, max_width);
    spec.global_batch = spec.batch_size * initial;
  } else {
    spec.batch_size = std::max(1, spec.global_batch / initial);
  }
  return {};
}

/// `checkpoint: {path, every_s}` and `output: FILE`, paths made absolute against base_dir.
result<void> parse_outputs(const spec_parser& p, const fields& top, const std::string& base_dir,
                           job_spec& spec) {
  if (const entry* e = top.find("checkpoint")) {
    auto f = p.open_map(*e, {"path", "every_s"});
    if (!f) return std::unexpected(std::move(f.error()));
    const entry* path = f->find("path");
    const entry* every = f->find("every_s");
    // Without a path, every_s alone still sets how often a cluster scheduler's store takes one.
    if (path == nullptr && every == nullptr) return p.missing(*f, "path");
    if (path != nullptr) {
      auto v = p.get_string(*path);
      if (!v) return std::unexpected(std::move(v.error()));
      if (v->empty()) return p.bad(*path, "must not be empty");
      spec.checkpoint.path = resolve_path(base_dir, *v);
    }
    if (every != nullptr) {
      auto s = p.get_number(*every, 0.0, false, std::numeric_limits<double>::infinity(), true);
      if (!s) return std::unexpected(std::move(s.error()));
      spec.checkpoint.every_s = *s;
      spec.checkpoint.every_s_given = true;
    }
  }
  if (const entry* e = top.find("output")) {
    auto v = p.get_string(*e);
    if (!v) return std::unexpected(std::move(v.error()));
    if (v->empty()) return p.bad(*e, "must not be empty");
    spec.output = resolve_path(base_dir, *v);
  }
  return {};
}

/// The fields of the document `root`, which must be a map of the known top-level fields.
result<fields> open_top(const spec_parser& p, const YAML::Node& root) {
  if (root.IsNull()) {
    return fail(errc::invalid_argument, "{}:{}: the document is empty; expected a map of fields",
                p.source(), spec_parser::line_of(root, 1));
  }
  if (!root.IsMap()) {
    return fail(errc::invalid_argument, "{}:{}: the top level must be a map of fields, got {}",
                p.source(), spec_parser::line_of(root, 1), describe(root));
  }
  return p.open_map(
      root, "", spec_parser::line_of(root, 1),
      {"name",     "dataset",     "model",      "optimizer",   "batch_size",      "batch",
       "epochs",   "consistency", "seed",       "workers",     "shards",          "gpus_per_worker",
       "backend",  "precision",   "slice_size", "host_reduce", "placement",       "replicas",
       "function", "schedule",    "checkpoint", "output",      "sparse_optimizer"});
}

/// Parses one document into a job_spec, the fields in the order of the spec, so that the
/// first field at fault is the one reported.
result<job_spec> parse_spec(const spec_parser& p, const YAML::Node& root,
                            const std::string& base_dir, const std::string& script_dir) {
  auto top = open_top(p, root);
  if (!top) return std::unexpected(std::move(top.error()));

  job_spec spec;
  if (auto r = parse_name(p, *top, spec); !r) return std::unexpected(std::move(r.error()));
  if (!detail::names_a_script(*top)) {
    if (auto r = parse_dataset(p, *top, base_dir, spec); !r) {
      return std::unexpected(std::move(r.error()));
    }
  } else if (const entry* d = top->find("dataset")) {
    return p.bad(*d, "is for a model of layers; a script reads its own data");
  }
  if (auto r = parse_model(p, *top, spec); !r) return std::unexpected(std::move(r.error()));
  if (spec.model.script)
    spec.model.script->path = resolve_path(script_dir, spec.model.script->path);
  if (auto r = check_embeddings(p, *top, spec); !r) return std::unexpected(std::move(r.error()));
  if (auto r = parse_optimizer(p, *top, spec); !r) return std::unexpected(std::move(r.error()));
  if (auto r = parse_sparse_optimizer(p, *top, spec); !r) {
    return std::unexpected(std::move(r.error()));
  }
  int consistency_line = 0;
  if (auto r = parse_training(p, *top, spec, consistency_line); !r) {
    return std::unexpected(std::move(r.error()));
  }
  if (auto r = parse_resources(p, *top, spec); !r) return std::unexpected(std::move(r.error()));
  if (const entry* e = top->find("function")) {
    if (auto r = parse_function(p, *e, spec); !r) return std::unexpected(std::move(r.error()));
  }
  if (auto r = resolve_batch(p, spec); !r) return std::unexpected(std::move(r.error()));
  // After workers and shards: a change is checked against their ranges.
  if (const entry* e = top->find("schedule")) {
    if (auto r = parse_schedule(p, *e, spec); !r) return std::unexpected(std::move(r.error()));
  }
  if (auto r = parse_outputs(p, *top, base_dir, spec); !r) {
    return std::unexpected(std::move(r.error()));
  }
  if (auto r = detail::check_script_model(p, *top, spec); !r) {
    return std::unexpected(std::move(r.error()));
  }
  // Sparse tables: their rows are pulled at each step's version and pushed once per worker, so
  // far under bsp only, each worker pushing its own (docs/sparse.md, "The data path: a step's
  // rows"); function mode's invocations get a step's rows with their task.
  if (!spec.model.embeddings.empty()) {
    const auto refuse = [&](std::string_view field, int fallback_line, std::string_view why) {
      const entry* e = top->find(std::string(field));
      return p.bad(errc::unsupported, e ? int(e->key.Mark().line) + 1 : fallback_line, field,
                   "{}: a model with embedding tables (model.embeddings) runs under consistency "
                   "bsp, without host_reduce, so far",
                   why);
    };
    if (spec.consistency.kind != consistency_kind::bsp)
      return refuse("consistency", consistency_line,
                    coach::format("is {}", to_string(spec.consistency)));
    if (spec.host_reduce) return refuse("host_reduce", consistency_line, "is true");
  }
  // Model averaging runs the optimizer on the workers, where it has no state across rounds.
  if (spec.consistency.kind == consistency_kind::averaging &&
      spec.optimizer.kind == ps::optimizer_kind::adam) {
    return std::unexpected(
        error{errc::invalid_argument,
              coach::format("{}:{}: field 'consistency': averaging trains each worker with sgd or "
                            "momentum from the pulled parameters; optimizer adam is not supported "
                            "with it",
                            p.source(), consistency_line)});
  }
  return spec;
}

/// The model section alone (a map), as parse_spec reads it.
result<worker::model_config> parse_model_section(const spec_parser& p, const YAML::Node& model) {
  YAML::Node root(YAML::NodeType::Map);
  root["model"] = model;
  auto top = p.open_map(root, "", 1, {"model"});
  if (!top) return std::unexpected(std::move(top.error()));
  job_spec spec;
  if (auto r = parse_model(p, *top, spec); !r) return std::unexpected(std::move(r.error()));
  return spec.model;
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
  return ps::make_consistency(c)->name();
}

std::uint32_t max_useful_workers(const job_spec& spec, std::size_t rows) {
  const std::size_t r = std::max<std::size_t>(rows, 1);
  std::size_t n = spec.fixed_global_batch()
                      ? std::min<std::size_t>(std::size_t(spec.global_batch), r)
                      : (r + std::size_t(std::max(spec.batch_size, 1)) - 1) /
                            std::size_t(std::max(spec.batch_size, 1));
  n = std::clamp<std::size_t>(n, 1, std::numeric_limits<std::uint32_t>::max());
  return std::uint32_t(n);
}

std::optional<error> too_many_workers(const job_spec& spec, std::size_t rows, std::uint32_t workers,
                                      std::string_view what) {
  const auto most = max_useful_workers(spec, rows);
  if (workers <= most) return std::nullopt;
  const std::string why =
      spec.fixed_global_batch()
          ? coach::format(
                "a step of the global batch of {} gives each of at most {} workers a "
                "sample",
                spec.global_batch, most)
          : coach::format("an epoch of {} rows holds {} batches of {}", rows, most,
                          spec.batch_size);
  return error{errc::invalid_argument,
               coach::format("{} {}: {}: more workers would have nothing to train (at most {})",
                             what, workers, why, most)};
}

result<job_spec> parse_job_spec(std::string_view yaml_text, std::string_view source_name) {
  return parse_job_spec(yaml_text, source_name, {});
}

result<job_spec> parse_job_spec(std::string_view yaml_text, std::string_view source_name,
                                std::string_view base_dir, std::string_view spec_dir) {
  const std::string source(source_name.empty() ? "<job spec>" : source_name);
  try {
    auto root = detail::load_single_document(std::string(yaml_text), source);
    if (!root) return std::unexpected(std::move(root.error()));
    // A script is found beside its spec (the spec file's folder; else as a data path is).
    const std::string script_dir(spec_dir.empty() ? base_dir : spec_dir);
    return detail::parse_spec(detail::spec_parser(source), *root, std::string(base_dir),
                              script_dir);
  } catch (const YAML::Exception& e) {
    // ParserException and the rest: yaml-cpp's message may quote the offending character. A
    // tab in the indentation is named as such: yaml-cpp says "illegal map value" of most.
    const int line = e.mark.line >= 0 ? e.mark.line + 1 : 1;
    if (auto tab = detail::indenting_tab(yaml_text, source, line)) return std::unexpected(*tab);
    return fail(errc::parse_error, "{}:{}: malformed YAML: {}", source, line,
                detail::printable(e.msg, 200));
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
    return detail::parse_model_section(detail::spec_parser(source), *root);
  } catch (const YAML::Exception& e) {
    const int line = e.mark.line >= 0 ? e.mark.line + 1 : 1;
    if (auto tab = detail::indenting_tab(yaml_text, source, line)) return std::unexpected(*tab);
    return fail(errc::parse_error, "{}: cannot parse the model: {}", source,
                detail::printable(e.what(), 200));
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
    // Relative paths in a spec mean the spec's folder: `coach train examples/x.yaml` reads the
    // same files from any working directory.
    const auto dir = std::filesystem::absolute(path, ec).parent_path().string();
    return parse_job_spec(text.str(), path, dir, dir);
  } catch (const std::bad_alloc&) {
    return fail(errc::resource_exhausted, "{}: out of memory while reading", path);
  } catch (const std::exception& e) {
    return fail(errc::io_error, "{}: cannot read the job spec file: {}", path, e.what());
  }
}

}  // namespace coach::scheduler
