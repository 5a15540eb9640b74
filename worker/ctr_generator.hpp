#pragma once
// worker::ctr_generator: a click-through-rate data set in the Criteo layout
// (worker/ctr_data.hpp) drawn from a planted model whose best reachable log loss and AUC are
// known, because no real CTR set can be downloaded here (issue 43; docs/sparse.md).
//
// The planted model. Each row has dense integers v_1..v_D and categorical ids id_1..id_F
// (either may be missing); x_i = ctr_dense_transform(v_i) (log(1 + v), 0 if v <= 0 or missing):
//
//   logit = b + sum_f w_f(id_f) + sum_i u_i (x_i - c_i) + sum_{(f,g) in P} <v_f(id_f), v_g(id_g)>
//   label ~ Bernoulli(sigmoid(logit))
//
// - w_f(id) = weight_scale * (U_f(id) - m_f), U_f(id) uniform in [-1, 1), for the `signal_ids`
//   most frequent ids of field f, and 0 for every other id: the long tail is noise a model must
//   learn to ignore, which is what makes the planted AUC reachable from a finite set. m_f is
//   the mean of U_f over the signal ids weighted as Zipf draws them (rank k: k^-s), so w_f
//   averages 0 over the rows and the base rate stays near its target whatever the seed. A
//   missing id adds 0.
// - u_i = dense_scale * U[-1, 1); c_i = mu_i, about the mean of x_i, so the dense part leaves
//   the base rate near sigmoid(b).
// - P: `pairs` field pairs; pair p joins field 2p mod F and field (2p + 1 + floor(F/2)) mod F
//   (a pair of one field twice is dropped). v_f(id) is a vector of `pair_dim` entries, each
//   vector_scale * (U - m) as w_f (centred the same way, so E<v_f, v_g> = 0), for the signal
//   ids, 0 for the others: the interactions an MLP or a dot product over embeddings must learn.
// Every planted number is a pure function of (seed, field, id) through SplitMix64's mixer
// (kernels/counter_rng.hpp), so the model is never stored and any program can recompute it.
//
// The ids. Field f has vocab_f ids (default: geometric from min_vocab = 10 to max_vocab =
// 10^7 over the fields). A row's rank in field f is Zipf(s) over 1..vocab_f, drawn with
// rejection-inversion (Hörmann & Derflinger 1996, "Rejection-inversion to generate variates
// from monotone discrete distributions"), which needs no table: O(1) memory for any vocab.
// Rank r (0-based) becomes id = perm_f(r), a keyed bijection of [0, vocab_f) (a Feistel network
// with cycle walking), so frequent ids are not small numbers; the cell written is 8 hex digits
// of cell_f(id), a keyed bijection of 32-bit numbers that never yields ctr_missing: opaque as
// Criteo's hashes, and invertible, so id_of_cell recovers the id from a file.
//
// The dense integers: v_i = floor(exp(mu_i + sigma z)) - 1, z ~ N(0, 1), mu_i = 0.5 + (i mod 4),
// sigma = 1.2 (heavy-tailed counts; -1 when exp(.) < 1, as Criteo's I2 has negatives); each is
// missing with probability missing_dense, each categorical with missing_categorical.
//
// Row r's draws come from a SplitMix64 stream keyed by (seed, r): the file is a pure function of
// the options (the normal and Zipf draws go through libm's exp, log and cos: two machines agree
// bitwise where their libm does: the same glibc), written row by row (memory
// O(1) in the rows but for the held-out rows' probabilities: 12 bytes a held-out row, for their
// exact AUC).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"

namespace coach::worker {

/// The generator's parameters; the defaults are the documented set of docs/sparse.md.
struct ctr_generator_options {
  std::uint64_t rows = 1'000'000;
  std::uint64_t seed = 1;
  std::size_t n_dense = 13;
  std::size_t n_fields = 26;
  std::uint64_t min_vocab = 10;          ///< the first field's ids (capped at max_vocab)
  std::uint64_t max_vocab = 10'000'000;  ///< the last field's ids
  std::vector<std::uint64_t> vocab;      ///< per field; empty: geometric min_vocab..max_vocab
  double zipf = 1.1;                     ///< Zipf exponent s of the ranks (> 0)
  std::uint64_t signal_ids = 20;         ///< H: ids per field that carry planted weights
  double test_fraction = 0.1;            ///< the last rows, held out
  std::size_t pairs = 4;                 ///< interacting field pairs
  std::size_t pair_dim = 4;              ///< dimension of the planted pair vectors
  double bias = -1.5;                    ///< b: base rate near 0.26 at the defaults
  double weight_scale = 0.8;             ///< w_f(id) = scale (U - m_f), U in [-1, 1)
  double dense_scale = 0.12;             ///< u_i = scale U, U in [-1, 1)
  double vector_scale = 1.0;             ///< entries of v_f(id) = scale (U - m), U in [-1, 1)
  double missing_dense = 0.1;            ///< probability that an integer cell is empty
  double missing_categorical = 0.03;     ///< probability that a categorical cell is empty
};

/// Checks the options (invalid_argument naming the option): rows >= 2, 0 < test_fraction < 1
/// leaving both parts a row, n_dense + n_fields >= 1, vocabularies in [1, 2^32 - 1), zipf > 0,
/// probabilities in [0, 1), scales >= 0, finite bias.
result<void> check_ctr_options(const ctr_generator_options& opt);

/// The vocabulary of each field under `opt` (opt.vocab, or the geometric spread).
std::vector<std::uint64_t> ctr_vocabularies(const ctr_generator_options& opt);

/// A keyed bijection of [0, n): a 4-round Feistel network on the smallest even number of bits
/// that holds n, walked until it lands in [0, n) (cycle walking: at most 4 steps on average).
class keyed_permutation {
 public:
  /// REQUIRES: 1 <= n <= 2^32.
  keyed_permutation(std::uint64_t n, std::uint64_t key);
  std::uint64_t forward(std::uint64_t x) const noexcept;  ///< REQUIRES: x < n
  std::uint64_t inverse(std::uint64_t y) const noexcept;  ///< REQUIRES: y < n
  std::uint64_t size() const noexcept { return n_; }

 private:
  std::uint64_t round_function(std::uint64_t half, int round) const noexcept;
  std::uint64_t n_;
  int half_bits_;
  std::uint64_t mask_;
  std::array<std::uint64_t, 4> keys_;
};

/// Zipf(s) over the ranks 1..n by rejection-inversion (Hörmann & Derflinger 1996): P(k) is
/// proportional to k^-s; each draw takes a few uniforms (1.0-1.1 on average) and no table.
class zipf_sampler {
 public:
  /// REQUIRES: n >= 1, s > 0.
  zipf_sampler(std::uint64_t n, double s);

  /// A rank in [1, n], drawing uniforms in [0, 1) from `uniform` until one is accepted.
  template <class Uniform>
  std::uint64_t sample(Uniform&& uniform) const {
    for (;;) {
      std::uint64_t k = 0;
      if (try_sample(uniform(), k)) return k;
    }
  }

  /// P(rank k) = k^-s / sum_{j<=n} j^-s, summed directly: O(n), for tests.
  double probability(std::uint64_t k) const;

 private:
  bool try_sample(double u, std::uint64_t& k) const noexcept;
  double h(double x) const noexcept;           // x^-s
  double h_integral(double x) const noexcept;  // the integral of h from 1 to x
  double h_integral_inverse(double x) const noexcept;
  std::uint64_t n_;
  double s_;
  double h_integral_x1_;  // H(1.5) - 1
  double h_integral_n_;   // H(n + 0.5)
  double squeeze_;        // accept k at once when k - x <= squeeze_
};

/// The planted model of the options: every weight and id mapping, recomputed on demand.
class planted_ctr_model {
 public:
  /// REQUIRES: check_ctr_options(opt) passed.
  explicit planted_ctr_model(const ctr_generator_options& opt);

  std::size_t n_dense() const noexcept { return n_dense_; }
  std::size_t n_fields() const noexcept { return vocab_.size(); }
  std::uint64_t vocab(std::size_t f) const { return vocab_[f]; }
  /// The ids of field f that carry weights: min(signal_ids, vocab_f).
  std::uint64_t signal_ids(std::size_t f) const { return std::min(signal_ids_, vocab_[f]); }
  double bias() const noexcept { return bias_; }
  const std::vector<std::pair<std::size_t, std::size_t>>& pairs() const noexcept { return pairs_; }
  std::size_t pair_dim() const noexcept { return pair_dim_; }

  /// The id of 0-based rank r of field f, and back.
  std::uint64_t id_of_rank(std::size_t f, std::uint64_t rank) const;
  std::uint64_t rank_of_id(std::size_t f, std::uint64_t id) const;
  /// The 32-bit categorical value written for id of field f (never ctr_missing), and back:
  /// nothing when the value is no id of field f.
  std::uint32_t cell_of_id(std::size_t f, std::uint64_t id) const;
  std::optional<std::uint64_t> id_of_cell(std::size_t f, std::uint32_t cell) const;

  /// w_f(id); 0 for an id past the signal ids.
  double weight(std::size_t f, std::uint64_t id) const;
  /// Entry j of v_f(id); 0 for an id past the signal ids. REQUIRES: j < pair_dim().
  double vector_entry(std::size_t f, std::uint64_t id, std::size_t j) const;
  double dense_weight(std::size_t i) const;  ///< u_i
  double dense_center(std::size_t i) const;  ///< c_i = mu_i
  double dense_mu(std::size_t i) const;      ///< mu_i of the integers' distribution

  /// The logit of a row given its transformed dense features x (n_dense) and its ids
  /// (n_fields; nothing for a missing cell).
  double logit(const float* x, const std::optional<std::uint64_t>* ids) const;

 private:
  std::uint64_t hash(std::uint64_t tag, std::uint64_t a, std::uint64_t b) const noexcept;
  double symmetric(std::uint64_t tag, std::uint64_t a, std::uint64_t b) const noexcept;

  std::uint64_t seed_key_;
  std::size_t n_dense_;
  std::vector<std::uint64_t> vocab_;
  std::uint64_t signal_ids_;
  double bias_, weight_scale_, dense_scale_, vector_scale_;
  std::size_t pair_dim_;
  std::vector<std::pair<std::size_t, std::size_t>> pairs_;
  std::vector<keyed_permutation> rank_perm_;
  std::vector<keyed_permutation> cell_perm_;
  std::vector<double> weight_mean_;  // m_f
  std::vector<double> vector_mean_;  // m_f,j: fields x pair_dim
};

/// What a generation wrote and what the planted model scores on it.
struct ctr_summary {
  std::uint64_t rows = 0;
  std::uint64_t train_rows = 0;  ///< the first rows
  std::uint64_t test_rows = 0;   ///< the last rows, held out
  double base_rate = 0;          ///< mean label, all rows
  double train_base_rate = 0;
  double test_base_rate = 0;
  /// The planted model's scores from the true probabilities: the best any model can reach.
  double test_auc = 0;  ///< exact
  double test_log_loss = 0;
  double train_auc = 0;  ///< binned (binary_metrics.hpp binned_auc, 2^20 bins)
  double train_log_loss = 0;
};

/// Called every 65536 rows and at the end with (rows written, rows in all).
using ctr_progress = std::function<void(std::uint64_t, std::uint64_t)>;

/// Writes the rows of `opt` to `path` (gzipped when it ends in ".gz", level 1) and the JSON
/// summary to path + ".json" (the options, the vocabularies, the base rates, the planted
/// model's AUC and log loss on the held-out and the training rows). Errors: those of
/// check_ctr_options, io_error naming the file that cannot be written.
result<ctr_summary> write_ctr(const ctr_generator_options& opt, const std::string& path,
                              const ctr_progress& progress = {});

/// The JSON summary that write_ctr writes beside the data (pretty-printed, ending in '\n').
std::string ctr_summary_json(const ctr_generator_options& opt, const ctr_summary& s);

}  // namespace coach::worker
