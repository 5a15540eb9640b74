// actors/curve_keys: key files as `coach keygen` writes them, the authorized-keys directory, and
// who a server lets in (peer_authorizer), without sockets.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "actors/curve_keys.hpp"

namespace {

namespace fs = std::filesystem;
using namespace coach::actors;
using coach::errc;

class curve_keys : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("coach-keys-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    for (const char* v : {"COACH_KEY", "COACH_AUTHORIZED_KEYS", "COACH_SERVER_KEY"}) ::unsetenv(v);
  }
  void TearDown() override { fs::remove_all(dir_); }

  key_pair make(const fs::path& dir, const std::string& name) {
    auto keys = generate_key_pair();
    EXPECT_TRUE(keys) << keys.error().to_string();
    auto ok = write_key_files(dir, name, *keys);
    EXPECT_TRUE(ok) << ok.error().to_string();
    return *keys;
  }

  fs::path dir_;
};

TEST_F(curve_keys, keygen_files_read_back_with_the_secret_file_private) {
  const auto keys = make(dir_, "node-a");
  EXPECT_TRUE(is_z85_key(keys.public_key));
  EXPECT_TRUE(is_z85_key(keys.secret_key));
  EXPECT_NE(keys.public_key, keys.secret_key);

  auto back = read_key_file(dir_ / "node-a.key");
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->public_key, keys.public_key);
  EXPECT_EQ(back->secret_key, keys.secret_key);
  auto pub = read_public_key(dir_ / "node-a.pub");
  ASSERT_TRUE(pub) << pub.error().to_string();
  EXPECT_EQ(*pub, keys.public_key);
  EXPECT_EQ(*read_public_key(dir_ / "node-a.key"), keys.public_key);

  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "node-a.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);  // created by keygen: the owner's only
  // The .pub file holds no secret.
  std::ifstream in(dir_ / "node-a.pub");
  const std::string text{std::istreambuf_iterator<char>(in), {}};
  EXPECT_EQ(text.find(keys.secret_key), std::string::npos);
}

TEST_F(curve_keys, keygen_never_overwrites_a_key) {
  make(dir_, "n");
  auto again = generate_key_pair();
  auto ok = write_key_files(dir_, "n", *again);
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, errc::invalid_argument);
  EXPECT_EQ(ok.error().message,
            "'" + (dir_ / "n.key").string() + "' exists; remove it or choose another --name");
  EXPECT_FALSE(write_key_files(dir_, "a/b", *again));
  EXPECT_FALSE(write_key_files(dir_, "", *again));
}

TEST_F(curve_keys, malformed_or_mismatched_key_files_are_refused_naming_the_file) {
  fs::create_directories(dir_);
  const auto a = *generate_key_pair();
  const auto b = *generate_key_pair();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  };
  auto p = write("mixed.key", "public-key = " + a.public_key + "\nsecret-key = " + b.secret_key);
  auto r = read_key_file(p);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "key file '" + p.string() + "': its public key is not the one of its secret key");

  p = write("short.key", "# a comment\nsecret-key = abc\n");
  r = read_key_file(p);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::parse_error);
  EXPECT_EQ(r.error().message,
            "key file '" + p.string() + "' line 2: secret-key is not a 40-character Z85 key");

  p = write("odd.key", "private = " + a.secret_key + "\n");
  EXPECT_EQ(
      read_key_file(p).error().message,
      "key file '" + p.string() + "' line 1: unknown name 'private' (public-key, secret-key)");

  p = write("only.pub", "public-key = " + a.public_key + "\n");
  EXPECT_EQ(read_key_file(p).error().message,
            "key file '" + p.string() + "' has no 'secret-key = KEY' line (a .pub file?)");
  EXPECT_EQ(read_key_file(dir_ / "none.key").error().code, errc::not_found);
  // Derived from the secret alone when the public line is missing.
  p = write("secret-only.key", "secret-key = " + a.secret_key + "\n");
  EXPECT_EQ(read_key_file(p)->public_key, a.public_key);
}

TEST_F(curve_keys, authorized_keys_are_the_pub_files_and_bad_ones_are_named) {
  const auto a = make(dir_, "a");
  const auto b = make(dir_, "b");
  std::ofstream(dir_ / "broken.pub") << "public-key = nope\n";
  std::ofstream(dir_ / "notes.txt") << "public-key = " << (*generate_key_pair()).public_key;
  auto keys = read_authorized_keys(dir_);
  ASSERT_TRUE(keys) << keys.error().to_string();
  EXPECT_EQ(keys->keys, (std::set<std::string>{a.public_key, b.public_key}));
  ASSERT_EQ(keys->problems.size(), 1u);
  EXPECT_NE(keys->problems[0].find("broken.pub"), std::string::npos);
  EXPECT_EQ(read_authorized_keys(dir_ / "missing").error().code, errc::not_found);
}

TEST(loopback, addresses) {
  for (const char* ip : {"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"})
    EXPECT_TRUE(is_loopback_address(ip)) << ip;
  for (const char* ip : {"10.77.0.2", "128.0.0.1", "::", "fe80::1", "", "localhost", "127.0.0"})
    EXPECT_FALSE(is_loopback_address(ip)) << ip;
}

TEST_F(curve_keys, without_a_key_a_server_accepts_plain_loopback_connections_only) {
  const peer_authorizer plain;
  EXPECT_TRUE(plain.check("NULL", "127.0.0.1", "").accepted());
  EXPECT_TRUE(plain.check("NULL", "::1", "").accepted());
  const auto far = plain.check("NULL", "10.77.0.2", "");
  EXPECT_EQ(far.why, refusal_reason::address);
  EXPECT_EQ(far.text, "10.77.0.2 is not loopback and this node has no key (coach keygen, --key)");
  EXPECT_EQ(plain.check("CURVE", "127.0.0.1", "x").why, refusal_reason::mechanism);
}

TEST_F(curve_keys, a_server_with_a_key_accepts_authorized_keys_read_at_each_connection) {
  const auto mine = make(dir_, "node");
  const auto user = make(dir_ / "elsewhere", "user");
  const peer_authorizer keyed(dir_);
  EXPECT_TRUE(keyed.check("CURVE", "10.77.0.2", mine.public_key).accepted());
  auto refused = keyed.check("CURVE", "10.77.0.2", user.public_key);
  EXPECT_EQ(refused.why, refusal_reason::key);
  EXPECT_EQ(refused.text, "key " + user.public_key.substr(0, 8) + "... from 10.77.0.2 is not in '" +
                              dir_.string() + "'");
  refused = keyed.check("NULL", "127.0.0.1", "");
  EXPECT_EQ(refused.why, refusal_reason::mechanism);  // loopback is no pass once keys are used

  // Rotation: the new key is accepted once its file is there, the old one refused once its
  // file is gone; no restart in between.
  fs::copy_file(dir_ / "elsewhere" / "user.pub", dir_ / "user.pub");
  EXPECT_TRUE(keyed.check("CURVE", "10.77.0.2", user.public_key).accepted());
  fs::remove(dir_ / "node.pub");
  EXPECT_EQ(keyed.check("CURVE", "10.77.0.2", mine.public_key).why, refusal_reason::key);
}

// Issue 37: a secret key file others could read was accepted without a word.
TEST_F(curve_keys, a_secret_key_others_can_read_is_accepted_with_a_warning_naming_the_fix) {
  make(dir_, "node");
  const auto file = (dir_ / "node.key").string();
  auto kept = load_security(file, "", "");
  ASSERT_TRUE(kept) << kept.error().to_string();
  EXPECT_TRUE(kept->warnings.empty());  // keygen's 0600
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                            fs::perms::others_read);
  auto open = load_security(file, "", "");
  ASSERT_TRUE(open) << open.error().to_string();
  ASSERT_EQ(open->warnings.size(), 1u);
  EXPECT_EQ(open->warnings[0], "--key " + file +
                                   ": its secret key can be read by others than its owner "
                                   "(mode 0644); `chmod 600 " +
                                   file + "`");
}

TEST_F(curve_keys, security_from_flags_or_the_environment) {
  const auto node = make(dir_, "node");
  const auto sched = make(dir_ / "other", "sched");
  auto none = load_security("", "", "");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->key);

  auto s = load_security((dir_ / "node.key").string(), "", "");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->key->public_key, node.public_key);
  EXPECT_EQ(s->authorized_dir, dir_);                 // the key file's directory
  EXPECT_EQ(s->server_key_for(""), node.public_key);  // a cluster-wide key
  EXPECT_EQ(s->server_key_for(sched.public_key), sched.public_key);

  ::setenv("COACH_KEY", (dir_ / "node.key").c_str(), 1);
  ::setenv("COACH_SERVER_KEY", (dir_ / "other" / "sched.pub").c_str(), 1);
  ::setenv("COACH_AUTHORIZED_KEYS", (dir_ / "other").c_str(), 1);
  s = load_security("", "", "");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->key->public_key, node.public_key);
  EXPECT_EQ(s->server_key_for(""), sched.public_key);
  EXPECT_EQ(s->authorized_dir, dir_ / "other");
  for (const char* v : {"COACH_KEY", "COACH_AUTHORIZED_KEYS", "COACH_SERVER_KEY"}) ::unsetenv(v);

  auto bad = load_security((dir_ / "missing.key").string(), "", "");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "--key: key file '" + (dir_ / "missing.key").string() + "' not found");
  bad = load_security((dir_ / "node.key").string(), (dir_ / "nowhere").string(), "");
  EXPECT_EQ(bad.error().message, "--authorized-keys: authorized-keys directory '" +
                                     (dir_ / "nowhere").string() + "' not found");
  bad = load_security("", "", (dir_ / "node.pub").string());
  EXPECT_EQ(bad.error().code, errc::invalid_argument);
  EXPECT_EQ(bad.error().message,
            "--authorized-keys and --server-key need a key of this process: give --key FILE or "
            "set COACH_KEY (coach keygen DIR makes one)");
}

}  // namespace

namespace coach::actors {
namespace {

TEST(admin_token, is_64_hex_digits_made_from_the_secret_key_alone) {
  auto a = generate_key_pair();
  auto b = generate_key_pair();
  ASSERT_TRUE(a && b);
  const auto ta = admin_token(*a);
  ASSERT_EQ(ta.size(), 64u);
  EXPECT_EQ(ta.find_first_not_of("0123456789abcdef"), std::string::npos) << ta;
  EXPECT_EQ(admin_token(*a), ta) << "the same key, the same token";
  EXPECT_NE(admin_token(*b), ta);
  key_pair public_only{a->public_key, ""};
  EXPECT_EQ(admin_token(public_only), "") << "the public key alone makes none";
  EXPECT_EQ(ta.find(a->public_key), std::string::npos);
}

}  // namespace
}  // namespace coach::actors
