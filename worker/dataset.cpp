// worker/dataset.cpp: the public entry points of dataset.hpp. Each format has its reader
// (idx_reader.cpp, csv_reader.cpp, npy_reader.cpp, dataset_ctr.cpp); what they share after reading,
// the split and the normalization, is in dataset_split.cpp.
#include "worker/dataset.hpp"

#include <exception>
#include <new>

#include "worker/csv_reader.hpp"
#include "worker/dataset_ctr.hpp"
#include "worker/dataset_split.hpp"
#include "worker/idx_reader.hpp"
#include "worker/npy_reader.hpp"

namespace coach::worker {

result<void> apply_transform(const feature_transform& t, std::span<float> x) {
  if (t.offset.size() != t.scale.size()) {
    return fail(errc::invalid_argument, "feature transform has {} offsets but {} scales",
                t.offset.size(), t.scale.size());
  }
  if (t.offset.empty()) {
    if (t.kind == normalization::none) return {};
    return fail(errc::invalid_argument, "feature transform {} has no features", to_string(t.kind));
  }
  if (x.size() % t.offset.size() != 0) {
    return fail(errc::invalid_argument,
                "{} values are not whole rows of the transform's {} features", x.size(),
                t.offset.size());
  }
  detail::apply_in_place(t, x);
  return {};
}

result<dataset> load_idx(const std::string& images_path, const std::string& labels_path) {
  try {
    return detail::load_idx_limited(images_path, labels_path, 0, nullptr, 255.0f);
  } catch (const std::bad_alloc&) {
    return fail(errc::resource_exhausted, "{}: out of memory while loading", images_path);
  } catch (const std::exception& e) {
    return fail(errc::internal, "{}: unexpected failure while loading: {}", images_path, e.what());
  }
}

result<dataset_pair> load_dataset(const dataset_config& cfg, std::uint64_t seed) {
  if (cfg.path.empty()) return fail(errc::invalid_argument, "data set path is empty");
  try {
    switch (cfg.format) {
      case dataset_format::idx:
        return detail::load_idx_dir(cfg);
      case dataset_format::csv:
        return detail::load_csv(cfg, seed);
      case dataset_format::npy:
        return detail::load_npy_dir(cfg, seed);
      case dataset_format::ctr:
        return detail::load_ctr_split(cfg);
    }
    return fail(errc::invalid_argument, "{}: unknown data set format {}", cfg.path,
                int(cfg.format));
  } catch (const std::bad_alloc&) {
    return fail(errc::resource_exhausted, "{}: out of memory while loading", cfg.path);
  } catch (const std::exception& e) {
    return fail(errc::internal, "{}: unexpected failure while loading: {}", cfg.path, e.what());
  }
}

std::string_view to_string(dataset_format format) noexcept {
  switch (format) {
    case dataset_format::idx:
      return "idx";
    case dataset_format::csv:
      return "csv";
    case dataset_format::npy:
      return "npy";
    case dataset_format::ctr:
      return "ctr";
  }
  return "unknown";
}

result<dataset_format> parse_dataset_format(std::string_view text) {
  if (text == "idx") return dataset_format::idx;
  if (text == "csv") return dataset_format::csv;
  if (text == "npy") return dataset_format::npy;
  if (text == "ctr") return dataset_format::ctr;
  return fail(errc::invalid_argument,
              "unknown data set format '{}' (expected idx, csv, npy or ctr)",
              detail::printable(text));
}

std::string_view to_string(normalization kind) noexcept {
  switch (kind) {
    case normalization::none:
      return "none";
    case normalization::max:
      return "max";
    case normalization::standardize:
      return "standardize";
  }
  return "unknown";
}

result<normalization> parse_normalization(std::string_view text) {
  if (text == "none") return normalization::none;
  if (text == "max") return normalization::max;
  if (text == "standardize") return normalization::standardize;
  return fail(errc::invalid_argument,
              "unknown normalization '{}' (expected none, max or standardize)",
              detail::printable(text));
}

result<char> parse_delimiter(std::string_view text) {
  if (text == "tab" || text == "\\t") return '\t';
  if (text == "space") return ' ';
  const auto refuse = [&] {
    return fail(errc::invalid_argument,
                "must be one character such as ',', ';', '|' or tab (not a letter, digit, '.', "
                "'+', '-', a quote or a control character), got '{}'",
                detail::printable(text));
  };
  if (text.size() != 1) return refuse();
  const char c = text[0];
  const auto u = static_cast<unsigned char>(c);
  const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  if (c == '\t' || c == ' ') return c;
  if (u < 0x20 || u >= 0x7f || alnum || c == '.' || c == '+' || c == '-' || c == '"' || c == '\'') {
    return refuse();
  }
  return c;
}

result<dataset> load_idx_images_only(const std::string& images_path) {
  return detail::idx_images_alone(images_path);
}

}  // namespace coach::worker
