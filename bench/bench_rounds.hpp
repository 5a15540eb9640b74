#pragma once
// bench/bench_rounds.hpp: what the data-path benchmarks (ps_bench, sparse_bench) measure with:
// rounds timed in interleaved turns, their summary, and the raw ZeroMQ echo they are compared
// with (the same bytes to processes that send them back).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "actors/curve_keys.hpp"
#include "bench/bench_processes.hpp"

namespace coach::bench {

using clock_type = std::chrono::steady_clock;

/// v with `decimals` digits after the point (what the figure can claim); NaN and infinities stay
/// as they are (JSON null).
double rounded(double v, int decimals) {
  if (!std::isfinite(v)) return v;
  const double scale = std::pow(10.0, decimals);
  return std::round(v * scale) / scale;
}

std::vector<std::size_t> parse_list(const std::string& text) {
  std::vector<std::size_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoull(item));
  return out;
}

struct measurement {
  double gbps = 0;
  double p50_us = 0;
  double p99_us = 0;
  std::size_t rounds = 0;
};

measurement summarize(std::vector<double>& us, std::size_t bytes_per_round) {
  measurement m;
  m.rounds = us.size();
  const double total_s = std::accumulate(us.begin(), us.end(), 0.0) / 1e6;
  std::sort(us.begin(), us.end());
  m.p50_us = us[us.size() / 2];
  m.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  m.gbps = double(bytes_per_round) * double(us.size()) / total_s / 1e9;
  return m;
}

/// Raw ZeroMQ rounds: `bytes` split over `peers` echo processes as the shard map splits a
/// vector (equal parts, the last one shorter), one DEALER each, sent to all and then every
/// echo awaited. With one peer: the plain echo reference.
class echo_rounds {
 public:
  /// `keys`: over CURVE, every process with that key pair (the raw reference of --curve).
  echo_rounds(std::size_t bytes, std::size_t peers, const actors::key_pair* keys = nullptr,
              const std::string& key_file = {})
      : bytes_(bytes) {
    const std::size_t floats = bytes / sizeof(float);
    const std::size_t per = (floats + peers - 1) / peers;
    for (std::size_t k = 0; k < peers; ++k) {
      const std::string addr = free_address();
      std::vector<std::string> args{"--serve-echo", "--listen", addr};
      if (keys) args.insert(args.end(), {"--key", key_file});
      children_.push_back(spawn_self(args));
      sockets_.emplace_back(ctx_, zmq::socket_type::dealer);
      sockets_.back().set(zmq::sockopt::linger, 0);
      if (keys) {
        sockets_.back().set(zmq::sockopt::curve_serverkey, keys->public_key);
        sockets_.back().set(zmq::sockopt::curve_publickey, keys->public_key);
        sockets_.back().set(zmq::sockopt::curve_secretkey, keys->secret_key);
      }
      sockets_.back().connect(addr);
      const std::size_t begin = std::min(floats, k * per), end = std::min(floats, begin + per);
      payloads_.emplace_back(std::max<std::size_t>(end - begin, 1) * sizeof(float), 'x');
    }
    round();  // warm up (and wait for the children to bind)
  }
  ~echo_rounds() {
    sockets_.clear();
    stop(children_);
  }
  echo_rounds(const echo_rounds&) = delete;
  echo_rounds& operator=(const echo_rounds&) = delete;

  void round() {
    for (std::size_t k = 0; k < sockets_.size(); ++k)
      sockets_[k].send(zmq::buffer(payloads_[k]), zmq::send_flags::none);
    items_.clear();
    for (auto& s : sockets_) items_.push_back({s.handle(), 0, ZMQ_POLLIN, 0});
    for (std::size_t got = 0; got < sockets_.size();) {
      zmq::poll(items_.data(), items_.size(), std::chrono::milliseconds(-1));
      for (std::size_t k = 0; k < sockets_.size(); ++k)
        if (items_[k].revents & ZMQ_POLLIN) {
          (void)sockets_[k].recv(reply_);
          ++got;
        }
    }
  }

  std::size_t bytes_per_round() const { return 2 * bytes_; }

 private:
  std::size_t bytes_;
  std::vector<child> children_;
  zmq::context_t ctx_{2};  // as many I/O threads as the transport's (zmq_transport_options)
  std::vector<zmq::socket_t> sockets_;
  std::vector<std::vector<char>> payloads_;
  std::vector<zmq_pollitem_t> items_;
  zmq::message_t reply_;
};

/// Measures the contenders side by side: `seconds` of rounds each, taken in turns of about
/// 0.2 s (at least 5 rounds) so that a slower or faster spell of this shared machine falls on
/// all of them alike.
std::vector<measurement> interleaved(const std::vector<std::function<void()>>& rounds,
                                     const std::vector<std::size_t>& bytes_per_round,
                                     double seconds) {
  const double slice = std::min(0.2, seconds);
  const int turns = std::max(1, int(std::lround(seconds / slice)));
  std::vector<std::vector<double>> us(rounds.size());
  for (int t = 0; t < turns; ++t)
    for (std::size_t c = 0; c < rounds.size(); ++c) {
      const auto deadline = clock_type::now() + std::chrono::duration<double>(slice);
      for (int n = 0; (clock_type::now() < deadline || n < 5) && us[c].size() < 200000; ++n) {
        const auto t0 = clock_type::now();
        rounds[c]();
        us[c].push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
      }
    }
  std::vector<measurement> out;
  for (std::size_t c = 0; c < rounds.size(); ++c)
    out.push_back(summarize(us[c], bytes_per_round[c]));
  return out;
}

}  // namespace coach::bench
