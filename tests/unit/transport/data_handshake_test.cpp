// transport::data_handshake: a hello and a welcome come back from their bytes as they were
// encoded, at their documented sizes (docs/wire.md "Data connections"); a frame of another size,
// magic, protection or cipher is not taken for one.
#include "transport/data_handshake.hpp"

#include <gtest/gtest.h>

namespace coach::transport_logic {
namespace {

seal_nonce nonce_from(unsigned char first) {
  seal_nonce n{};
  for (std::size_t i = 0; i < n.size(); ++i) n[i] = static_cast<unsigned char>(first + i);
  return n;
}

TEST(transport_data_handshake, a_hello_round_trips_at_42_bytes) {
  const data_hello h{0x01020304u, nonce_from(9), data_protection::authenticate, true};
  const auto bytes = encode(h);
  EXPECT_EQ(bytes.size(), 42u);
  EXPECT_EQ(std::to_integer<char>(bytes[0]), 'C');
  EXPECT_EQ(std::to_integer<int>(bytes[4]), 0x04);  // host, little-endian
  const auto back = parse_hello(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->host, 0x01020304u);
  EXPECT_EQ(back->nonce, h.nonce);
  EXPECT_EQ(back->mode, data_protection::authenticate);
  EXPECT_TRUE(back->aes);
  EXPECT_TRUE(looks_like_hello(bytes));
  EXPECT_FALSE(looks_like_welcome(bytes));
}

TEST(transport_data_handshake, a_welcome_round_trips_at_103_bytes) {
  const data_welcome w{nonce_from(1), nonce_from(100), seal_cipher::aes256gcm, std::string(32, 'f'),
                       40123};
  const auto bytes = encode(w);
  EXPECT_EQ(bytes.size(), 103u);
  const auto back = parse_welcome(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->client_nonce, w.client_nonce);
  EXPECT_EQ(back->server_nonce, w.server_nonce);
  EXPECT_EQ(back->cipher, seal_cipher::aes256gcm);
  EXPECT_EQ(back->token, w.token);
  EXPECT_EQ(back->port, 40123);
}

TEST(transport_data_handshake, other_frames_are_not_taken_for_one) {
  auto hello = encode(data_hello{1, nonce_from(0), data_protection::encrypt, false});
  auto none = hello;
  none[40] = std::byte{0};  // protection none: a sender that seals nothing says no hello
  EXPECT_FALSE(parse_hello(none));
  auto magic = hello;
  magic[3] = std::byte{'2'};
  EXPECT_FALSE(parse_hello(magic));
  EXPECT_FALSE(parse_hello(std::span(hello).first(41)));
  auto welcome = encode(data_welcome{nonce_from(0), nonce_from(1), seal_cipher::chacha20poly1305,
                                     std::string(32, 'a'), 1});
  auto cipher = welcome;
  cipher[68] = std::byte{7};
  EXPECT_FALSE(parse_welcome(cipher));
  EXPECT_FALSE(parse_welcome(hello));
}

TEST(transport_data_handshake, tokens_and_nonces_are_fresh) {
  const auto t = random_token();
  EXPECT_EQ(t.size(), data_token_chars);
  EXPECT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(random_token(), t);
  EXPECT_NE(random_nonce(), random_nonce());
}

}  // namespace
}  // namespace coach::transport_logic
