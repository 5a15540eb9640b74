// actors::zmq_transport: data connections (actors/zmq_transport_impl.hpp; docs/security.md
// "Data connections", docs/wire.md "Data connections"). The sending side says hello over its
// CURVE DEALER, waits for the welcome (its messages wait in the host's queue meanwhile), then
// connects a plain DEALER to the peer's data ROUTER with the welcome's token and sends every
// message sealed (transport/frame_seal.hpp). The receiving side answers hellos, admits only the
// tokens of its sessions (ZAP, domain "coach-data"), and opens what arrives; what does not open
// is counted (receive_stats: stale, forged, malformed) and dropped.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "actors/zmq_transport_impl.hpp"
#include "transport/data_handshake.hpp"
#include "wire/codec.hpp"

namespace coach::actors::detail {
namespace {

using coach::transport_logic::data_protection;
using coach::transport_logic::frame_opener;
using coach::transport_logic::frame_sealer;
using coach::transport_logic::raw_key;
using coach::transport_logic::seal_cipher;
using coach::transport_logic::seal_nonce;
using coach::transport_logic::seal_params;

/// A hello unanswered this long is said again (with a new nonce).
constexpr auto hello_retry = std::chrono::seconds(1);
/// Sessions a node keeps at most (each an authorized peer's handshake); the oldest go first.
constexpr std::size_t max_sessions = 4096;

bool raw_of(std::string_view z85, raw_key& out) {
  if (z85.size() != 40) return false;
  const std::string text(z85);
  return zmq_z85_decode(out.data(), text.c_str()) != nullptr;
}

/// The peer's data address: the IP of its CURVE address (what this node reaches it at), with
/// the port its welcome names.
std::string data_address(std::string_view curve_address, std::uint16_t port) {
  const auto colon = curve_address.rfind(':');
  return coach::format("{}:{}", curve_address.substr(0, colon), port);
}

/// Frees a buffer handed to ZeroMQ without copying (a frame's owner, the tags part).
void release_borrowed(void*, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}

/// A frame over `data` that keeps `owner` alive until ZeroMQ has sent it.
zmq::message_t borrowed(const std::byte* data, std::size_t bytes,
                        std::shared_ptr<const void> owner) {
  return zmq::message_t(const_cast<std::byte*>(data), bytes, release_borrowed,
                        new std::shared_ptr<const void>(std::move(owner)));
}

std::span<const std::byte> bytes_of(const zmq::message_t& m) noexcept {
  return {static_cast<const std::byte*>(m.data()), m.size()};
}

}  // namespace

bool is_data_hello(const zmq::message_t& frame) noexcept {
  return coach::transport_logic::looks_like_hello(bytes_of(frame));
}

bool is_data_welcome(const zmq::message_t& frame) noexcept {
  return coach::transport_logic::looks_like_welcome(bytes_of(frame));
}

bool zmq_transport_impl::sealing() const noexcept {
  return opt_.security.key && opt_.data_protection != data_protection::none && data_router_;
}

void zmq_transport_impl::open_data() {
  const auto& key = opt_.security.key;
  if (!key || !raw_of(key->public_key, own_public_) || !raw_of(key->secret_key, own_secret_))
    return;
  data_router_ = zmq::socket_t(ctx_, zmq::socket_type::router);
  data_router_.set(zmq::sockopt::linger, 0);
  data_router_.set(zmq::sockopt::zap_domain, "coach-data");
  data_router_.set(zmq::sockopt::plain_server, true);
  data_router_.set(zmq::sockopt::rcvhwm, opt_.send_hwm);
  data_router_.set(zmq::sockopt::handshake_ivl, int(opt_.handshake_interval.count()));
  if (opt_.max_frame > 0)
    data_router_.set(zmq::sockopt::maxmsgsize,
                     std::int64_t(opt_.max_frame + coach::transport_logic::seal_counter_bytes));
  const auto colon = bound_.rfind(':');
  data_router_.bind(opt_.data_listen.empty() ? bound_.substr(0, colon) + ":0" : opt_.data_listen);
  const auto at = data_router_.get(zmq::sockopt::last_endpoint);
  data_port_ = static_cast<std::uint16_t>(std::stoul(at.substr(at.rfind(':') + 1)));
}

void zmq_transport_impl::forget_data_link(std::uint32_t host) {
  if (data_links_.erase(host) > 0) ++data_links_made_;
}

zmq_transport_impl::sent zmq_transport_impl::say_hello(std::uint32_t host, zmq::socket_t& curve) {
  data_link link;
  link.nonce = coach::transport_logic::random_nonce();
  link.since = clock::now();
  {
    std::lock_guard lock{mu_};
    const auto* p = peers_.find_peer(host);
    if (!p) return sent::failed;
    link.address = p->address;
    link.server_key = opt_.security.server_key_for(p->key);
  }
  const auto hello = encode(coach::transport_logic::data_hello{
      opt_.host, link.nonce, opt_.data_protection, coach::transport_logic::aes256gcm_available()});
  try {
    if (!curve.send(zmq::buffer(hello), zmq::send_flags::dontwait)) return sent::would_block;
  } catch (const zmq::error_t& e) {
    log("cannot say hello to host {}: {}", host, e.what());
    return sent::failed;
  }
  data_links_.emplace(host, std::move(link));
  return sent::would_block;  // the message waits in the host's queue for the welcome
}

zmq_transport_impl::sent zmq_transport_impl::send_sealed(const wire_message& msg,
                                                         zmq::socket_t& curve) {
  const std::uint32_t host = msg.hdr.dst.host;
  const auto now = clock::now();
  auto it = data_links_.find(host);
  if (it != data_links_.end() && !it->second.sealer && now - it->second.since > hello_retry) {
    data_links_.erase(it);  // unanswered: said again with a new nonce
    it = data_links_.end();
  }
  if (it == data_links_.end()) return say_hello(host, curve);
  auto& link = it->second;
  if (!link.sealer) return sent::would_block;
  sizes_.clear();
  for (const auto& f : msg.frames) sizes_.push_back(f.bytes);
  codec::encode_header(msg.hdr, sizes_, header_);
  const std::size_t n = msg.frames.size();
  zmq::message_t head(frame_sealer::head_bytes(header_.size()));
  auto tags = std::make_shared<std::pair<std::vector<std::byte>, std::shared_ptr<const void>>>(
      std::vector<std::byte>(frame_sealer::tags_bytes(n)), msg.sent);
  std::vector<zmq::message_t> parts;
  std::vector<std::span<const std::byte>> in;
  std::vector<std::byte*> out;
  parts.reserve(n);
  for (const auto& f : msg.frames) {
    in.emplace_back(f.data, f.bytes);
    if (link.sealer->writes_payloads()) {
      parts.emplace_back(f.bytes);
      out.push_back(static_cast<std::byte*>(parts.back().data()));
    } else {
      parts.push_back(borrowed(f.data, f.bytes, f.owner));
    }
  }
  link.sealer->seal(header_, in, {static_cast<std::byte*>(head.data()), head.size()}, out,
                    tags->first);
  std::size_t bytes = head.size() + tags->first.size();
  try {
    if (!link.socket->send(head, zmq::send_flags::sndmore | zmq::send_flags::dontwait))
      return sent::would_block;  // its counters are skipped: a gap the receiver allows
    for (auto& p : parts) {
      bytes += p.size();
      link.socket->send(p, zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    }
    auto last = borrowed(tags->first.data(), tags->first.size(), tags);
    link.socket->send(last, zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    counter_.dropped();
    log("send to host {} failed: {}", host, e.what());
    return sent::failed;
  }
  counter_.sent(msg.hdr.job, msg.hdr.src.host, host, msg.hdr.kind, bytes);
  return sent::ok;
}

void zmq_transport_impl::answer_hello(std::vector<zmq::message_t>& parts) {
  const auto hello = coach::transport_logic::parse_hello(bytes_of(parts[1]));
  raw_key client{};
  const char* user = nullptr;
  try {
    user = parts[1].gets("User-Id");  // the client's key, as the ZAP answer named it
  } catch (const zmq::error_t&) {
  }
  if (!data_router_ || !user || !raw_of(user, client) || !hello) {
    recv_.dropped(coach::transport_logic::receive_counter::drop::malformed);
    log_dropped("dropped a data connection hello: {}",
                data_router_ ? "no client key, or an unknown protection" : "this node has no key");
    return;
  }
  coach::transport_logic::data_welcome welcome{
      .client_nonce = hello->nonce,
      .server_nonce = coach::transport_logic::random_nonce(),
      .cipher = hello->mode == data_protection::encrypt && hello->aes &&
                        coach::transport_logic::aes256gcm_available()
                    ? seal_cipher::aes256gcm
                    : seal_cipher::chacha20poly1305,
      .token = coach::transport_logic::random_token(),
      .port = data_port_};
  const seal_params params{hello->mode, welcome.cipher};
  auto key = coach::transport_logic::derive_seal_key(
      false, own_public_, own_secret_, client, welcome.client_nonce, welcome.server_nonce, params);
  if (!key) return log_dropped("dropped a data connection hello: {}", key.error().message);
  // A new hello on a CURVE connection replaces that connection's session (its sender forgot
  // the old data connection); a session never used expires.
  const auto now = clock::now();
  const auto curve_id = parts[0].to_string();
  std::erase_if(data_sessions_, [&](const auto& s) {
    return s.second.curve_id == curve_id ||
           (!s.second.admitted && now - s.second.since > 2 * opt_.handshake_interval);
  });
  while (data_sessions_.size() >= max_sessions)
    data_sessions_.erase(std::min_element(
        data_sessions_.begin(), data_sessions_.end(),
        [](const auto& a, const auto& b) { return a.second.since < b.second.since; }));
  data_sessions_[welcome.token] = {hello->host, curve_id,
                                   std::make_unique<frame_opener>(*key, params), now, false};
  const auto answer = encode(welcome);
  std::lock_guard lock{sock_mu_};
  if (closed_) return;
  try {
    router_.send(parts[0], zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    router_.send(zmq::buffer(answer), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    log("cannot answer a data connection hello from host {}: {}", hello->host, e.what());
  }
  note_readable(router_);
}

void zmq_transport_impl::accept_welcome(const zmq::message_t& frame) {
  const auto welcome = coach::transport_logic::parse_welcome(bytes_of(frame));
  if (!welcome) return;
  const auto& client_nonce = welcome->client_nonce;
  const auto& server_nonce = welcome->server_nonce;
  const auto cipher = welcome->cipher;
  const auto& token = welcome->token;
  const auto port = welcome->port;
  std::lock_guard lock{sock_mu_};
  if (closed_) return;
  auto it = std::find_if(data_links_.begin(), data_links_.end(), [&](const auto& l) {
    return !l.second.sealer && l.second.nonce == client_nonce;
  });
  if (it == data_links_.end()) return;  // an answer to a hello said again since: ignored
  auto& [host, link] = *it;
  const seal_params params{opt_.data_protection, cipher};
  raw_key server{};
  auto key = raw_of(link.server_key, server)
                 ? coach::transport_logic::derive_seal_key(true, own_public_, own_secret_, server,
                                                           client_nonce, server_nonce, params)
                 : fail(errc::invalid_argument, "the peer's key '{}' is not Z85", link.server_key);
  const bool cipher_ok =
      cipher == seal_cipher::chacha20poly1305 ||
      (cipher == seal_cipher::aes256gcm && coach::transport_logic::aes256gcm_available());
  if (!key || !cipher_ok) {
    log("cannot open a data connection to host {}: {}", host,
        key ? "the peer chose a cipher this CPU lacks" : key.error().message);
    data_links_.erase(it);
    return;
  }
  try {
    zmq::socket_t s(ctx_, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::sndhwm, opt_.send_hwm);
    s.set(zmq::sockopt::reconnect_ivl, int(opt_.reconnect_interval.count()));
    s.set(zmq::sockopt::handshake_ivl, int(opt_.handshake_interval.count()));
    s.set(zmq::sockopt::routing_id,
          coach::format("{}.{}.{}.d{}", opt_.host, host, instance_, ++data_links_made_));
    s.set(zmq::sockopt::plain_username, "coach");
    s.set(zmq::sockopt::plain_password, token);
    s.connect(data_address(link.address, port));
    link.socket = std::move(s);
  } catch (const zmq::error_t& e) {
    log("cannot open a data connection to host {}: {}", host, e.what());
    data_links_.erase(it);
    return;
  }
  link.sealer = std::make_unique<frame_sealer>(*key, params);
  queued_ = true;  // what waited for the welcome goes now
  wake();
}

zap_verdict zmq_transport_impl::admit_data(std::string_view mechanism, std::string_view address,
                                           std::string_view token) {
  if (mechanism != "PLAIN")
    return {refusal_reason::mechanism,
            coach::format("a data connection from {} without a token", address)};
  // A token admits again (ZeroMQ reconnects a data connection that dropped with it): who took it
  // off the wire still cannot seal, and the session's counter refuses replays on any connection.
  auto it = data_sessions_.find(std::string(token));
  if (it == data_sessions_.end())
    return {refusal_reason::key,
            coach::format("a data connection from {} with an unknown token", address)};
  it->second.admitted = true;
  return {};
}

void zmq_transport_impl::deliver_sealed(std::vector<zmq::message_t>& parts) {
  using why = coach::transport_logic::receive_counter::drop;
  const char* token = nullptr;
  try {
    if (parts.size() >= 3) token = parts[1].gets("User-Id");  // the ZAP answer's: the token
  } catch (const zmq::error_t&) {
  }
  auto it = token ? data_sessions_.find(token) : data_sessions_.end();
  if (it == data_sessions_.end()) {
    recv_.dropped(why::malformed);
    return log_dropped("dropped a message on a data connection of no session ({} parts)",
                       parts.size());
  }
  auto& session = it->second;
  std::vector<std::span<std::byte>> payloads;
  for (std::size_t i = 2; i + 1 < parts.size(); ++i)
    payloads.emplace_back(static_cast<std::byte*>(parts[i].data()), parts[i].size());
  const auto& tags = parts.back();
  auto header =
      session.opener->open({static_cast<std::byte*>(parts[1].data()), parts[1].size()}, payloads,
                           {static_cast<const std::byte*>(tags.data()), tags.size()});
  if (!header) {
    using coach::transport_logic::open_refusal;
    recv_.dropped(header.error() == open_refusal::stale    ? why::stale
                  : header.error() == open_refusal::forged ? why::forged
                                                           : why::malformed);
    return log_dropped("refused a sealed message from host {}: {}", session.host,
                       to_string(header.error()));
  }
  deliver_decoded(*header, parts, 2, parts.size() - 1, session.curve_id,
                  coach::format("host {} (data connection)", session.host));
}

}  // namespace coach::actors::detail
