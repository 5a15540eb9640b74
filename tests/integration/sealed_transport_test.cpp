// Data connections (docs/security.md "Data connections"): keyed ZeroMQ transports that encrypt
// or only authenticate what they send carry messages intact and in order, both ways, as CURVE
// alone does. Then a sender played by the test (a CURVE client with an authorized key that
// shakes hands as a node does, then seals with transport/frame_seal.hpp): a replayed message,
// a byte altered, two messages swapped and two frames swapped are refused and counted
// (receive_stats: stale, forged) and only the genuine messages arrive; a token not from a
// handshake admits no data connection, and the real one on another connection seals nothing.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <chrono>
#include <numeric>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "actors/zmq_transport.hpp"
#include "tests/integration/process_harness.hpp"
#include "tests/integration/transport_test_helpers.hpp"
#include "transport/data_handshake.hpp"
#include "wire/codec.hpp"

namespace coach::actors {
namespace {

namespace fs = std::filesystem;
namespace tl = coach::transport_logic;
using namespace std::chrono_literals;

struct sealed_transport_hosts : ::testing::Test {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  fs::path dir;
  key_pair keys;  ///< one cluster key, as the integration suite uses
  endpoint on_a{1, 100}, on_b{2, 200};
  std::unique_ptr<caf::scoped_actor> self;

  void SetUp() override {
    cfg.set("logger.console", caf::atom("none"));
    sys = std::make_unique<caf::actor_system>(cfg);
    dir =
        itest::work_dir() /
        ("sealed-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir);
    auto k = generate_key_pair();
    ASSERT_TRUE(k && write_key_files(dir, "cluster", *k));
    keys = *k;
    self = std::make_unique<caf::scoped_actor>(*sys);
  }
  void TearDown() override {
    self.reset();
    sys.reset();
  }
  std::shared_ptr<zmq_transport> start(std::uint32_t host, tl::data_protection p) {
    transport_security s;
    s.key = keys;
    s.authorized_dir = dir;
    auto t = zmq_transport::start({.host = host,
                                   .listen = "tcp://127.0.0.1:0",
                                   .security = std::move(s),
                                   .data_protection = p});
    EXPECT_TRUE(t) << t.error().to_string();
    return *t;
  }
  void deliver_to_test(zmq_transport& t, const endpoint& ep) {
    t.bind(ep, sys->spawn(forwarder, caf::actor_cast<caf::actor>(*self)));
  }
  std::optional<wire_message> await(std::chrono::milliseconds t = 3s) {
    std::optional<wire_message> got;
    (*self)->receive([&](wire_message& m) { got = std::move(m); }, caf::after(t) >> [] {});
    return got;
  }
};

/// The floats of a numbered() message's first frame.
std::vector<float> floats_of(const wire_message& m) {
  const auto& f = m.frames.at(0);
  std::vector<float> v(f.bytes / sizeof(float));
  std::memcpy(v.data(), f.data, f.bytes);
  return v;
}

std::vector<float> counted(std::size_t n, float from) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

class every_protection : public sealed_transport_hosts,
                         public ::testing::WithParamInterface<tl::data_protection> {};

TEST_P(every_protection, messages_cross_intact_and_in_order_both_ways) {
  auto a = start(1, GetParam());
  auto b = start(2, GetParam());
  a->add_peer(2, b->bound_address(), keys.public_key);
  b->add_peer(1, a->bound_address(), keys.public_key);
  deliver_to_test(*a, on_a);
  deliver_to_test(*b, on_b);
  // The first ones wait for the handshake in the host's queue; none overtakes another.
  for (int step = 0; step < 20; ++step)
    ASSERT_TRUE(a->send(numbered(on_a, on_b, step, step == 7 ? 1 << 18 : 4)));
  for (int step = 0; step < 20; ++step) {
    auto got = await();
    ASSERT_TRUE(got) << "step " << step;
    EXPECT_EQ(got->hdr.step, step);
    EXPECT_EQ(floats_of(*got), counted(step == 7 ? 1 << 18 : 4, float(step)));
  }
  ASSERT_TRUE(b->send(numbered(on_b, on_a, 99, 1 << 18)));  // 1 MiB back
  auto back = await();
  ASSERT_TRUE(back);
  EXPECT_EQ(floats_of(*back), counted(1 << 18, 99.0f));
  const auto rb = b->received();
  EXPECT_EQ(rb.messages, 20u);
  // Sealed, each message went out 8 bytes (its counter) and 16 a part (2 parts) longer than it
  // arrived: it took the data connection.
  const std::uint64_t sealing = GetParam() == tl::data_protection::none ? 0 : 20 * (8 + 2 * 16);
  EXPECT_EQ(a->traffic().total_bytes(), rb.bytes + sealing);
  EXPECT_EQ(rb.stale + rb.forged + rb.malformed, 0u);
  EXPECT_EQ(a->received().messages, 1u);
}

INSTANTIATE_TEST_SUITE_P(sealed_transport, every_protection,
                         ::testing::Values(tl::data_protection::encrypt,
                                           tl::data_protection::authenticate,
                                           tl::data_protection::none),
                         [](const auto& info) { return std::string(tl::to_string(info.param)); });

TEST_F(sealed_transport_hosts, a_restarted_peer_gets_a_new_data_connection) {
  auto a = start(1, tl::data_protection::encrypt);
  auto b = start(2, tl::data_protection::encrypt);
  const std::string addr = b->bound_address();
  a->add_peer(2, addr, keys.public_key);
  deliver_to_test(*b, on_b);
  ASSERT_TRUE(a->send(numbered(on_a, on_b, 1)));
  ASSERT_TRUE(await());
  b.reset();  // the peer goes away, its token and key with it, and comes back on its address
  transport_security s;
  s.key = keys;
  s.authorized_dir = dir;
  auto again = zmq_transport::start({.host = 2,
                                     .listen = addr,
                                     .security = std::move(s),
                                     .data_protection = tl::data_protection::encrypt});
  ASSERT_TRUE(again) << again.error().to_string();
  b = *again;
  deliver_to_test(*b, on_b);
  // What is sent before this node sees the old connection close goes to the old data connection
  // and is lost (as a message in flight to a process that died); then a new handshake.
  std::optional<wire_message> got;
  for (int step = 2; step < 60 && !got; ++step) {
    a->send(numbered(on_a, on_b, step));
    got = await(100ms);
  }
  ASSERT_TRUE(got) << "no message after the peer restarted";
  EXPECT_EQ(floats_of(*got), counted(4, float(got->hdr.step)));
  EXPECT_EQ(b->received().stale + b->received().forged + b->received().malformed, 0u);
}

tl::raw_key raw(const std::string& z85) {
  tl::raw_key k{};
  EXPECT_NE(zmq_z85_decode(k.data(), z85.c_str()), nullptr);
  return k;
}

/// A sender that shakes hands with a node as a node does, then seals what the test tells it to
/// and sends it as it is told (again, altered, out of order).
struct hand_made_sender {
  zmq::context_t ctx{1};
  zmq::socket_t curve{ctx, zmq::socket_type::dealer};
  zmq::socket_t data{ctx, zmq::socket_type::dealer};
  tl::data_welcome welcome;
  std::optional<tl::frame_sealer> sealer;
  using parts = std::vector<std::vector<std::byte>>;

  /// Hello over CURVE as host 7, welcome, then the data connection with the token.
  bool connect(const key_pair& keys, const std::string& address, tl::data_protection mode) {
    for (auto* s : {&curve, &data}) s->set(zmq::sockopt::linger, 0);
    curve.set(zmq::sockopt::curve_serverkey, keys.public_key);
    curve.set(zmq::sockopt::curve_publickey, keys.public_key);
    curve.set(zmq::sockopt::curve_secretkey, keys.secret_key);
    curve.set(zmq::sockopt::rcvtimeo, 5000);
    curve.connect(address);
    const auto nonce = tl::random_nonce();
    curve.send(zmq::buffer(tl::encode(tl::data_hello{7, nonce, mode, tl::aes256gcm_available()})),
               zmq::send_flags::none);
    zmq::message_t answer;
    if (!curve.recv(answer)) return false;
    auto w = tl::parse_welcome({static_cast<const std::byte*>(answer.data()), answer.size()});
    if (!w || w->client_nonce != nonce) return false;
    welcome = *w;
    const tl::seal_params params{mode, w->cipher};
    auto key = tl::derive_seal_key(true, raw(keys.public_key), raw(keys.secret_key),
                                   raw(keys.public_key), nonce, w->server_nonce, params);
    if (!key) return false;
    sealer.emplace(*key, params);
    return open_data(welcome.token);
  }
  bool open_data(const std::string& token) {
    data.set(zmq::sockopt::plain_username, "coach");
    data.set(zmq::sockopt::plain_password, token);
    data.connect(coach::format("tcp://127.0.0.1:{}", welcome.port));
    return true;
  }
  /// A push to `dst` of `frames` frames of 4 floats, numbered from `step`, sealed.
  parts seal(const endpoint& dst, std::int64_t step, std::size_t frames = 1) {
    envelope e;
    e.src = {7, 70};
    e.dst = dst;
    e.kind = msg_kind::push;
    e.job = 9;
    e.step = step;
    std::vector<std::vector<float>> values;
    std::vector<std::size_t> sizes;
    for (std::size_t i = 0; i < frames; ++i) {
      e.ranges.push_back({4 * i, 4 * i + 4});
      values.push_back(counted(4, float(step) + 4.0f * float(i)));
      sizes.push_back(16);
    }
    std::vector<std::byte> header;
    codec::encode_header(e, sizes, header);
    parts out{std::vector<std::byte>(tl::frame_sealer::head_bytes(header.size()))};
    std::vector<std::span<const std::byte>> in;
    std::vector<std::byte*> to;
    for (auto& v : values) {
      out.emplace_back(reinterpret_cast<const std::byte*>(v.data()),
                       reinterpret_cast<const std::byte*>(v.data() + v.size()));
      in.emplace_back(out.back());
    }
    for (std::size_t i = 1; i < out.size(); ++i) to.push_back(out[i].data());
    out.emplace_back(tl::frame_sealer::tags_bytes(frames));
    sealer->seal(header, in, out.front(), to, out.back());  // in place: encrypt overwrites
    return out;
  }
  void send(const parts& p) {
    for (std::size_t i = 0; i < p.size(); ++i)
      data.send(zmq::buffer(p[i]),
                i + 1 < p.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
};

class attacked : public sealed_transport_hosts,
                 public ::testing::WithParamInterface<tl::data_protection> {};

TEST_P(attacked, replayed_altered_and_reordered_messages_are_refused_and_counted) {
  auto b = start(2, tl::data_protection::none);  // it receives whatever the sender chose
  deliver_to_test(*b, on_b);
  hand_made_sender s;
  ASSERT_TRUE(s.connect(keys, b->bound_address(), GetParam()));
  const auto m1 = s.seal(on_b, 1);
  s.send(m1);
  auto got = await();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->hdr.step, 1);
  EXPECT_EQ(floats_of(*got), counted(4, 1.0f));

  s.send(m1);  // replayed
  ASSERT_TRUE(eventually([&] { return b->received().stale == 1; }));

  auto m2 = s.seal(on_b, 2);
  m2[1][3] ^= std::byte{0x40};  // a payload byte altered
  s.send(m2);
  ASSERT_TRUE(eventually([&] { return b->received().forged == 1; }));

  const auto m3 = s.seal(on_b, 3), m4 = s.seal(on_b, 4);
  s.send(m4);  // two messages swapped: the later one arrives, the earlier is refused
  s.send(m3);
  got = await();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->hdr.step, 4);
  ASSERT_TRUE(eventually([&] { return b->received().stale == 2; }));

  auto m5 = s.seal(on_b, 5, 2);
  std::swap(m5[1], m5[2]);  // two frames of one message swapped
  s.send(m5);
  ASSERT_TRUE(eventually([&] { return b->received().forged == 2; }));

  s.send(s.seal(on_b, 6, 2));  // and the connection still carries genuine messages
  got = await();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->hdr.step, 6);
  EXPECT_FALSE(await(200ms));  // nothing refused came through
  const auto r = b->received();
  EXPECT_EQ(r.messages, 3u);
  EXPECT_EQ(r.stale, 2u);
  EXPECT_EQ(r.forged, 2u);
  EXPECT_EQ(r.malformed, 0u);
  EXPECT_NE(to_string(r).find("stale 2, forged 2"), std::string::npos) << to_string(r);
}

INSTANTIATE_TEST_SUITE_P(sealed_transport, attacked,
                         ::testing::Values(tl::data_protection::encrypt,
                                           tl::data_protection::authenticate),
                         [](const auto& info) { return std::string(tl::to_string(info.param)); });

TEST_F(sealed_transport_hosts, only_a_token_from_a_handshake_admits_a_data_connection) {
  auto b = start(2, tl::data_protection::encrypt);
  deliver_to_test(*b, on_b);
  hand_made_sender s;
  ASSERT_TRUE(s.connect(keys, b->bound_address(), tl::data_protection::encrypt));
  s.send(s.seal(on_b, 1));
  ASSERT_TRUE(await());
  const auto refused_before = b->received().refused_key;
  hand_made_sender stranger;  // no handshake: a token of its own
  stranger.welcome = s.welcome;
  stranger.open_data(std::string(tl::data_token_chars, 'a'));
  // Refused at its every attempt (ZeroMQ tries again), counted, never admitted.
  ASSERT_TRUE(eventually([&] { return b->received().refused_key > refused_before; }));
  // One that took the real token off the wire is admitted but cannot seal: what it sends is
  // refused (here: a genuine message again, stale on any connection of the session).
  hand_made_sender thief;
  thief.welcome = s.welcome;
  thief.open_data(s.welcome.token);
  auto copy = s.seal(on_b, 2);
  s.send(copy);
  ASSERT_TRUE(await());
  thief.send(copy);
  ASSERT_TRUE(eventually([&] { return b->received().stale == 1; }));
  EXPECT_EQ(b->received().messages, 2u);
}

}  // namespace
}  // namespace coach::actors
