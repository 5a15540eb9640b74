// transport::frame_seal: a sealed message opens to exactly what was sealed, under every mode and
// cipher and for every size; a tampered byte (header, payload or tag), a replayed message, two
// messages swapped and two frames swapped are refused with their reason and leave the opener as
// it was; both ends derive the same key, and other nonces, another mode or another key pair
// give another; OpenSSL and libsodium seal the same bytes and open each other's. No sockets.
#include "transport/frame_seal.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace coach::transport_logic {
namespace {

using bytes = std::vector<std::byte>;

raw_key secret_of(unsigned char seed) {
  raw_key k{};
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<unsigned char>(seed * 31 + i * 7);
  return k;
}

seal_nonce nonce_filled(unsigned char v) {
  seal_nonce n{};
  n.fill(v);
  return n;
}

bytes pattern(std::size_t n, unsigned seed) {
  bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return b;
}

/// One sealed message as the wire carries it: the head part, the payload parts, the tags part.
struct sealed {
  bytes head;
  std::vector<bytes> payloads;
  bytes tags;
};

sealed seal_one(frame_sealer& s, const bytes& header, const std::vector<bytes>& payloads) {
  sealed m;
  m.head.resize(frame_sealer::head_bytes(header.size()));
  m.tags.resize(frame_sealer::tags_bytes(payloads.size()));
  m.payloads = payloads;  // encrypt: overwritten with the ciphertext below; else sent as is
  std::vector<std::span<const std::byte>> in;
  std::vector<std::byte*> out;
  std::vector<bytes> clear = payloads;
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    in.emplace_back(clear[i]);
    out.push_back(m.payloads[i].data());
  }
  s.seal(header, in, m.head, out, m.tags);
  return m;
}

/// Opens a copy of `m` (the opener decrypts in place); the clear header and payloads, or why not.
std::expected<std::pair<bytes, std::vector<bytes>>, open_refusal> open_copy(frame_opener& o,
                                                                            sealed m) {
  std::vector<std::span<std::byte>> parts;
  for (auto& p : m.payloads) parts.emplace_back(p);
  auto header = o.open(m.head, parts, m.tags);
  if (!header) return std::unexpected(header.error());
  return std::pair{bytes(header->begin(), header->end()), m.payloads};
}

/// Sealer and opener of one direction, keys derived as the two ends of a connection do.
struct connection {
  seal_key client_key, server_key;
  explicit connection(seal_params p, unsigned char nonce_a = 1, unsigned char nonce_b = 2) {
    const auto a = secret_of(1), b = secret_of(2);
    client_key = *derive_seal_key(true, public_key_of(a), a, public_key_of(b),
                                  nonce_filled(nonce_a), nonce_filled(nonce_b), p);
    server_key = *derive_seal_key(false, public_key_of(b), b, public_key_of(a),
                                  nonce_filled(nonce_a), nonce_filled(nonce_b), p);
  }
};

class frame_seal_modes : public ::testing::TestWithParam<seal_params> {
 protected:
  void SetUp() override {
    if (GetParam().cipher == seal_cipher::aes256gcm &&
        GetParam().mode == data_protection::encrypt && !aes256gcm_available())
      GTEST_SKIP() << "this CPU has no AES-NI: libsodium's AES-256-GCM is not available";
    conn_.emplace(GetParam());
    sealer_.emplace(conn_->client_key, GetParam());
    opener_.emplace(conn_->server_key, GetParam());
  }
  std::optional<connection> conn_;
  std::optional<frame_sealer> sealer_;
  std::optional<frame_opener> opener_;
  const bytes header_ = pattern(45, 3);
  const std::vector<bytes> payloads_{pattern(0, 1), pattern(1, 2), pattern(17, 3),
                                     pattern(4096 + 5, 4), pattern(std::size_t(1) << 20, 5)};
};

TEST_P(frame_seal_modes, a_sealed_message_opens_to_what_was_sealed) {
  const auto m = seal_one(*sealer_, header_, payloads_);
  EXPECT_EQ(m.head.size(), 8u + 45u);
  EXPECT_EQ(m.tags.size(), 6u * 16u);
  // Encrypting hides the bytes; authenticating sends them as they are.
  const bool encrypt = GetParam().mode == data_protection::encrypt;
  EXPECT_EQ(std::memcmp(m.head.data() + 8, header_.data(), header_.size()) == 0, !encrypt);
  EXPECT_EQ(m.payloads[4] == payloads_[4], !encrypt);
  auto got = open_copy(*opener_, m);
  ASSERT_TRUE(got) << to_string(got.error());
  EXPECT_EQ(got->first, header_);
  EXPECT_EQ(got->second, payloads_);
  EXPECT_EQ(sealer_->next_counter(), 6u);  // one nonce per part
  EXPECT_EQ(opener_->next_counter(), 6u);
}

TEST_P(frame_seal_modes, a_byte_altered_anywhere_is_refused_as_forged) {
  const auto m = seal_one(*sealer_, header_, payloads_);
  auto in_header = m, in_payload = m, in_tag = m, in_counter = m;
  in_header.head[8 + 10] ^= std::byte{1};
  in_payload.payloads[3][4000] ^= std::byte{0x80};
  in_tag.tags[16 * 5 + 3] ^= std::byte{4};
  in_counter.head[0] ^= std::byte{1};  // counter 1: authentic parts under the wrong nonces
  for (const auto* bad : {&in_header, &in_payload, &in_tag, &in_counter}) {
    auto got = open_copy(*opener_, *bad);
    ASSERT_FALSE(got);
    EXPECT_EQ(got.error(), open_refusal::forged);
    EXPECT_EQ(opener_->next_counter(), 0u);  // nothing accepted, nothing moved on
  }
  EXPECT_TRUE(open_copy(*opener_, m));  // the genuine message still opens
}

TEST_P(frame_seal_modes, a_replayed_message_is_refused_as_stale) {
  const auto m = seal_one(*sealer_, header_, payloads_);
  ASSERT_TRUE(open_copy(*opener_, m));
  auto again = open_copy(*opener_, m);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error(), open_refusal::stale);
}

TEST_P(frame_seal_modes, of_two_messages_swapped_the_later_opens_and_the_earlier_is_stale) {
  const auto first = seal_one(*sealer_, header_, {pattern(100, 1)});
  const auto second = seal_one(*sealer_, header_, {pattern(100, 2)});
  auto got = open_copy(*opener_, second);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->second[0], pattern(100, 2));
  auto late = open_copy(*opener_, first);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error(), open_refusal::stale);
}

TEST_P(frame_seal_modes, two_frames_swapped_in_a_message_are_refused_as_forged) {
  auto m = seal_one(*sealer_, header_, {pattern(64, 1), pattern(64, 2)});
  std::swap(m.payloads[0], m.payloads[1]);
  auto got = open_copy(*opener_, m);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error(), open_refusal::forged);
}

TEST_P(frame_seal_modes, a_gap_is_allowed_a_message_never_sent) {
  const auto first = seal_one(*sealer_, header_, {});
  seal_one(*sealer_, header_, {pattern(8, 1)});  // sealed, then the socket had no room
  const auto third = seal_one(*sealer_, header_, {pattern(8, 2)});
  EXPECT_TRUE(open_copy(*opener_, first));
  EXPECT_TRUE(open_copy(*opener_, third));
  EXPECT_EQ(opener_->next_counter(), 5u);
}

TEST_P(frame_seal_modes, a_message_with_frames_missing_or_short_is_refused) {
  auto m = seal_one(*sealer_, header_, {pattern(64, 1), pattern(64, 2)});
  auto dropped = m;
  dropped.payloads.pop_back();  // the tags part still names two payloads
  auto got = open_copy(*opener_, dropped);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error(), open_refusal::malformed);
  auto truncated = m;
  truncated.head.resize(7);
  got = open_copy(*opener_, truncated);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error(), open_refusal::malformed);
  auto cut = m;
  cut.payloads[1].pop_back();
  got = open_copy(*opener_, cut);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error(), open_refusal::forged);
}

TEST_P(frame_seal_modes, another_connection_key_cannot_open_it) {
  connection other(GetParam(), 1, 3);  // the server's nonce of another handshake
  frame_opener stranger(other.server_key, GetParam());
  auto got = open_copy(stranger, seal_one(*sealer_, header_, {pattern(32, 1)}));
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error(), open_refusal::forged);
}

TEST_P(frame_seal_modes, openssl_and_libsodium_seal_the_same_bytes) {
  if (!openssl_engine_available()) GTEST_SKIP() << "this build has no OpenSSL engine";
  // Each engine opens what the other sealed, and both seal a message to the same bytes.
  for (auto [from, to] : {std::pair{seal_engine::openssl, seal_engine::libsodium},
                          std::pair{seal_engine::libsodium, seal_engine::openssl}}) {
    frame_sealer sealer(conn_->client_key, GetParam(), 0, from);
    frame_sealer twin(conn_->client_key, GetParam(), 0, to);
    frame_opener opener(conn_->server_key, GetParam(), to);
    const auto m = seal_one(sealer, header_, payloads_);
    const auto same = seal_one(twin, header_, payloads_);
    EXPECT_EQ(m.head, same.head);
    EXPECT_EQ(m.payloads, same.payloads);
    EXPECT_EQ(m.tags, same.tags);
    auto forged = m;
    forged.payloads[4][12345] ^= std::byte{2};
    EXPECT_EQ(open_copy(opener, forged).error(), open_refusal::forged);
    auto got = open_copy(opener, m);
    ASSERT_TRUE(got) << to_string(got.error());
    EXPECT_EQ(got->second, payloads_);
  }
}

INSTANTIATE_TEST_SUITE_P(
    transport, frame_seal_modes,
    ::testing::Values(seal_params{data_protection::encrypt, seal_cipher::aes256gcm},
                      seal_params{data_protection::encrypt, seal_cipher::chacha20poly1305},
                      seal_params{data_protection::authenticate, seal_cipher::chacha20poly1305}),
    [](const auto& info) {
      return info.param.mode == data_protection::authenticate ? std::string("authenticate")
             : info.param.cipher == seal_cipher::aes256gcm    ? std::string("aes256gcm")
                                                              : std::string("chacha20poly1305");
    });

TEST(derive_seal_key, both_ends_agree_and_each_input_changes_it) {
  const seal_params p{data_protection::encrypt, seal_cipher::chacha20poly1305};
  const connection c(p);
  EXPECT_EQ(c.client_key, c.server_key);
  EXPECT_NE(connection(p, 1, 3).client_key, c.client_key);  // fresh nonces: a fresh key
  EXPECT_NE(connection(p, 4, 2).client_key, c.client_key);
  EXPECT_NE(connection({data_protection::authenticate, p.cipher}).client_key, c.client_key);
  // The other direction (the server sending, as the client of its own connection) differs even
  // with one key pair for both ends (a cluster-wide key).
  const auto a = secret_of(1);
  const auto same_a = *derive_seal_key(true, public_key_of(a), a, public_key_of(a), nonce_filled(1),
                                       nonce_filled(2), p);
  const auto same_b = *derive_seal_key(false, public_key_of(a), a, public_key_of(a),
                                       nonce_filled(1), nonce_filled(2), p);
  EXPECT_EQ(same_a, same_b);
  const auto c_wrong =
      *derive_seal_key(false, public_key_of(secret_of(2)), secret_of(2),
                       public_key_of(secret_of(3)), nonce_filled(1), nonce_filled(2), p);
  EXPECT_NE(c_wrong, c.client_key);  // a third key pair cannot derive the connection's key
}

TEST(derive_seal_key, a_low_order_public_key_is_refused) {
  const auto a = secret_of(1);
  auto k = derive_seal_key(true, public_key_of(a), a, raw_key{}, nonce_filled(1), nonce_filled(2),
                           {data_protection::encrypt, seal_cipher::chacha20poly1305});
  ASSERT_FALSE(k);
  EXPECT_EQ(k.error().code, errc::invalid_argument);
  EXPECT_EQ(k.error().message, "the peer's public key is not a valid key");
}

TEST(transport_data_protection, parses_its_three_names_and_refuses_others) {
  EXPECT_EQ(*parse_data_protection("encrypt"), data_protection::encrypt);
  EXPECT_EQ(*parse_data_protection("authenticate"), data_protection::authenticate);
  EXPECT_EQ(*parse_data_protection("none"), data_protection::none);
  auto bad = parse_data_protection("sign");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "data protection 'sign' is none of encrypt, authenticate, none");
}

}  // namespace
}  // namespace coach::transport_logic
