#include "worker/ctr_generator.hpp"

#include <zlib.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/enforce.hpp"
#include "kernels/counter_rng.hpp"
#include "worker/binary_metrics.hpp"
#include "worker/ctr_data.hpp"

namespace coach::worker {
namespace {

using kernels::counter_rng::mix;

// Tags that keep the planted numbers of one kind apart from those of another.
constexpr std::uint64_t tag_weight = 1;
constexpr std::uint64_t tag_vector = 2;
constexpr std::uint64_t tag_dense = 3;
constexpr std::uint64_t tag_rank_perm = 4;
constexpr std::uint64_t tag_cell_perm = 5;
constexpr std::uint64_t tag_row = 6;

constexpr double dense_sigma = 1.2;

/// A uniform double in [0, 1) from the top 53 bits.
double unit(std::uint64_t bits) noexcept {
  return double(bits >> 11) * 0x1.0p-53;
}

/// The draws of one row: SplitMix64's stream from the row's key.
class row_stream {
 public:
  explicit row_stream(std::uint64_t key) : key_(key) {}
  std::uint64_t bits() noexcept { return mix(key_ + counter_++); }
  double uniform() noexcept { return unit(bits()); }
  /// N(0, 1) by Box-Muller (one of the pair; the other is dropped).
  double normal() noexcept {
    const double u1 = (double(bits() >> 11) + 0.5) * 0x1.0p-53;  // (0, 1): its log is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t key_;
  std::uint64_t counter_ = 0;
};

/// Where the rows go: a plain file, or gzip (level 1: the generator outruns level 6 fourfold).
class text_sink {
 public:
  text_sink() = default;
  text_sink(const text_sink&) = delete;
  text_sink& operator=(const text_sink&) = delete;
  ~text_sink() { close(); }

  result<void> open(const std::string& path) {
    path_ = path;
    gzip_ = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
    if (gzip_) {
      gz_ = gzopen(path.c_str(), "wb1");
      if (gz_ != nullptr) gzbuffer(gz_, 1u << 20);
    } else {
      file_ = std::fopen(path.c_str(), "wb");
    }
    if (gz_ == nullptr && file_ == nullptr) {
      return fail(errc::io_error, "{}: cannot open for writing", path);
    }
    return {};
  }

  result<void> write(const std::string& text) {
    if (text.empty()) return {};
    const bool ok = gzip_ ? gzwrite(gz_, text.data(), unsigned(text.size())) == int(text.size())
                          : std::fwrite(text.data(), 1, text.size(), file_) == text.size();
    if (!ok) return fail(errc::io_error, "{}: write failed (disk full?)", path_);
    return {};
  }

  result<void> finish() {
    if (!close()) return fail(errc::io_error, "{}: write failed on close (disk full?)", path_);
    return {};
  }

 private:
  bool close() {
    bool ok = true;
    if (gz_ != nullptr) ok = gzclose(gz_) == Z_OK;
    if (file_ != nullptr) ok = std::fclose(file_) == 0;
    gz_ = nullptr;
    file_ = nullptr;
    return ok;
  }

  std::string path_;
  bool gzip_ = false;
  gzFile gz_ = nullptr;
  std::FILE* file_ = nullptr;
};

void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

void append_hex8(std::string& out, std::uint32_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  char buf[8];
  for (int i = 7; i >= 0; --i, v >>= 4) buf[i] = digits[v & 15];
  out.append(buf, 8);
}

double sigmoid(double z) noexcept {
  return 1.0 / (1.0 + std::exp(-z));
}

}  // namespace

// --- options ----------------------------------------------------------------------------------

result<void> check_ctr_options(const ctr_generator_options& o) {
  if (o.rows < 2) return fail(errc::invalid_argument, "rows must be >= 2 (got {})", o.rows);
  if (!(o.test_fraction > 0 && o.test_fraction < 1)) {
    return fail(errc::invalid_argument, "test_fraction must lie in (0, 1) (got {})",
                o.test_fraction);
  }
  if (o.n_dense + o.n_fields == 0) {
    return fail(errc::invalid_argument, "a row needs dense or categorical columns (both are 0)");
  }
  if (o.n_dense > 1000 || o.n_fields > 1000) {
    return fail(errc::invalid_argument, "at most 1000 dense and 1000 categorical columns");
  }
  constexpr std::uint64_t most = 0xFFFFFFFFull;  // ids must fit the 32-bit cells bar one
  if (o.vocab.empty()) {
    if (o.min_vocab < 1 || o.max_vocab < 1 || o.max_vocab >= most || o.min_vocab >= most) {
      return fail(errc::invalid_argument,
                  "min_vocab and max_vocab must lie in [1, {}) (got {}, {})", most, o.min_vocab,
                  o.max_vocab);
    }
  } else {
    if (o.vocab.size() != o.n_fields) {
      return fail(errc::invalid_argument, "vocab lists {} fields, expected {}", o.vocab.size(),
                  o.n_fields);
    }
    for (std::size_t f = 0; f < o.vocab.size(); ++f) {
      if (o.vocab[f] < 1 || o.vocab[f] >= most) {
        return fail(errc::invalid_argument, "vocab of field {} must lie in [1, {}) (got {})", f,
                    most, o.vocab[f]);
      }
    }
  }
  if (!(o.zipf > 0 && o.zipf <= 10)) {
    return fail(errc::invalid_argument, "zipf exponent must lie in (0, 10] (got {})", o.zipf);
  }
  if (o.pair_dim < 1 || o.pair_dim > 64) {
    return fail(errc::invalid_argument, "pair_dim must lie in [1, 64] (got {})", o.pair_dim);
  }
  for (const auto& [name, p] : {std::pair{"missing_dense", o.missing_dense},
                                std::pair{"missing_categorical", o.missing_categorical}}) {
    if (!(p >= 0 && p < 1)) {
      return fail(errc::invalid_argument, "{} must lie in [0, 1) (got {})", name, p);
    }
  }
  for (const auto& [name, v] :
       {std::pair{"weight_scale", o.weight_scale}, std::pair{"dense_scale", o.dense_scale},
        std::pair{"vector_scale", o.vector_scale}}) {
    if (!(v >= 0 && v <= 100)) {
      return fail(errc::invalid_argument, "{} must lie in [0, 100] (got {})", name, v);
    }
  }
  if (!std::isfinite(o.bias) || std::abs(o.bias) > 100) {
    return fail(errc::invalid_argument, "bias must be finite, |bias| <= 100 (got {})", o.bias);
  }
  return {};
}

std::vector<std::uint64_t> ctr_vocabularies(const ctr_generator_options& o) {
  if (!o.vocab.empty()) return o.vocab;
  const double lo = double(std::min(o.min_vocab, o.max_vocab));
  const double hi = double(o.max_vocab);
  std::vector<std::uint64_t> v(o.n_fields);
  for (std::size_t f = 0; f < o.n_fields; ++f) {
    const double t = o.n_fields == 1 ? 1.0 : double(f) / double(o.n_fields - 1);
    v[f] = std::uint64_t(std::llround(lo * std::pow(hi / lo, t)));
  }
  return v;
}

// --- keyed_permutation ------------------------------------------------------------------------

keyed_permutation::keyed_permutation(std::uint64_t n, std::uint64_t key) : n_(n) {
  COACH_ENFORCE(n >= 1 && n <= (std::uint64_t{1} << 32), "keyed_permutation: n out of range");
  int bits = 0;
  while (bits < 64 && (std::uint64_t{1} << bits) < n) ++bits;
  half_bits_ = std::max(1, (bits + 1) / 2);
  mask_ = (std::uint64_t{1} << half_bits_) - 1;
  for (int i = 0; i < 4; ++i) keys_[std::size_t(i)] = mix(key ^ mix(std::uint64_t(i)));
}

std::uint64_t keyed_permutation::round_function(std::uint64_t half, int round) const noexcept {
  return mix(keys_[std::size_t(round)] ^ half) & mask_;
}

std::uint64_t keyed_permutation::forward(std::uint64_t x) const noexcept {
  do {
    std::uint64_t l = x >> half_bits_, r = x & mask_;
    for (int i = 0; i < 4; ++i) {
      const std::uint64_t t = l ^ round_function(r, i);
      l = r;
      r = t;
    }
    x = (l << half_bits_) | r;
  } while (x >= n_);
  return x;
}

std::uint64_t keyed_permutation::inverse(std::uint64_t y) const noexcept {
  do {
    std::uint64_t l = y >> half_bits_, r = y & mask_;
    for (int i = 3; i >= 0; --i) {
      const std::uint64_t t = r ^ round_function(l, i);
      r = l;
      l = t;
    }
    y = (l << half_bits_) | r;
  } while (y >= n_);
  return y;
}

// --- zipf_sampler -----------------------------------------------------------------------------
// Rejection-inversion: h(x) = x^-s is decreasing, so the area under it from 0.5 to n + 0.5 can
// be cut into the pieces [k - 0.5, k + 0.5]; a uniform point of the area is inverted through
// H (the integral of h) to x, rounded to k, and accepted when it falls under the histogram of
// P(k) ~ h(k) laid inside the piece of k. The squeeze accepts most points without evaluating H.

namespace {
/// log1p(t) / t, continuous at 0.
double log1p_over(double t) noexcept {
  return std::abs(t) > 1e-8 ? std::log1p(t) / t : 1.0 - t * (0.5 - t * (1.0 / 3.0 - 0.25 * t));
}
/// expm1(t) / t, continuous at 0.
double expm1_over(double t) noexcept {
  return std::abs(t) > 1e-8 ? std::expm1(t) / t
                            : 1.0 + t * 0.5 * (1.0 + t / 3.0 * (1.0 + 0.25 * t));
}
}  // namespace

zipf_sampler::zipf_sampler(std::uint64_t n, double s) : n_(n), s_(s) {
  COACH_ENFORCE(n >= 1 && s > 0, "zipf_sampler needs n >= 1 and s > 0");
  h_integral_x1_ = h_integral(1.5) - 1.0;
  h_integral_n_ = h_integral(double(n) + 0.5);
  squeeze_ = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
}

double zipf_sampler::h(double x) const noexcept {
  return std::exp(-s_ * std::log(x));
}

double zipf_sampler::h_integral(double x) const noexcept {
  const double log_x = std::log(x);
  return expm1_over((1.0 - s_) * log_x) * log_x;  // (x^(1-s) - 1) / (1 - s); log x at s = 1
}

double zipf_sampler::h_integral_inverse(double x) const noexcept {
  double t = x * (1.0 - s_);
  if (t < -1.0) t = -1.0;  // rounding at the lower end
  return std::exp(log1p_over(t) * x);
}

bool zipf_sampler::try_sample(double u, std::uint64_t& k) const noexcept {
  const double area = h_integral_n_ + u * (h_integral_x1_ - h_integral_n_);
  const double x = h_integral_inverse(area);
  double rounded = std::floor(x + 0.5);
  if (rounded < 1.0) rounded = 1.0;
  if (rounded > double(n_)) rounded = double(n_);
  k = std::uint64_t(rounded);
  return rounded - x <= squeeze_ || area >= h_integral(rounded + 0.5) - h(rounded);
}

double zipf_sampler::probability(std::uint64_t k) const {
  double total = 0;
  for (std::uint64_t j = n_; j >= 1; --j) total += h(double(j));  // small terms first
  return h(double(k)) / total;
}

// --- planted_ctr_model ------------------------------------------------------------------------

planted_ctr_model::planted_ctr_model(const ctr_generator_options& o)
    : seed_key_(mix(o.seed ^ 0x43545244617461ull)),  // "CTRData"
      n_dense_(o.n_dense),
      vocab_(ctr_vocabularies(o)),
      signal_ids_(o.signal_ids),
      bias_(o.bias),
      weight_scale_(o.weight_scale),
      dense_scale_(o.dense_scale),
      vector_scale_(o.vector_scale),
      pair_dim_(o.pair_dim) {
  const std::size_t fields = vocab_.size();
  for (std::size_t p = 0; p < o.pairs && fields >= 2; ++p) {
    const std::size_t f = (2 * p) % fields;
    const std::size_t g = (2 * p + 1 + fields / 2) % fields;
    if (f != g) pairs_.emplace_back(f, g);
  }
  for (std::size_t f = 0; f < fields; ++f) {
    rank_perm_.emplace_back(vocab_[f], hash(tag_rank_perm, f, 0));
    cell_perm_.emplace_back(std::uint64_t{0xFFFFFFFF}, hash(tag_cell_perm, f, 0));
  }
  // The centres: the means of the raw draws over the signal ids, weighted as Zipf draws them
  // (k^-s for rank k; the tail's ids weigh 0), so that w_f and v_f average 0 over the rows.
  weight_mean_.assign(fields, 0.0);
  vector_mean_.assign(fields * pair_dim_, 0.0);
  for (std::size_t f = 0; f < fields; ++f) {
    double total = 0;
    for (std::uint64_t k = 0; k < signal_ids(f); ++k) {
      const double p = std::pow(double(k + 1), -o.zipf);
      const std::uint64_t id = id_of_rank(f, k);
      total += p;
      weight_mean_[f] += p * symmetric(tag_weight, f, id);
      for (std::size_t j = 0; j < pair_dim_; ++j) {
        vector_mean_[f * pair_dim_ + j] += p * symmetric(tag_vector, f, id * pair_dim_ + j);
      }
    }
    if (total == 0) continue;
    weight_mean_[f] /= total;
    for (std::size_t j = 0; j < pair_dim_; ++j) vector_mean_[f * pair_dim_ + j] /= total;
  }
}

std::uint64_t planted_ctr_model::hash(std::uint64_t tag, std::uint64_t a,
                                      std::uint64_t b) const noexcept {
  return mix(mix(mix(seed_key_ ^ tag) + a) + b);
}

double planted_ctr_model::symmetric(std::uint64_t tag, std::uint64_t a,
                                    std::uint64_t b) const noexcept {
  return 2.0 * unit(hash(tag, a, b)) - 1.0;
}

std::uint64_t planted_ctr_model::id_of_rank(std::size_t f, std::uint64_t rank) const {
  return rank_perm_[f].forward(rank);
}
std::uint64_t planted_ctr_model::rank_of_id(std::size_t f, std::uint64_t id) const {
  return rank_perm_[f].inverse(id);
}
std::uint32_t planted_ctr_model::cell_of_id(std::size_t f, std::uint64_t id) const {
  return std::uint32_t(cell_perm_[f].forward(id));
}
std::optional<std::uint64_t> planted_ctr_model::id_of_cell(std::size_t f,
                                                           std::uint32_t cell) const {
  if (cell == ctr_missing) return std::nullopt;
  const std::uint64_t id = cell_perm_[f].inverse(cell);
  if (id >= vocab_[f]) return std::nullopt;
  return id;
}

double planted_ctr_model::weight(std::size_t f, std::uint64_t id) const {
  if (rank_of_id(f, id) >= signal_ids(f)) return 0.0;
  return weight_scale_ * (symmetric(tag_weight, f, id) - weight_mean_[f]);
}

double planted_ctr_model::vector_entry(std::size_t f, std::uint64_t id, std::size_t j) const {
  if (rank_of_id(f, id) >= signal_ids(f)) return 0.0;
  return vector_scale_ *
         (symmetric(tag_vector, f, id * pair_dim_ + j) - vector_mean_[f * pair_dim_ + j]);
}

double planted_ctr_model::dense_weight(std::size_t i) const {
  return dense_scale_ * symmetric(tag_dense, i, 0);
}
double planted_ctr_model::dense_mu(std::size_t i) const {
  return 0.5 + double(i % 4);
}
double planted_ctr_model::dense_center(std::size_t i) const {
  return dense_mu(i);
}

double planted_ctr_model::logit(const float* x, const std::optional<std::uint64_t>* ids) const {
  double z = bias_;
  for (std::size_t f = 0; f < vocab_.size(); ++f) {
    if (ids[f]) z += weight(f, *ids[f]);
  }
  for (std::size_t i = 0; i < n_dense_; ++i) {
    z += dense_weight(i) * (double(x[i]) - dense_center(i));
  }
  for (const auto& [f, g] : pairs_) {
    if (!ids[f] || !ids[g]) continue;
    for (std::size_t j = 0; j < pair_dim_; ++j) {
      z += vector_entry(f, *ids[f], j) * vector_entry(g, *ids[g], j);
    }
  }
  return z;
}

// --- the writer -------------------------------------------------------------------------------

result<ctr_summary> write_ctr(const ctr_generator_options& opt, const std::string& path,
                              const ctr_progress& progress) {
  if (auto ok = check_ctr_options(opt); !ok) return std::unexpected(std::move(ok.error()));
  const planted_ctr_model model(opt);
  std::vector<zipf_sampler> zipf;
  for (std::size_t f = 0; f < model.n_fields(); ++f) zipf.emplace_back(model.vocab(f), opt.zipf);

  ctr_summary s;
  s.rows = opt.rows;
  s.test_rows = std::clamp<std::uint64_t>(
      std::uint64_t(std::llround(double(opt.rows) * opt.test_fraction)), 1, opt.rows - 1);
  s.train_rows = opt.rows - s.test_rows;

  text_sink sink;
  if (auto ok = sink.open(path); !ok) return std::unexpected(std::move(ok.error()));
  std::string buf;
  buf.reserve((std::size_t{1} << 20) + 16384);
  std::vector<float> x(opt.n_dense);
  std::vector<std::optional<std::uint64_t>> ids(opt.n_fields);
  std::vector<std::int64_t> ints(opt.n_dense);
  std::vector<bool> int_missing(opt.n_dense);
  std::vector<double> test_p;
  std::vector<float> test_y;
  test_p.reserve(s.test_rows);
  test_y.reserve(s.test_rows);
  binned_auc train_auc;
  double train_loss = 0, positives_train = 0, positives_test = 0;

  const std::uint64_t row_base = mix(mix(opt.seed ^ 0x43545244617461ull) ^ tag_row);
  for (std::uint64_t r = 0; r < opt.rows; ++r) {
    row_stream draw(mix(row_base + r));
    for (std::size_t i = 0; i < opt.n_dense; ++i) {
      int_missing[i] = draw.uniform() < opt.missing_dense;
      const double z = draw.normal();  // drawn even when missing: the row's draws stay aligned
      ints[i] = std::int64_t(std::floor(std::exp(model.dense_mu(i) + dense_sigma * z))) - 1;
      x[i] = int_missing[i] ? 0.0f : ctr_dense_transform(ints[i]);
    }
    for (std::size_t f = 0; f < opt.n_fields; ++f) {
      const bool missing = draw.uniform() < opt.missing_categorical;
      const std::uint64_t rank = zipf[f].sample([&draw] { return draw.uniform(); }) - 1;
      ids[f] = missing ? std::nullopt : std::optional(model.id_of_rank(f, rank));
    }
    const double p = sigmoid(model.logit(x.data(), ids.data()));
    const bool label = draw.uniform() < p;

    buf.push_back(label ? '1' : '0');
    for (std::size_t i = 0; i < opt.n_dense; ++i) {
      buf.push_back('\t');
      if (!int_missing[i]) append_int(buf, ints[i]);
    }
    for (std::size_t f = 0; f < opt.n_fields; ++f) {
      buf.push_back('\t');
      if (ids[f]) append_hex8(buf, model.cell_of_id(f, *ids[f]));
    }
    buf.push_back('\n');
    if (buf.size() >= (std::size_t{1} << 20)) {
      if (auto ok = sink.write(buf); !ok) return std::unexpected(std::move(ok.error()));
      buf.clear();
    }

    if (r < s.train_rows) {
      train_auc.add(p, label);
      train_loss += binary_log_loss_term(p, label);
      positives_train += label ? 1 : 0;
    } else {
      test_p.push_back(p);
      test_y.push_back(label ? 1.0f : 0.0f);
      positives_test += label ? 1 : 0;
    }
    if (progress && (r + 1) % 65536 == 0) progress(r + 1, opt.rows);
  }
  if (auto ok = sink.write(buf); !ok) return std::unexpected(std::move(ok.error()));
  if (auto ok = sink.finish(); !ok) return std::unexpected(std::move(ok.error()));
  if (progress) progress(opt.rows, opt.rows);

  s.base_rate = (positives_train + positives_test) / double(opt.rows);
  s.train_base_rate = positives_train / double(s.train_rows);
  s.test_base_rate = positives_test / double(s.test_rows);
  s.train_log_loss = train_loss / double(s.train_rows);
  auto test_loss = binary_log_loss(std::span<const double>(test_p), test_y);
  if (!test_loss) return std::unexpected(std::move(test_loss.error()));
  s.test_log_loss = *test_loss;
  // With one class only (a tiny set) the AUC is undefined: NaN, written as null in the JSON.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  s.test_auc = binary_auc(std::span<const double>(test_p), test_y).value_or(nan);
  s.train_auc = train_auc.auc().value_or(nan);

  const std::string json_path = path + ".json";
  std::FILE* f = std::fopen(json_path.c_str(), "wb");
  if (f == nullptr) return fail(errc::io_error, "{}: cannot open for writing", json_path);
  const std::string json = ctr_summary_json(opt, s);
  const bool wrote = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  if (std::fclose(f) != 0 || !wrote) return fail(errc::io_error, "{}: write failed", json_path);
  return s;
}

std::string ctr_summary_json(const ctr_generator_options& opt, const ctr_summary& s) {
  const planted_ctr_model model(opt);
  using json = nlohmann::ordered_json;
  const auto number = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json pairs = json::array();
  for (const auto& [f, g] : model.pairs()) pairs.push_back({f, g});
  json j;
  j["format"] = "criteo-tsv";
  j["rows"] = s.rows;
  j["train_rows"] = s.train_rows;
  j["test_rows"] = s.test_rows;
  j["parameters"] = {
      {"seed", opt.seed},
      {"n_dense", opt.n_dense},
      {"n_fields", opt.n_fields},
      {"vocab", ctr_vocabularies(opt)},
      {"zipf", opt.zipf},
      {"signal_ids", opt.signal_ids},
      {"test_fraction", opt.test_fraction},
      {"pairs", pairs},
      {"pair_dim", opt.pair_dim},
      {"bias", opt.bias},
      {"weight_scale", opt.weight_scale},
      {"dense_scale", opt.dense_scale},
      {"vector_scale", opt.vector_scale},
      {"missing_dense", opt.missing_dense},
      {"missing_categorical", opt.missing_categorical},
  };
  j["base_rate"] = {{"all", s.base_rate}, {"train", s.train_base_rate}, {"test", s.test_base_rate}};
  j["planted"] = {
      {"test",
       {{"auc", number(s.test_auc)}, {"log_loss", s.test_log_loss}, {"auc_method", "exact"}}},
      {"train",
       {{"auc", number(s.train_auc)},
        {"log_loss", s.train_log_loss},
        {"auc_method", "binned, 2^20 bins of the probability"}}},
  };
  return j.dump(2) + "\n";
}

}  // namespace coach::worker
