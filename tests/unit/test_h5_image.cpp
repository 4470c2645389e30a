// Whole-file HDF5 writes from memory and the checksum block (io/h5_image.h):
// the bytes round-trip through disk and HDF5's own reader, every damaged or
// truncated copy is refused naming the file, and a failed write (a missing
// folder, a file-size limit) reports what failed and leaves the old file.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/h5_image.h"
#include "test_util.h"

namespace fs = std::filesystem;
using tf::testing::expect_throws_naming;
using tf::testing::tmp_dir;
namespace h5 = tf::h5;

namespace {

h5::Bytes small_file(const std::string& name, int64_t value) {
  h5::Handle f = h5::create_in_memory(name);
  h5::set_attr(f, "value", value);
  h5::write_vector(f, "tokens", std::vector<int32_t>(1000, 7));
  return h5::image_of(f, name);
}

void put(const std::string& path, const h5::Bytes& b) {
  std::ofstream(path, std::ios::binary).write(b.data(), std::streamsize(b.size()));
}

}  // namespace

TEST(H5Image, Crc32MatchesTheStandardCheckValues) {
  EXPECT_EQ(h5::crc32("", 0), 0u);
  EXPECT_EQ(h5::crc32("a", 1), 0xE8B7BE43u);
  EXPECT_EQ(h5::crc32("123456789", 9), 0xCBF43926u);
}

TEST(H5Image, RoundTripThroughDiskAndHdf5) {
  const std::string path = (tmp_dir("h5image") / "a.h5").string();
  const h5::Bytes b = small_file(path, 41);
  ASSERT_GT(b.size(), h5::kUserBlock);
  EXPECT_EQ(std::string(b.data(), 18), "triforce-h5 crc32 ");
  ASSERT_EQ(h5::write_atomically(path, b), "");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(h5::read_checked(path), b);
  {  // HDF5 itself finds the superblock after the user block.
    h5::Handle f = h5::open_file(path, false);
    EXPECT_EQ(h5::get_int_attr(f, "value"), 41);
  }
  // Modify in memory, write again, read the new version.
  h5::Bytes next;
  {
    h5::Handle f = h5::open_in_memory(h5::read_checked(path), path, true);
    h5::set_attr(f, "more", std::string("yes"));
    next = h5::image_of(f, path);
  }
  ASSERT_EQ(h5::write_atomically(path, next), "");
  h5::Handle f = h5::open_checked(path);
  EXPECT_EQ(h5::get_int_attr(f, "value"), 41);
  EXPECT_EQ(h5::get_string_attr(f, "more"), "yes");
  EXPECT_EQ(h5::read_int_vector(f, "tokens").size(), 1000u);
}

TEST(H5Image, DamageAnywhereIsRefused) {
  const std::string dir = tmp_dir("h5image").string();
  const h5::Bytes good = small_file(dir + "/good.h5", 1);
  const size_t n = good.size();
  for (size_t at : {size_t(0), size_t(5), size_t(30), size_t(100), size_t(511), size_t(512), size_t(520), n / 2,
                    n - 1}) {
    h5::Bytes b = good;
    b[at] = char(b[at] ^ 0x20);
    const std::string p = dir + "/flip" + std::to_string(at) + ".h5";
    put(p, b);
    const char* want = at < 40 ? "is unreadable" : at < 512 ? "(the checksum block) were changed" : "do not match the checksum";
    expect_throws_naming([&] { h5::read_checked(p); }, p, want);
  }
  for (size_t keep : {size_t(0), size_t(7), size_t(300), size_t(600), n - 1}) {
    const std::string p = dir + "/trunc" + std::to_string(keep) + ".h5";
    put(p, h5::Bytes(good.begin(), good.begin() + long(keep)));
    expect_throws_naming([&] { h5::read_checked(p); }, p, keep == 0 ? "empty (0 bytes)" : "truncated");
  }
  h5::Bytes longer = good;
  longer.push_back('x');
  put(dir + "/longer.h5", longer);
  expect_throws_naming([&] { h5::read_checked(dir + "/longer.h5"); }, dir + "/longer.h5", "appended");
  expect_throws_naming([&] { h5::read_checked(dir + "/absent.h5"); }, dir + "/absent.h5", "cannot open");
  expect_throws_naming([&] { h5::read_checked(dir); }, dir, "not a regular file");
}

TEST(H5Image, FilesWithoutTheChecksumAreReadAsBefore) {
  const std::string path = (tmp_dir("h5image") / "legacy.h5").string();
  {
    h5::Handle f = h5::create_file(path);
    h5::set_attr(f, "value", int64_t(3));
  }
  h5::Bytes b = h5::read_checked(path);
  h5::Handle f = h5::open_in_memory(b, path, true);
  EXPECT_EQ(h5::get_int_attr(f, "value"), 3);
  const h5::Bytes again = h5::image_of(f, path);  // no user block to add: stays a plain HDF5 file
  EXPECT_EQ(std::memcmp(again.data(), "\x89HDF", 4), 0);
}

TEST(H5Image, FailedWritesLeaveTheOldFile) {
  const std::string dir = tmp_dir("h5image").string();
  const h5::Bytes b = small_file(dir + "/x.h5", 5);
  std::string err = h5::write_atomically(dir + "/missing/x.h5", b);
  EXPECT_NE(err.find("create " + dir + "/missing/x.h5.tmp: No such file or directory"), std::string::npos) << err;

  const std::string path = dir + "/kept.h5";
  const h5::Bytes old = small_file(path, 6);
  ASSERT_EQ(h5::write_atomically(path, old), "");
  h5::Bytes big = b;
  big.resize(b.size() + (256 << 10));  // larger than the limit below
  // A file-size limit: the write fails with EFBIG (SIGXFSZ ignored, as the sweep does).
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  err = h5::write_atomically(path, big);
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previous);
  EXPECT_EQ(err, "write " + path + ".tmp: File too large");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(h5::read_checked(path), old);
}
