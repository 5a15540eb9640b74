// worker::script_bundle: a script's folder read (dot-files and __pycache__ left out, the size
// limit said in one line), packed and unpacked again byte for byte; a hostile bundle (a path
// that leaves its folder, an absolute one, a file named twice, bytes cut short or left over)
// refused in one line; a job's private folder written (modes) and removed. No sockets, no
// processes.
#include "worker/script_bundle.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace coach::worker {
namespace {

namespace fs = std::filesystem;

class script_bundle_test : public ::testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("coach-bundle-test-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  void write(const fs::path& rel, const std::string& text) {
    fs::create_directories((dir / rel).parent_path());
    std::ofstream(dir / rel, std::ios::binary) << text;
  }
};

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

TEST_F(script_bundle_test, a_folder_travels_whole_but_its_dot_files_and_caches) {
  write("train.py", "print('hi')\n");
  write("data/labels.txt", "a\nb\n");
  write("data/deep/more.bin", std::string("\0\1\2", 3));
  write(".git/config", "secret");
  write(".env", "TOKEN=1");
  write("__pycache__/train.cpython-311.pyc", "bytecode");
  write("data/__pycache__/x.pyc", "bytecode");
  fs::permissions(dir / "train.py", fs::perms::owner_exec, fs::perm_options::add);
  fs::create_directory_symlink(dir / "data", dir / "link-to-folder");  // not followed
  auto files = read_script_folder(dir.string());
  ASSERT_TRUE(files) << files.error().to_string();
  ASSERT_EQ(files->size(), 3u);
  EXPECT_EQ((*files)[0].path, "data/deep/more.bin");
  EXPECT_EQ((*files)[0].data, std::string("\0\1\2", 3));
  EXPECT_EQ((*files)[1].path, "data/labels.txt");
  EXPECT_EQ((*files)[2].path, "train.py");
  EXPECT_TRUE((*files)[2].executable);
  EXPECT_FALSE((*files)[1].executable);

  const auto packed = pack_bundle(*files);
  auto back = unpack_bundle(packed);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, *files);
}

TEST_F(script_bundle_test, a_folder_over_the_limit_is_one_line_naming_its_size_and_the_limit) {
  write("train.py", "x");
  write("big.npy", std::string(3 << 20, 'x'));
  auto files = read_script_folder(dir.string(), 2 << 20);
  ASSERT_FALSE(files);
  EXPECT_EQ(files.error().code, errc::invalid_argument);
  const auto& m = files.error().message;
  EXPECT_NE(m.find("the script's folder " + dir.string() + " holds 3.0 MiB in 2 files"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("the largest: big.npy, 3.0 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("at most 2.0 MiB"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
  EXPECT_EQ(read_script_folder((dir / "none").string()).error().code, errc::not_found);
}

TEST(script_bundle, hostile_paths_are_refused_by_name) {
  const std::pair<std::string, std::string> cases[] = {
      {"../escape.py", "leaves the bundle's folder"},
      {"a/../../escape.py", "leaves the bundle's folder"},
      {"a/..", "leaves the bundle's folder"},
      {"/etc/passwd", "is absolute"},
      {"./x.py", "'.' component"},
      {"a//b", "empty component"},
      {"a/", "empty component"},
      {std::string("a\0b", 3), "NUL"},
      {"", "empty path"},
      {std::string(5000, 'a'), "at most 4096"},
  };
  for (const auto& [path, why] : cases) {
    const bundle_file f{path, false, "x"};
    auto got = unpack_bundle(pack_bundle(std::span(&f, 1)));
    ASSERT_FALSE(got) << path;
    EXPECT_EQ(got.error().code, errc::protocol_error) << path;
    EXPECT_NE(got.error().message.find(why), std::string::npos) << got.error().message;
    EXPECT_EQ(got.error().message.find('\n'), std::string::npos);
  }
  for (const char* fine : {"a.py", "a/b/c.py", "..hidden/x", "a/.b", "x..y"})
    EXPECT_FALSE(bundle_path_problem(fine)) << fine;
}

TEST(script_bundle, a_file_named_twice_or_as_a_folder_is_refused) {
  const std::vector<bundle_file> twice{{"a.py", false, "1"}, {"a.py", false, "2"}};
  auto t = unpack_bundle(pack_bundle(twice));
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message.find("'a.py' is listed twice"), std::string::npos);
  const std::vector<bundle_file> both{{"a", false, "1"}, {"a/b.py", false, "2"}};
  auto b = unpack_bundle(pack_bundle(both));
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("'a' is both a file and a folder"), std::string::npos);
}

TEST(script_bundle, bytes_that_are_not_a_whole_bundle_are_refused) {
  const std::vector<bundle_file> files{{"a.py", true, "print(1)"}, {"b/c.txt", false, ""}};
  const auto packed = pack_bundle(files);
  ASSERT_TRUE(unpack_bundle(packed));
  // Every cut short, one byte more, another magic: refused, never read past the end.
  for (std::size_t n = 0; n < packed.size(); ++n) {
    auto cut = unpack_bundle(std::span(packed).first(n));
    ASSERT_FALSE(cut) << n;
    EXPECT_EQ(cut.error().code, errc::protocol_error);
  }
  auto longer = packed;
  longer.push_back(std::byte{0});
  EXPECT_NE(unpack_bundle(longer).error().message.find("1 bytes after its last file"),
            std::string::npos);
  auto other = packed;
  other[0] = std::byte{'X'};
  EXPECT_NE(unpack_bundle(other).error().message.find("not a bundle"), std::string::npos);
  // A count of files far past what the bytes hold.
  auto many = packed;
  many[8] = many[9] = many[10] = std::byte{0xff};
  many[11] = std::byte{0};
  EXPECT_FALSE(unpack_bundle(many));
  // A file whose size says more than is left.
  auto huge = bytes_of(std::string("COACHSB1\1\0\0\0\4\0\0\0\0\0\0\0", 20));
  const std::uint64_t size = std::uint64_t(1) << 40;
  const auto* sz = reinterpret_cast<const std::byte*>(&size);
  huge.insert(huge.end(), sz, sz + 8);
  for (char c : std::string("a.py")) huge.push_back(std::byte(c));
  EXPECT_NE(unpack_bundle(huge).error().message.find("cut short"), std::string::npos);
  EXPECT_TRUE(unpack_bundle(pack_bundle({})));  // no files: a bundle all the same
}

TEST_F(script_bundle_test, a_jobs_folder_is_private_holds_the_files_and_goes_with_its_holder) {
  const auto parent = dir / "coach-node-x";
  const std::vector<bundle_file> files{{"run.py", true, "print(1)\n"},
                                       {"data/d.txt", false, "data"}};
  std::string made;
  {
    auto folder = script_folder::make(parent.string(), "job-7");
    ASSERT_TRUE(folder) << folder.error().to_string();
    made = (*folder)->path();
    EXPECT_EQ(fs::path(made).parent_path(), parent);
    EXPECT_TRUE(fs::path(made).filename().string().starts_with("job-7."));
    ASSERT_TRUE((*folder)->write(files));
    struct stat st {};
    ASSERT_EQ(::stat(made.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    ASSERT_EQ(::stat(parent.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    ASSERT_EQ(::stat((fs::path(made) / "run.py").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    ASSERT_EQ(::stat((fs::path(made) / "data/d.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    std::ifstream in(fs::path(made) / "data/d.txt");
    std::string text;
    in >> text;
    EXPECT_EQ(text, "data");
    // A second job's folder beside it: another name.
    auto other = script_folder::make(parent.string(), "job-7");
    ASSERT_TRUE(other);
    EXPECT_NE((*other)->path(), made);
  }
  EXPECT_FALSE(fs::exists(made)) << "removed with its last holder";
  EXPECT_TRUE(fs::exists(parent));
  // A parent others may write in is not taken.
  fs::permissions(parent, fs::perms::others_write, fs::perm_options::add);
  auto refused = script_folder::make(parent.string(), "job-8");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("not a private folder"), std::string::npos);
  // Nor a link, wherever it points.
  fs::create_directory_symlink(dir, dir / "link");
  EXPECT_FALSE(script_folder::make((dir / "link").string(), "job-9"));
}

}  // namespace
}  // namespace coach::worker
