#include "coach_model.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/format.hpp"
#include "kernels/backend.hpp"
#include "spec/checkpoint_file.hpp"
#include "worker/model_file.hpp"
#include "worker/network.hpp"
#include "worker/tables_file.hpp"

namespace coach::apps {
namespace {

int exit_code(const error& e) {
  return e.code == errc::io_error || e.code == errc::resource_exhausted ? 1 : 2;
}

int report(const error& e) {
  std::fprintf(stderr, "coach: %s\n", e.message.c_str());
  return exit_code(e);
}

/// A saved model ready to run: the file, its network and parameters.
struct loaded_model {
  worker::safetensors_file file;
  worker::network net;
  std::vector<float> params;
  worker::model_labels labels;
};

result<loaded_model> load_model(const std::string& path) {
  auto file = worker::read_safetensors(path);
  if (!file) return std::unexpected(file.error());
  auto net = scheduler::network_of_model_file(*file, path);
  if (!net) return std::unexpected(net.error());
  auto params = worker::unpack_params(*net, *file);
  if (!params) return fail(params.error().code, "{}: {}", path, params.error().message);
  auto labels = worker::labels_of(*file);
  if (!labels) return fail(labels.error().code, "{}: {}", path, labels.error().message);
  return loaded_model{std::move(*file), std::move(*net), std::move(*params), std::move(*labels)};
}

std::string label_text(const worker::model_labels& l, std::int32_t c) {
  if (c >= 0 && std::size_t(c) < l.class_names.size()) return l.class_names[std::size_t(c)];
  return std::to_string(c);
}

/// Rows of numbers from CSV text (of the file named `path`): `features` values each.
result<worker::dataset> read_feature_rows(std::istream& in, const std::string& path,
                                          std::size_t features, bool header) {
  worker::dataset d;
  d.features = features;
  std::string line;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (header && line_no == 1) continue;
    std::size_t count = 0;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) {
      char* end = nullptr;
      const float v = std::strtof(cell.c_str(), &end);
      while (end && (*end == ' ' || *end == '\t')) ++end;
      if (end == cell.c_str() || (end && *end != '\0'))
        return fail(errc::invalid_argument, "{}: line {}, column {}: '{}' is not a number{}", path,
                    line_no, count + 1, cell.substr(0, 40),
                    line_no == 1 ? " (a header? give --header)" : "");
      d.x.push_back(v);
      ++count;
    }
    if (count != features)
      return fail(errc::invalid_argument, "{}: line {} has {} values; the model takes {} features",
                  path, line_no, count, features);
    ++d.rows;
  }
  if (d.rows == 0) return fail(errc::invalid_argument, "{}: no rows", path);
  d.y.assign(d.rows, 0);
  return d;
}

/// True when `bytes` start like an IDX image file or a gzip stream.
bool looks_like_idx(std::string_view bytes) {
  if (bytes.size() < 4) return false;
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  return (b(0) == 0x1f && b(1) == 0x8b) || (b(0) == 0 && b(1) == 0 && b(2) == 8 && b(3) == 3);
}

/// The bytes of `path`, standard input for "-": read whole, so that a pipe (which cannot be
/// read twice) is told apart as IDX or CSV from the same bytes it is then read from.
result<std::string> read_input(const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    std::error_code ec;
    const auto type = std::filesystem::status(path, ec).type();
    if (type == std::filesystem::file_type::not_found)
      return fail(errc::not_found, "{}: file not found", path);
    if (type == std::filesystem::file_type::directory)
      return fail(errc::invalid_argument, "{}: is a directory, expected a file of samples", path);
    file.open(path, std::ios::binary);
    if (!file) return fail(errc::not_found, "{}: cannot open", path);
    in = &file;
  }
  std::ostringstream bytes;
  bytes << in->rdbuf();
  if (in->bad()) return fail(errc::io_error, "{}: cannot read", path == "-" ? "<stdin>" : path);
  return bytes.str();
}

/// IDX images (plain or gzipped) from `bytes` that came from `path`: a regular file is loaded
/// where it is; a pipe's bytes go through a temporary file, the loader's way in.
result<worker::dataset> idx_images(const std::string& path, const std::string& bytes) {
  std::error_code ec;
  if (path != "-" && std::filesystem::is_regular_file(path, ec))
    return worker::load_idx_images_only(path);
  const auto tmp =
      std::filesystem::temp_directory_path(ec) / coach::format("coach-predict-{}.idx", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out.flush())
      return fail(errc::io_error, "{}: cannot keep the images in {}", path, tmp.string());
  }
  auto d = worker::load_idx_images_only(tmp.string());
  std::filesystem::remove(tmp, ec);
  if (!d) {
    auto e = d.error();
    if (auto at = e.message.find(tmp.string()); at != std::string::npos)
      e.message.replace(at, tmp.string().size(), path == "-" ? "<stdin>" : path);
    return std::unexpected(std::move(e));
  }
  return d;
}

}  // namespace

int save_model(const std::string& path, const scheduler::job_spec& spec,
               const scheduler::job_result& result) {
  if (auto ok = scheduler::write_model(path, spec, result); !ok) return report(ok.error());
  std::fprintf(stderr, "coach: saved %zu parameters to %s\n", result.params.size(), path.c_str());
  return 0;
}

int run_eval(const std::string& model_path, const std::string& spec_path, bool json) {
  auto m = load_model(model_path);
  if (!m) return report(m.error());
  auto spec = scheduler::load_job_spec(spec_path);
  if (!spec) return report(spec.error());
  auto data = worker::load_dataset(spec->dataset, spec->seed);
  if (!data) return report(data.error());
  const auto& test = data->test;
  // The layers take the dense features, and the pooled bags of a model with tables.
  if (test.features != m->net.dense_inputs())
    return report(error{errc::invalid_argument,
                        coach::format("{}: samples of {} features; the model takes {}",
                                      spec->dataset.path, test.features, m->net.dense_inputs())});
  std::size_t fields_needed = 0;
  for (const auto& t : m->net.tables())
    for (int f : t.fields) fields_needed = std::max(fields_needed, std::size_t(f) + 1);
  if (test.fields < fields_needed)
    return report(error{errc::invalid_argument,
                        coach::format("{}: samples of {} categorical fields; the model's tables "
                                      "look up {}",
                                      spec->dataset.path, test.fields, fields_needed)});
  if (test.classes > m->net.classes())
    return report(error{errc::invalid_argument,
                        coach::format("{}: {} classes; the model knows {}", spec->dataset.path,
                                      test.classes, m->net.classes())});
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  float* w = be->alloc(m->params.size());
  be->upload(w, m->params.data(), m->params.size());
  worker::network_runner runner(m->net, *be, 1000);
  std::vector<std::int64_t> confusion;
  worker::network_runner::evaluation ev;
  if (m->net.tables().empty()) {
    ev = runner.evaluate(w, test, &confusion);
  } else {
    // Embedding tables: their rows from the tables file beside the model (worker/tables_file.hpp).
    const auto tables_file = worker::tables_path(model_path);
    auto file = worker::read_safetensors(tables_file);
    if (!file) return report(file.error());
    auto store = worker::unpack_tables(m->net, *file);
    if (!store)
      return report(
          error{store.error().code, coach::format("{}: {}", tables_file, store.error().message)});
    auto got = runner.evaluate(
        w, test, [&](std::uint32_t t, std::span<const std::uint64_t> ids, std::span<float> out) {
          return store->read(t, ids, out);
        });
    if (!got) return report(got.error());
    ev = *got;
  }
  be->free(w);
  const double loss = ev.total ? ev.loss_sum / double(ev.total) : 0.0;
  if (json) {
    const std::size_t k = std::size_t(m->net.classes());
    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t i = 0; i < k && !confusion.empty(); ++i)
      rows.push_back(std::vector<std::int64_t>(confusion.begin() + std::ptrdiff_t(i * k),
                                               confusion.begin() + std::ptrdiff_t((i + 1) * k)));
    nlohmann::json out = {
        {"samples", ev.total},
        {"loss", loss},
        {"accuracy", ev.accuracy()},
        {"correct", ev.correct},
    };
    if (!confusion.empty()) out["confusion"] = rows;
    if (!m->labels.class_names.empty()) out["class_names"] = m->labels.class_names;
    if (ev.auc) out["auc"] = *ev.auc;  // 2-class models (worker/binary_metrics.hpp)
    if (ev.log_loss) out["log_loss"] = *ev.log_loss;
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("test loss %.4f  test accuracy %.4f", loss, ev.accuracy());
    if (ev.auc) std::printf("  test auc %.4f", *ev.auc);
    std::printf("  (%lld samples)\n", static_cast<long long>(ev.total));
  }
  return 0;
}

int run_predict(const std::string& model_path, const std::string& input, bool header) {
  auto m = load_model(model_path);
  if (!m) return report(m.error());
  // "-" is standard input; a pipe or FIFO is read as a file is.
  auto bytes = read_input(input);
  if (!bytes) return report(bytes.error());
  const std::string name = input == "-" ? "<stdin>" : input;
  const bool idx = looks_like_idx(*bytes);
  std::istringstream text(idx ? std::string() : std::move(*bytes));
  result<worker::dataset> rows =
      idx ? idx_images(input, *bytes)
          : read_feature_rows(text, name, std::size_t(m->net.inputs()), header);
  if (!rows) return report(rows.error());
  if (rows->features != std::size_t(m->net.inputs()))
    return report(
        error{errc::invalid_argument, coach::format("{}: samples of {} values; the model takes {}",
                                                    name, rows->features, m->net.inputs())});
  // CSV rows are raw values: map them as the training data was. IDX images are scaled by the
  // loader already, as in training.
  if (!idx && !m->labels.transform.offset.empty())
    if (auto ok = worker::apply_transform(m->labels.transform, rows->x); !ok)
      return report(ok.error());
  rows->classes = m->net.classes();
  auto be = std::move(*kernels::make_backend(kernels::backend_kind::cpu));
  float* w = be->alloc(m->params.size());
  be->upload(w, m->params.data(), m->params.size());
  worker::network_runner runner(m->net, *be, 1000);
  const auto labels = runner.predict(w, *rows);
  be->free(w);
  for (auto c : labels) std::printf("%s\n", label_text(m->labels, c).c_str());
  return 0;
}

}  // namespace coach::apps
