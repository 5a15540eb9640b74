#pragma once
// ps::shard: the state and logic of one parameter-server shard, without actors or sockets.
//
// A shard owns some key ranges of the flat parameter vector (from the shard map), their optimizer
// state, and aggregates the gradients workers push. In BSP a step completes when every member of
// the step has pushed; the shard then sums the contributions in rank order (so the result does
// not depend on arrival order), scales by 1 / total samples and applies the optimizer in place.
// Because the update is elementwise, the parameters after any step are bitwise the same however
// the vector is cut into shards.
//
// A completed step is applied piece by piece (pieces of at most shard_options::piece_floats
// floats, never crossing a range boundary): each piece's gradients are summed and its parameters
// updated before the next piece is touched, and a caller may be told of each finished piece, so
// that an actor sends piece i while piece i+1 is being updated. Summation order and the update
// of each element do not depend on the pieces, so the result is bitwise that of a one-shot apply.
//
// Elastic (docs/design.md, "Elastic jobs"): the membership of each step comes from the job's
// configurations (configure); a push made under a configuration the shard has not seen yet is
// held until that configuration arrives. A contribution received from a rank that a later
// configuration removes from the open step (the worker died) is still applied: every gradient a
// shard accepted is applied exactly once. Slices move between shards at step boundaries with
// release (the source) and adopt (the destination), values and optimizer state together. The
// workers go on at the boundary without waiting for the slices: a push of a step whose
// configuration gives this shard other ranges than it owns (a transfer it awaits has not come,
// or a release it owes is not made) is held too, and taken by resume() once the shard owns them.
//
// The learning rate of a step follows the optimizer's schedule at the epoch progress before the
// step (ps/optimizer.hpp): the shard counts the samples applied, every step's total, which every
// shard sees alike, and a transfer carries the count with the slices. Keys in the optimizer's
// statistic ranges are not trained: the step's summed values, scaled by 1 / samples, are folded
// into them with the range's momentum (w = (1 - m) w + m (g / samples), the same float
// operations for every element), and their optimizer state stays zero. A piece is split at the
// statistic ranges' edges, so an optimizer call may start anywhere; the backend's optimizer loops
// round every element alike wherever a call starts (kernels/cpu/cpu_backend.cpp), so the result
// does not depend on how the vector is cut either (tests/unit/spec/optimizer_extras_test.cpp).
//
// Not thread-safe: its actor calls it from one message handler at a time.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "common/buffer_pool.hpp"
#include "common/error.hpp"
#include "kernels/backend.hpp"
#include "ps/adascale.hpp"
#include "ps/job_config.hpp"
#include "ps/optimizer.hpp"
#include "ps/shard_map.hpp"
#include "ps/shard_rows.hpp"

namespace coach::ps {

/// A worker's gradients for rows of one sparse table, those this shard holds: the sums over the
/// worker's samples, `ids.size() * dim` floats, each row once.
struct row_part {
  std::uint32_t table = 0;
  std::span<const std::uint64_t> ids;
  std::span<const float> grads;
};

/// One worker's gradient for one step, restricted to a shard's ranges.
struct contribution {
  std::uint32_t rank = 0;
  std::uint64_t samples = 0;  ///< samples behind the gradient; 0 = no data this step (parts empty)
  double loss_sum = 0;        ///< sum of the per-sample losses (reporting only)
  /// Gradient of the SUM of per-sample losses, one span per range of the shard, in the shard's
  /// range order, each of that range's size. Empty when samples == 0.
  std::vector<std::span<const float>> parts;
  /// Row gradients of the sparse tables (ps/shard_rows.hpp), for the rows this shard holds;
  /// empty when samples == 0 or the step touched none of them.
  std::vector<row_part> rows;
  std::shared_ptr<const void> keep_alive;  ///< owns the memory behind parts and rows
  /// lr_scaling adascale: the totals over every key of the step that produced the version this
  /// gradient was computed from (the pusher added up every shard's step_stats()).
  std::optional<grad_stats> stats;
};

/// Pieces are cut at multiples of this many floats from the start of a range. Why: the cpu
/// backend's optimizer updates work in blocks of 1024 floats from the start of each call, and
/// its Adam is not bitwise position-independent (Eigen's fast-math packet square root differs
/// from the scalar one used at a call's unaligned head and tail), so an update cut anywhere else
/// would change the last bit of some parameters. Cut at multiples of 1024, every block sees
/// exactly the call a one-shot apply makes.
inline constexpr std::size_t piece_multiple = 1024;

/// Options of a shard.
struct shard_options {
  /// Most floats applied as one piece of a step (a piece never crosses a range boundary).
  /// Must be a positive multiple of piece_multiple. Default 256 Ki floats (1 MiB): each piece
  /// is one more params message, and on the 2-core machines measured (docs/performance.md,
  /// ps_bench) a message costs more than the overlap it buys below about 1 MiB: 64 Ki-float
  /// pieces made a 1 MiB round 10-15 % slower, while 1 MiB pieces made 16 MiB rounds ~5 %
  /// faster. A shard owning at most 1 MiB answers a push in one message.
  std::size_t piece_floats = 256 * 1024;
  /// Stale-synchronous parallel (consistency `ssp:S`): a push of a step up to this many steps
  /// after the open one is held until its step opens (a worker computes step s from a version
  /// of at least s - S). 0 (bulk-synchronous): a push of a later step is an error.
  std::int64_t max_ahead = 0;
  /// Asynchronous parallel (consistency `asp`): each step has one contributor, the worker it
  /// was granted to, so a step completes with its first push and its update is that gradient
  /// alone, applied on arrival, also before the steps granted earlier (a straggler's) have
  /// come; applied_steps() counts the steps applied without a gap. A step whose configuration
  /// moves this shard's ranges waits for the move as in BSP. A push of a step already applied
  /// (a stand-in's empty push raced the dead worker's own, or the reverse) is dropped and
  /// counted (stale_dropped()).
  bool one_push_per_step = false;
  /// The job's sparse tables (ps/shard_rows.hpp): the shard holds the rows of the buckets its
  /// key ranges carry, applies their gradients with each step, and moves them with its ranges.
  /// Unset: a model without sparse tables.
  std::optional<sparse_rows_config> rows;
  /// Test hook: called as each step is applied, with the step and the (rank, samples) of every
  /// contribution it took, in rank order (what tests/unit/elastic_test.cpp checks the
  /// parameters against); empty: none.
  std::function<void(std::int64_t step,
                     const std::vector<std::pair<std::uint32_t, std::uint64_t>>& taken)>
      on_applied;
};

/// A finished piece of a step's update: its values are final for version `version` and are not
/// written again before the next step.
struct piece {
  std::int64_t version = 0;  ///< the version being produced (applied_steps() after the step)
  std::size_t range = 0;     ///< index of the range in ranges() that holds it
  std::size_t offset = 0;    ///< offset of its first float within values()
  key_range keys;            ///< the keys it covers, within ranges()[range]
};

/// Told of every piece of a completed step in order, after that piece is updated (also when the
/// step had no data and nothing changed). share_values() inside it returns the buffer that
/// holds the piece; sharing it there is allowed (see share_values()).
using piece_callback = std::function<void(const piece&)>;

class shard {
 public:
  /// A shard owning `ranges` with initial values `initial` (the ranges' values concatenated).
  /// `be` runs the optimizer; REQUIRES: a backend whose memory is host memory (cpu),
  /// `options.piece_floats` a positive multiple of piece_multiple; opt.statistics ascending,
  /// disjoint and non-empty ranges, each momentum in [0, 1]; opt.samples_per_epoch > 0 when
  /// opt.scheduled(); opt.epochs >= 1 for a cosine schedule.
  shard(std::uint32_t id, const optimizer_config& opt, kernels::backend& be,
        std::vector<key_range> ranges, std::span<const float> initial, shard_options options = {});

  std::uint32_t id() const noexcept { return id_; }
  const std::vector<key_range>& ranges() const noexcept { return ranges_; }
  /// Floats owned (sum of range sizes).
  std::size_t size() const noexcept { return values_->size(); }
  /// Current values of the ranges, concatenated.
  std::span<const float> values() const noexcept { return values_->span(); }
  /// The current values as a shared, immutable buffer (no copy): valid for as long as the
  /// caller holds it. The shard never writes a buffer it has shared: the next update copies the
  /// values to a fresh buffer first if anyone still holds this one (copy on write, checked once
  /// when a step starts to be applied). In BSP the holders (workers) let go before the next step
  /// completes, so no copy is made. Called from a piece_callback, it returns the buffer the
  /// step is being written to: the pieces reported so far are final and never written again
  /// (the later pieces of the step are, so a reader reads only the pieces it was told of).
  std::shared_ptr<const float_buffer> share_values() const noexcept { return values_; }
  /// The sparse rows this shard holds (options().rows set), else null.
  const sparse::row_store* rows() const noexcept { return rows_ ? &*rows_ : nullptr; }
  /// Copies rows `ids` of sparse table `table` at the current version into `out` (ids.size() *
  /// dim floats), creating those not touched before (their initial values). Errors
  /// (protocol_error): no sparse tables, or those of row_store::read (a row another shard holds).
  result<void> read_rows(std::uint32_t table, std::span<const std::uint64_t> ids,
                         std::span<float> out);
  /// Steps applied so far: the version of values(). Step s's gradients are computed on version s.
  std::int64_t applied_steps() const noexcept { return applied_; }

  /// Sets the ranks expected to contribute to each step from now on.
  /// REQUIRES: no step is partially pushed.
  void set_members(std::vector<std::uint32_t> ranks);
  /// The ranks expected to contribute to the open step.
  const std::vector<std::uint32_t>& members() const noexcept { return members_; }

  /// Takes a configuration of the job: its members govern steps from max(c.from_step, the open
  /// step) on. Pushes held for it are taken now. Returns the number of steps this completed (a
  /// removed member may have been the last one awaited). A configuration older than the
  /// newest seen is ignored; protocol_error if a held push turns out invalid (the first such).
  result<int> configure(const job_config& c);
  /// The same for a re-issue of configurations (workers died: wire flag more_configs), oldest
  /// first, taken as one: the open step is completed, and held pushes taken, only under the
  /// last of them (one alone could give the open step an earlier step's members).
  result<int> configure(std::span<const job_config> batch);
  /// The newest configuration version seen (0 before the first).
  std::uint64_t config_version() const noexcept { return config_version_; }

  /// push() under configuration `config_version`: held (returns false) while the shard has not
  /// seen that configuration, does not own the ranges the configuration gives it at `step`
  /// (owns_assigned), or `step` is later than the open one, by at most options().max_ahead
  /// steps (ssp:S). Once a step completes, resume() takes the held pushes of the next one. A held
  /// push from a rank that a later configuration removes from its step before the push is taken is
  /// dropped (its worker died; its chunk is processed again).
  result<bool> push(std::int64_t step, std::uint64_t config_version, contribution c,
                    const piece_callback& on_piece = {});
  /// Whether the shard owns exactly the ranges the configuration governing `step` gives it
  /// (true where no configuration with a shard map says: set_members, or none yet). False
  /// between a step boundary and the adoption or release that the boundary's change asks of it.
  bool owns_assigned(std::int64_t step) const;
  /// Whether `rank`'s push of step `step` is here already: taken into the open step, or held.
  /// A backup that takes over (ps/replica_chain.hpp) gets again the pushes the lost primary
  /// left unanswered, and the copies it was sent of some of them before.
  bool holds_push(std::int64_t step, std::uint32_t rank) const;
  /// Takes the held pushes that became takeable (after adopt or release: the shard owns its
  /// configuration's ranges now). Returns the number of steps that completed (answered as a
  /// whole, not piece by piece); protocol_error if a held push turns out invalid (the first).
  result<int> resume();

  // Slice transfers: release, adopt, snapshot and relayout (shard_transfer.cpp).
  /// Hands over the slices in `ranges` (each within what this shard owns) to shard `to`: their
  /// values and optimizer state at the current version; the shard owns them no more. Pushes held
  /// for the ranges it keeps are taken by resume() afterwards.
  /// Errors: protocol_error when a step is partially pushed, or a range is not owned here.
  result<slice_transfer> release(const std::vector<key_range>& ranges, std::uint32_t to);
  /// Takes slices handed over by release(). A shard that owns nothing takes the transfer's
  /// version, update count and samples applied (a shard added to a running job); one that owns
  /// slices requires the version to equal its own and keeps the larger of the update counts and
  /// of the samples applied (see adopt). Pushes held for the slices are taken by resume()
  /// afterwards.
  /// Errors: protocol_error on a version mismatch, overlapping ranges, or sizes that disagree
  /// with the ranges.
  result<void> adopt(const slice_transfer& t);
  /// The same; a shard that owns nothing takes the transfer's storage without copying it (its
  /// values vector, or its buffer unless others still read that: then the values are copied).
  result<void> adopt(slice_transfer&& t);
  /// A copy of everything the shard holds at its current version: the values and optimizer
  /// state of every range it owns, with its version, update count and samples applied (from =
  /// to = id()). What a checkpoint keeps (ps/training_state.hpp); the shard is unchanged. An
  /// empty shard that adopts it (adopt) goes on as this one does, bitwise.
  slice_transfer snapshot() const;
  /// Steps applied with samples (Adam's t).
  std::int64_t updates() const noexcept { return updates_; }
  /// Samples of the steps applied so far: the schedule's position is
  /// optimizer_config::progress(samples_applied()).
  std::uint64_t samples_applied() const noexcept { return samples_applied_; }
  /// The learning rate the next step with samples will be applied with.
  float next_learning_rate() const noexcept {
    return opt_.learning_rate_at(opt_.progress(samples_applied_));
  }

  /// Adds a worker's contribution to step `step`. Returns true when it completed the step (the
  /// update is applied, piece by piece, `on_piece` told of each piece as soon as it is final, and
  /// applied_steps() advanced). Errors (protocol_error, naming the rank and step): a step other
  /// than the open one, a rank not in the membership, a second push from one rank, parts that do
  /// not match the ranges. REQUIRES: on_piece does not call push() or set_members().
  result<bool> push(std::int64_t step, contribution c, const piece_callback& on_piece = {});

  const shard_options& options() const noexcept { return options_; }

  /// asp: pushes of steps already applied, dropped.
  std::uint64_t stale_dropped() const noexcept { return stale_dropped_; }

  /// Totals of the last applied step.
  std::uint64_t last_step_samples() const noexcept { return last_samples_; }
  double last_step_loss() const noexcept { return last_loss_; }

  /// lr_scaling adascale: this shard's sums over its keys of the step that produced `version`,
  /// when it is the last applied and had 2 or more contributions with samples (ps/adascale.hpp).
  std::optional<grad_stats> step_stats(std::int64_t version) const {
    return last_stats_ && last_stats_->version == version ? last_stats_ : std::nullopt;
  }
  /// lr_scaling adascale: the gain's estimate so far.
  const adascale_gain& gain() const noexcept { return gain_; }

 private:
  /// Applies the pending contributions as step `step` (applied_ itself, but for asp).
  void apply(const piece_callback& on_piece, std::int64_t step);
  /// Updates the n keys from `key` (at `off` in values_) with the step's gradient sum g: the
  /// optimizer, or the fold of the statistic ranges they meet.
  void update(std::size_t off, std::uint64_t key, std::size_t n, const float* g, float scale);
  /// The optimizer on n keys at `off`, with the step's learning rate.
  void optimize(std::size_t off, std::size_t n, const float* g, float scale);

  std::uint32_t id_;
  optimizer_config opt_;
  kernels::backend& be_;
  shard_options options_;
  std::vector<key_range> ranges_;
  std::vector<std::size_t> offsets_;   ///< offset of each range within values_
  std::unique_ptr<buffer_pool> pool_;  ///< buffers for values_ (copy on write)
  std::shared_ptr<float_buffer> values_;
  std::vector<float> state_a_;                  ///< momentum velocity or Adam m
  std::vector<float> state_b_;                  ///< Adam v
  std::vector<float> acc_;                      ///< gradient sum of one piece
  std::vector<const contribution*> with_data_;  ///< of the step being applied, in rank order
  adascale_gain gain_;                          ///< lr_scaling adascale
  std::optional<grad_stats> last_stats_;        ///< of the last applied step (adascale)
  std::vector<const float*> stats_parts_;       ///< scratch of apply(): a piece of each part
  std::vector<std::uint64_t> stats_samples_;    ///< scratch of apply(): samples of each part
  /// Replaces the owned ranges and their values and state (migration; shard_transfer.cpp): the
  /// values are `buffer` when given (taken as it is), else `values`.
  void relayout(std::vector<key_range> ranges, std::vector<float> values, std::vector<float> a,
                std::vector<float> b, std::shared_ptr<float_buffer> buffer = nullptr);
  /// Completes the open step if every expected member has pushed; true if it did.
  bool maybe_apply(const piece_callback& on_piece);
  /// Errors: a contribution with samples whose parts do not match this shard's ranges.
  result<void> check_parts(const contribution& c) const;
  /// Takes the held pushes whose configuration is known now, in step then rank order.
  result<int> take_held();
  /// asp: applies `c` as step `step` alone, on arrival, also ahead of steps still open (their
  /// gradients come later); held while its configuration or ranges are not here.
  result<bool> push_alone(std::int64_t step, std::uint64_t config_version, contribution c,
                          const piece_callback& on_piece);
  result<int> take_held_alone();

  struct held_push {
    std::int64_t step;
    std::uint64_t config_version;
    contribution c;
  };

  std::vector<std::uint32_t> members_;
  std::map<std::int64_t, std::vector<std::uint32_t>> schedule_;  ///< from step -> members
  /// From step -> the ranges its configuration gives this shard (none: a configuration without
  /// a shard map, which asks nothing of the ranges).
  std::map<std::int64_t, std::optional<std::vector<key_range>>> assigned_;
  std::uint64_t config_version_ = 0;
  std::vector<held_push> held_;
  std::map<std::uint32_t, contribution> pending_;  ///< by rank: summed in rank order
  std::int64_t applied_ = 0;
  std::int64_t updates_ = 0;           ///< applied steps with samples (Adam's t)
  std::uint64_t samples_applied_ = 0;  ///< the schedule's position (ps/optimizer.hpp)
  float step_lr_ = 0.0f;               ///< learning rate of the step being applied
  std::uint64_t last_samples_ = 0;
  double last_loss_ = 0;
  std::uint64_t stale_dropped_ = 0;
  /// asp: steps applied ahead of applied_ (their turn had not come: applied_ counts the steps
  /// applied without a gap).
  std::set<std::int64_t> applied_ahead_;
  std::optional<sparse::row_store> rows_;  ///< options_.rows: the rows of this shard's buckets
  /// Adds the step's row gradients (the contributions with data, in rank order) and applies them.
  void apply_rows(float scale);
  /// Takes the rows of a transfer (after every other check of it passed): errors as
  /// sparse::row_store::adopt, and a transfer with rows for a model without or the reverse.
  result<void> adopt_rows(const slice_transfer& t);
};

}  // namespace coach::ps
