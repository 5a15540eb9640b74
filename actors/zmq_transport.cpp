#include "actors/zmq_transport.hpp"

#include <sys/eventfd.h>
#include <unistd.h>
#include <caf/send.hpp>

#include <atomic>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "actors/codec.hpp"
#include "actors/route_table.hpp"

namespace coach::actors {
namespace {

/// Frees a payload frame once ZeroMQ is done with it: drops the heap copy of its owner.
void release_owner(void*, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}

class zmq_transport_impl final : public zmq_transport {
 public:
  explicit zmq_transport_impl(zmq_transport_options opt) : opt_(std::move(opt)) {}

  ~zmq_transport_impl() override {
    stop_ = true;
    wake();
    if (io_.joinable()) io_.join();
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  result<void> open() {
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return fail(errc::internal, "eventfd failed");
    try {
      router_ = zmq::socket_t(ctx_, zmq::socket_type::router);
      router_.set(zmq::sockopt::linger, 0);
      router_.set(zmq::sockopt::rcvhwm, opt_.send_hwm);
      router_.bind(opt_.listen);
      bound_ = router_.get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return fail(errc::invalid_argument, "cannot listen on '{}': {}", opt_.listen, e.what());
    }
    io_ = std::thread([this] { run(); });
    return {};
  }

  std::string_view name() const noexcept override { return "zmq"; }
  void bind(const endpoint& ep, caf::actor handle) override { routes_.bind(ep, std::move(handle)); }
  void unbind(const endpoint& ep) override { routes_.unbind(ep); }

  bool send(wire_message msg) override {
    if (msg.hdr.dst.host == opt_.host) {
      auto dst = routes_.find(msg.hdr.dst);
      if (!dst) {
        counter_.dropped();
        return false;
      }
      counter_.sent(msg.hdr.job, msg.hdr.src.host, msg.hdr.dst.host, msg.hdr.kind, msg.wire_bytes());
      caf::anon_send(dst, std::move(msg));
      return true;
    }
    {
      std::lock_guard lock{mu_};
      if (!peers_.contains(msg.hdr.dst.host)) {
        counter_.dropped();
        log("no route to host {} (message {})", msg.hdr.dst.host, to_string(msg.hdr.kind));
        return false;
      }
      outbox_.push_back(std::move(msg));
    }
    wake();
    return true;
  }

  traffic_stats traffic() const override { return counter_.snapshot(); }

  void add_peer(std::uint32_t host, std::string address) override {
    std::lock_guard lock{mu_};
    peers_[host] = std::move(address);
  }

  std::string bound_address() const override { return bound_; }

  receive_stats received() const override {
    std::lock_guard lock{recv_mu_};
    return recv_;
  }

 private:
  template <class... Args>
  void log(std::string_view fmt, const Args&... args) {
    // At most 5 lines a second: a flood of bad frames must not flood the log too.
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock{log_mu_};
    if (now - log_window_ > std::chrono::seconds(1)) {
      log_window_ = now;
      log_lines_ = 0;
    }
    if (++log_lines_ > 5) return;
    std::fprintf(stderr, "coach: transport %s: %s\n", bound_.c_str(),
                 coach::format(fmt, args...).c_str());
  }

  void wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
  }

  /// The DEALER to a peer host, connected on first use. I/O thread only.
  zmq::socket_t* dealer_for(std::uint32_t host, const std::string& address) {
    auto it = dealers_.find(host);
    if (it != dealers_.end()) return &it->second;
    zmq::socket_t s(ctx_, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::sndhwm, opt_.send_hwm);
    s.set(zmq::sockopt::sndtimeo, int(opt_.send_timeout.count()));
    s.set(zmq::sockopt::reconnect_ivl, int(opt_.reconnect_interval.count()));
    s.set(zmq::sockopt::routing_id, std::to_string(opt_.host));
    try {
      s.connect(address);
    } catch (const zmq::error_t& e) {
      log("cannot connect to host {} at '{}': {}", host, address, e.what());
      return nullptr;
    }
    return &dealers_.emplace(host, std::move(s)).first->second;
  }

  void send_remote(wire_message& msg, const std::string& address) {
    zmq::socket_t* s = dealer_for(msg.hdr.dst.host, address);
    if (!s) {
      counter_.dropped();
      return;
    }
    sizes_.clear();
    for (const auto& f : msg.frames) sizes_.push_back(f.bytes);
    codec::encode_header(msg.hdr, sizes_, header_);
    std::size_t bytes = header_.size();
    try {
      const auto more = msg.frames.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore;
      if (!s->send(zmq::buffer(header_.data(), header_.size()), more)) {
        counter_.dropped();
        log("send to host {} timed out; message {} dropped", msg.hdr.dst.host,
            to_string(msg.hdr.kind));
        return;
      }
      for (std::size_t i = 0; i < msg.frames.size(); ++i) {
        auto& f = msg.frames[i];
        auto* hint = new std::shared_ptr<const void>(f.owner);
        zmq::message_t part(const_cast<std::byte*>(f.data), f.bytes, release_owner, hint);
        const bool last = i + 1 == msg.frames.size();
        // Once the first frame is queued the rest of the message goes too (ZeroMQ multipart).
        s->send(part, last ? zmq::send_flags::none : zmq::send_flags::sndmore);
        bytes += f.bytes;
      }
    } catch (const zmq::error_t& e) {
      counter_.dropped();
      log("send to host {} failed: {}", msg.hdr.dst.host, e.what());
      return;
    }
    counter_.sent(msg.hdr.job, msg.hdr.src.host, msg.hdr.dst.host, msg.hdr.kind, bytes);
  }

  void flush_outbox() {
    std::deque<wire_message> batch;
    std::map<std::uint32_t, std::string> peers;
    {
      std::lock_guard lock{mu_};
      batch.swap(outbox_);
      peers = peers_;
    }
    for (auto& m : batch) send_remote(m, peers[m.hdr.dst.host]);
  }

  void receive_one() {
    std::vector<zmq::message_t> parts;
    try {
      if (!zmq::recv_multipart(router_, std::back_inserter(parts), zmq::recv_flags::dontwait))
        return;
    } catch (const zmq::error_t& e) {
      log("receive failed: {}", e.what());
      return;
    }
    // parts[0] is the sender's routing id (added by ROUTER), parts[1] the header.
    auto bad = [&](const coach::error& e, bool foreign) {
      std::lock_guard lock{recv_mu_};
      ++(foreign ? recv_.foreign : recv_.malformed);
      log("dropped a message from '{}': {}", parts.empty() ? "" : parts[0].to_string(), e.message);
    };
    if (parts.size() < 2) return bad({errc::protocol_error, "no header frame"}, false);
    auto hdr =
        codec::decode_header({static_cast<const std::byte*>(parts[1].data()), parts[1].size()});
    if (!hdr) {
      const bool foreign = hdr.error().message.find("foreign wire version") != std::string::npos;
      return bad(hdr.error(), foreign);
    }
    sizes_.clear();
    for (std::size_t i = 2; i < parts.size(); ++i) sizes_.push_back(parts[i].size());
    if (auto ok = codec::check_frames(*hdr, sizes_); !ok) return bad(ok.error(), false);
    wire_message msg;
    msg.hdr = std::move(hdr->env);
    std::size_t bytes = parts[1].size();
    for (std::size_t i = 2; i < parts.size(); ++i) {
      auto owner = std::make_shared<zmq::message_t>(std::move(parts[i]));
      bytes += owner->size();
      msg.frames.push_back(
          frame{owner, static_cast<const std::byte*>(owner->data()), owner->size()});
    }
    auto dst = msg.hdr.dst.host == opt_.host ? routes_.find(msg.hdr.dst) : caf::actor{};
    {
      std::lock_guard lock{recv_mu_};
      if (!dst) {
        ++recv_.unknown_dst;
      } else {
        ++recv_.messages;
        recv_.bytes += bytes;
      }
    }
    if (!dst)
      return log("no actor {} on host {} (message {})", msg.hdr.dst.id, msg.hdr.dst.host,
                 to_string(msg.hdr.kind));
    caf::anon_send(dst, std::move(msg));
  }

  void run() {
    while (!stop_) {
      zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 2, std::chrono::milliseconds(200));
      } catch (const zmq::error_t&) {
        continue;  // EINTR
      }
      if (items[1].revents & ZMQ_POLLIN) {
        std::uint64_t n;
        [[maybe_unused]] auto r = ::read(wake_fd_, &n, sizeof n);
      }
      flush_outbox();
      // Drain what arrived, a bounded batch at a time so sends are not starved.
      for (int i = 0; i < 256; ++i) {
        if (!(router_.get(zmq::sockopt::events) & ZMQ_POLLIN)) break;
        receive_one();
      }
    }
    flush_outbox();
    dealers_.clear();
    router_.close();
  }

  zmq_transport_options opt_;
  zmq::context_t ctx_{1};
  zmq::socket_t router_;
  std::string bound_;
  int wake_fd_ = -1;
  std::thread io_;
  std::atomic<bool> stop_{false};

  std::mutex mu_;  // guards outbox_ and peers_
  std::deque<wire_message> outbox_;
  std::map<std::uint32_t, std::string> peers_;

  // I/O thread only.
  std::map<std::uint32_t, zmq::socket_t> dealers_;
  std::vector<std::size_t> sizes_;
  std::vector<std::byte> header_;

  detail::route_table routes_;
  detail::traffic_counter counter_;
  mutable std::mutex recv_mu_;
  receive_stats recv_;
  std::mutex log_mu_;
  std::chrono::steady_clock::time_point log_window_{};
  int log_lines_ = 0;
};

}  // namespace

result<std::shared_ptr<zmq_transport>> zmq_transport::start(zmq_transport_options opt) {
  auto t = std::make_shared<zmq_transport_impl>(std::move(opt));
  if (auto ok = t->open(); !ok) return std::unexpected(ok.error());
  return std::shared_ptr<zmq_transport>(std::move(t));
}

}  // namespace coach::actors
