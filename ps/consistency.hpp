#pragma once
// ps::consistency: the seam of the consistency modes (docs/design.md "Consistency"): what a shard
// takes, holds or drops, how the job master opens steps, and what a worker may compute next. One
// interface, four implementations chosen by name from the spec's `consistency:` field
// (make_consistency): `bsp` (every member's push of a step, summed in rank order), `ssp:S` (a
// worker up to S steps ahead of the slowest), `asp` (each step one worker's, applied on arrival)
// and `averaging:K` (K local steps, the pushes samples-weighted model deltas). The shard
// (ps::shard via shard_rules), the job master (master::job_master), the worker
// (worker::worker_server) and the elastic property test ask it; nothing else branches on the
// mode. One contract suite,
// tests/unit/ps/consistency_contract_test.cpp (`every_consistency`), runs over all four.

#include <cstdint>
#include <memory>
#include <string>

#include "ps/shard.hpp"

namespace coach::ps {

enum class consistency_kind { bsp, ssp, asp, averaging };

/// The spec's `consistency:` field.
struct consistency_config {
  consistency_kind kind = consistency_kind::bsp;
  int staleness = 0;    ///< ssp:S: how many steps a worker may run ahead of the slowest
  int local_steps = 0;  ///< averaging:K: local steps between two averagings
};

class consistency {
 public:
  virtual ~consistency() = default;
  /// The name as the spec writes it: "bsp", "ssp:2", "asp", "averaging:4".
  virtual std::string name() const = 0;

  // The shard: what it takes, holds or drops.
  /// How many steps past its open one a shard holds a push (taken when its step opens); a push
  /// further ahead is refused. 0: only the open step's.
  virtual std::int64_t shard_holds_ahead() const { return 0; }
  /// Each step is one worker's: its first push completes it, on arrival (also ahead of earlier
  /// steps still out), and a second push of it is dropped and counted.
  virtual bool one_push_per_step() const { return false; }
  /// `base` with this mode's rules set (max_ahead, one_push_per_step).
  shard_options shard_rules(shard_options base = {}) const {
    base.max_ahead = shard_holds_ahead();
    base.one_push_per_step = one_push_per_step();
    return base;
  }

  // The job master: how steps open.
  /// Chunks a member computes at each step (its local steps between two pushes).
  virtual std::uint32_t chunks_per_step() const { return 1; }
  /// How many steps may be open past the oldest incomplete one; -1: no bound (a worker asks
  /// for its next step only once it reported the last).
  virtual std::int64_t open_ahead() const { return -1; }
  /// Each request of a worker opens the next step with it as its only member (the steps
  /// number the job's pushes, whoever makes them).
  virtual bool step_per_request() const { return false; }
  /// Every step covers the same samples, whatever its members (a fixed global batch can hold).
  virtual bool stepwise() const { return true; }

  // The worker: what it may compute next.
  /// How many versions before its step a worker may compute from (0: exactly the step's).
  virtual std::int64_t staleness() const { return 0; }
  /// Any version will do: a worker computes from whatever it has, from its first pull on.
  virtual bool any_version() const { return false; }
  /// A worker's pushes are the change its local steps made to the model (samples-weighted
  /// deltas), not gradients.
  virtual bool pushes_deltas() const { return false; }
};

/// The mode `c` names. REQUIRES: c as the spec validates it (ssp: staleness >= 1; averaging:
/// local_steps >= 1).
std::unique_ptr<consistency> make_consistency(const consistency_config& c);

}  // namespace coach::ps
