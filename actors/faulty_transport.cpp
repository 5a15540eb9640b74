#include "actors/faulty_transport.hpp"

#include <caf/send.hpp>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace coach::actors {
namespace {

using clock_type = std::chrono::steady_clock;

std::uint64_t key_of(const endpoint& ep) noexcept {
  return (std::uint64_t(ep.host) << 32) | std::uint64_t(ep.id);
}

class faulty_impl final : public faulty_transport {
 public:
  faulty_impl(std::shared_ptr<transport> inner, fault_plan plan)
      : inner_(std::move(inner)),
        plan_(std::move(plan)),
        name_("faulty(" + std::string(inner_->name()) + ")"),
        rng_(plan_.seed),
        timer_([this] { run(); }) {}

  ~faulty_impl() override {
    {
      std::lock_guard lock{mu_};
      stop_ = true;
    }
    cv_.notify_all();
    timer_.join();
  }

  std::string_view name() const noexcept override { return name_; }

  void bind(const endpoint& ep, caf::actor handle) override {
    remember(ep, handle);
    inner_->bind(ep, std::move(handle));
  }
  void bind_inline(const endpoint& ep, caf::actor handle) override {
    remember(ep, handle);
    inner_->bind_inline(ep, std::move(handle));
  }
  void unbind(const endpoint& ep) override {
    {
      std::lock_guard lock{mu_};
      bound_.erase(key_of(ep));
    }
    inner_->unbind(ep);
  }
  void unbind_if(const endpoint& ep, const caf::actor_addr& who) override {
    {
      std::lock_guard lock{mu_};
      auto it = bound_.find(key_of(ep));
      if (it != bound_.end() && it->second.address() == who) bound_.erase(it);
    }
    inner_->unbind_if(ep, who);
  }
  traffic_stats traffic() const override { return inner_->traffic(); }

  bool send(wire_message msg) override {
    std::vector<wire_message> now;  // handed on after the lock, in this order
    caf::actor victim;
    endpoint victim_ep;
    bool result = true;
    {
      std::lock_guard lock{mu_};
      const auto src = key_of(msg.hdr.src);
      // What the dead actor still sends (its thread finishing the handler it crashed in) is
      // lost; others may send in its name (a job master completing its steps).
      if (auto d = killed_.find(src);
          d != killed_.end() && d->second == std::this_thread::get_id()) {
        ++counts_.killed;
        return true;
      }
      auto k = kills_.find(src);
      const bool matches =
          k != kills_.end() && k->second.kind == msg.hdr.kind && k->second.step == msg.hdr.step;
      if (k != kills_.end() && k->second.seen >= k->second.nth) {
        // the crash
        killed_[src] = std::this_thread::get_id();
        kills_.erase(k);
        ++counts_.killed;
        victim_ep = msg.hdr.src;
        if (auto b = bound_.find(src); b != bound_.end()) victim = b->second;
        bound_.erase(src);
      } else {
        if (matches) ++k->second.seen;  // it goes on as any other message
        if (cuts_.contains(link(msg.hdr.src.host, msg.hdr.dst.host))) {
          ++counts_.cut;
          return true;
        }
        if (!plan_.applies || plan_.applies(msg)) {
          decide(std::move(msg), now);
        } else {
          ++counts_.passed;
          release_after(msg.hdr.dst, std::move(msg), now);
        }
      }
    }
    if (victim) {
      inner_->unbind(victim_ep);
      caf::anon_send_exit(victim, caf::exit_reason::kill);
      return true;
    }
    for (auto& m : now) result = inner_->send(std::move(m)) && result;
    return result;
  }

  void cut(std::uint32_t a, std::uint32_t b) override {
    std::lock_guard lock{mu_};
    cuts_.insert(link(a, b));
  }
  void heal(std::uint32_t a, std::uint32_t b) override {
    std::lock_guard lock{mu_};
    cuts_.erase(link(a, b));
  }
  void crash_after(const endpoint& ep, msg_kind kind, std::int64_t step, int nth) override {
    std::lock_guard lock{mu_};
    kills_[key_of(ep)] = kill_rule{kind, step, std::max(1, nth), 0};
  }
  fault_counts counts() const override {
    std::lock_guard lock{mu_};
    return counts_;
  }
  void flush() override {
    std::vector<wire_message> out;
    {
      std::lock_guard lock{mu_};
      for (auto& [due, m] : timed_) out.push_back(std::move(m));
      timed_.clear();
      links_.clear();
      for (auto& [dst, h] : held_) out.push_back(std::move(h.msg));
      held_.clear();
    }
    for (auto& m : out) inner_->send(std::move(m));
  }

 private:
  struct kill_rule {
    msg_kind kind;
    std::int64_t step;
    int nth;
    int seen;
  };
  struct held {
    clock_type::time_point due;
    wire_message msg;
  };

  static std::pair<std::uint32_t, std::uint32_t> link(std::uint32_t a, std::uint32_t b) {
    return {std::min(a, b), std::max(a, b)};
  }

  void remember(const endpoint& ep, const caf::actor& handle) {
    std::lock_guard lock{mu_};
    bound_[key_of(ep)] = handle;
    killed_.erase(key_of(ep));  // a new actor there
  }

  /// One draw decides the message's fate. REQUIRES: mu_ held.
  void decide(wire_message msg, std::vector<wire_message>& now) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const double r = u(rng_);
    double edge = plan_.drop;
    if (r < edge) {
      ++counts_.dropped;
      return;
    }
    if (r < (edge += plan_.duplicate)) {
      ++counts_.duplicated;
      wire_message copy = msg;
      const auto dst = msg.hdr.dst;
      release_after(dst, std::move(msg), now);
      release_after(dst, std::move(copy), now);  // right behind it, also when its link waits
      return;
    }
    if (r < (edge += plan_.delay)) {
      ++counts_.delayed;
      std::uniform_int_distribution<std::int64_t> d(0, plan_.max_delay.count());
      hold(std::move(msg), clock_type::now() + std::chrono::microseconds(d(rng_)));
      return;
    }
    if (r < (edge += plan_.reorder) && !held_.contains(key_of(msg.hdr.dst))) {
      ++counts_.reordered;
      held_.emplace(key_of(msg.hdr.dst), held{clock_type::now() + plan_.max_delay, std::move(msg)});
      cv_.notify_all();
      return;
    }
    ++counts_.passed;
    release_after(msg.hdr.dst, std::move(msg), now);
  }

  /// A link (sender, receiver) keeps its order as a connection does: a message sent while an
  /// earlier one of its link is held goes after it.
  using link_key = std::pair<std::uint64_t, std::uint64_t>;
  static link_key link_of(const wire_message& m) { return {key_of(m.hdr.src), key_of(m.hdr.dst)}; }

  /// Holds `msg` until `due`, and after every message of its link held before it.
  /// REQUIRES: mu_ held.
  void hold(wire_message msg, clock_type::time_point due) {
    auto& l = links_[link_of(msg)];
    if (l.pending > 0) due = std::max(due, l.last_due);
    l.last_due = due;
    ++l.pending;
    timed_.emplace(due, std::move(msg));
    cv_.notify_all();
  }

  /// `msg` goes now (or behind its link's held messages), and after it a message held for
  /// reordering to the same endpoint. REQUIRES: mu_ held.
  void release_after(const endpoint& dst, wire_message msg, std::vector<wire_message>& now) {
    if (auto l = links_.find(link_of(msg)); l != links_.end() && l->second.pending > 0)
      hold(std::move(msg), l->second.last_due);
    else
      now.push_back(std::move(msg));
    if (auto h = held_.find(key_of(dst)); h != held_.end()) {
      now.push_back(std::move(h->second.msg));
      held_.erase(h);
    }
  }

  /// The timer thread: sends delayed messages when due, and held ones whose successor did not
  /// come within max_delay.
  void run() {
    std::unique_lock lock{mu_};
    while (!stop_) {
      auto next = clock_type::time_point::max();
      if (!timed_.empty()) next = timed_.begin()->first;
      for (const auto& [dst, h] : held_) next = std::min(next, h.due);
      if (next == clock_type::time_point::max())
        cv_.wait(lock);
      else
        cv_.wait_until(lock, next);
      const auto now = clock_type::now();
      std::vector<wire_message> due;
      while (!timed_.empty() && timed_.begin()->first <= now) {
        auto& m = timed_.begin()->second;
        if (auto l = links_.find(link_of(m)); l != links_.end() && --l->second.pending <= 0)
          links_.erase(l);
        due.push_back(std::move(m));
        timed_.erase(timed_.begin());
      }
      for (auto it = held_.begin(); it != held_.end();)
        if (it->second.due <= now) {
          due.push_back(std::move(it->second.msg));
          it = held_.erase(it);
        } else {
          ++it;
        }
      if (due.empty()) continue;
      lock.unlock();
      for (auto& m : due) inner_->send(std::move(m));
      lock.lock();
    }
  }

  std::shared_ptr<transport> inner_;
  fault_plan plan_;
  std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::mt19937_64 rng_;
  fault_counts counts_;
  std::set<std::pair<std::uint32_t, std::uint32_t>> cuts_;
  std::map<std::uint64_t, kill_rule> kills_;
  std::map<std::uint64_t, std::thread::id> killed_;  ///< endpoint -> the thread it died on
  std::map<std::uint64_t, caf::actor> bound_;
  std::multimap<clock_type::time_point, wire_message> timed_;  ///< equal times: in order
  struct link_hold {
    clock_type::time_point last_due;
    int pending = 0;
  };
  std::map<link_key, link_hold> links_;  ///< links with held messages
  std::map<std::uint64_t, held> held_;   ///< by destination: waiting for the next message there
  bool stop_ = false;
  std::thread timer_;  ///< last: started once everything above exists
};

}  // namespace

std::shared_ptr<faulty_transport> faulty_transport::wrap(std::shared_ptr<transport> inner,
                                                         fault_plan plan) {
  return std::make_shared<faulty_impl>(std::move(inner), std::move(plan));
}

}  // namespace coach::actors
