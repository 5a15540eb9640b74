#include "ps/consistency.hpp"

#include <limits>

namespace coach::ps {
namespace {

class bsp final : public consistency {
 public:
  std::string name() const override { return "bsp"; }
};

class ssp final : public consistency {
 public:
  explicit ssp(std::int64_t s) : s_(s) {}
  std::string name() const override { return "ssp:" + std::to_string(s_); }
  std::int64_t shard_holds_ahead() const override { return s_; }
  std::int64_t open_ahead() const override { return s_; }
  std::int64_t staleness() const override { return s_; }

 private:
  std::int64_t s_;
};

class asp final : public consistency {
 public:
  std::string name() const override { return "asp"; }
  // A straggler's step stays open while later ones are applied.
  std::int64_t shard_holds_ahead() const override {
    return std::numeric_limits<std::int32_t>::max();
  }
  bool one_push_per_step() const override { return true; }
  bool step_per_request() const override { return true; }
  bool stepwise() const override { return false; }
  bool any_version() const override { return true; }
};

class averaging final : public consistency {
 public:
  explicit averaging(std::uint32_t k) : k_(k) {}
  std::string name() const override { return "averaging:" + std::to_string(k_); }
  std::uint32_t chunks_per_step() const override { return k_; }
  bool stepwise() const override { return false; }
  bool pushes_deltas() const override { return true; }

 private:
  std::uint32_t k_;
};

}  // namespace

std::unique_ptr<consistency> make_consistency(const consistency_config& c) {
  switch (c.kind) {
    case consistency_kind::ssp:
      return std::make_unique<ssp>(c.staleness);
    case consistency_kind::asp:
      return std::make_unique<asp>();
    case consistency_kind::averaging:
      return std::make_unique<averaging>(std::uint32_t(c.local_steps));
    case consistency_kind::bsp:
      break;
  }
  return std::make_unique<bsp>();
}

}  // namespace coach::ps
