// .npy write (f32/i32, atomic) and read (f32/i32/i64, 1-D/2-D) with validation.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "io/npy.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace tf;

namespace {

fs::path tmp_dir() { return tf::testing::tmp_dir("tf_npy_test"); }

// A .npy written by hand the way numpy does it (v1.0).
std::string raw_npy(const std::string& name, const std::string& dict, const void* data, size_t nbytes,
                    int major = 1) {
  std::string h = dict;
  const size_t pre = major == 1 ? 10 : 12;
  while ((pre + h.size() + 1) % 64) h.push_back(' ');
  h.push_back('\n');
  std::string b = "\x93NUMPY";
  b.push_back(char(major));
  b.push_back(0);
  b.push_back(char(h.size() & 0xff));
  b.push_back(char((h.size() >> 8) & 0xff));
  if (major != 1) b.append(2, '\0');
  b += h;
  b.append(static_cast<const char*>(data), nbytes);
  return tf::testing::write_bytes(tmp_dir() / name, b);
}

template <class F> void expect_throws_naming(F&& f, const std::string& file, const std::string& also = "") {
  try {
    f();
    FAIL() << "expected tf::Error";
  } catch (const tf::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(fs::path(file).filename().string()), std::string::npos) << m;
    if (!also.empty()) EXPECT_NE(m.find(also), std::string::npos) << m;
  }
}

}  // namespace

TEST(Npy, F32RoundTrip2D) {
  const auto p = (tmp_dir() / "a.npy").string();
  std::vector<float> v = {1.5f, -2, 3, 4, 5, 6.25f};
  write_npy_f32(p, v.data(), {2, 3});
  NpyArray a = read_npy_array(p);
  EXPECT_EQ(a.dtype, "f32");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.f32, v);
  Tensor t = read_npy(p);
  EXPECT_EQ(t.dtype, DType::F32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.ptr<float>()[5], 6.25f);
  // header is 64-byte aligned, as numpy writes it
  EXPECT_EQ((fs::file_size(p) - 24) % 64, 0u);
  // no temporary left behind
  int n = 0;
  for (auto& e : fs::directory_iterator(tmp_dir()))
    if (e.path().string().find(".tmp.") != std::string::npos) ++n;
  EXPECT_EQ(n, 0);
}

TEST(Npy, I32RoundTrip1DAndTensor) {
  const auto p = (tmp_dir() / "ids.npy").string();
  std::vector<int32_t> v = {1, 2, 3, -7, 49151};
  write_npy_i32(p, v.data(), {5});
  NpyArray a = read_npy_array(p);
  EXPECT_EQ(a.dtype, "i32");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(a.ints, (std::vector<int64_t>{1, 2, 3, -7, 49151}));
  Tensor t = Tensor::cpu(DType::I32, {1, 5});
  std::memcpy(t.data, v.data(), 20);
  const auto p2 = (tmp_dir() / "ids2.npy").string();
  write_npy(p2, t);
  Tensor r = read_npy(p2);
  EXPECT_EQ(r.dtype, DType::I32);
  EXPECT_EQ(r.shape, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(r.ptr<int32_t>()[4], 49151);
  // overwrite in place
  write_npy_i32(p, v.data(), {1, 5});
  EXPECT_EQ(read_npy_array(p).shape, (std::vector<int64_t>{1, 5}));
  Tensor bad = Tensor::cpu(DType::F16, {2});
  EXPECT_THROW(write_npy((tmp_dir() / "h.npy").string(), bad), tf::Error);
}

TEST(Npy, ReadsInt64AndVersion2) {
  int64_t v[4] = {0, 5, -3, 1ll << 33};
  const auto p = raw_npy("i64.npy", "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }", v, 32);
  NpyArray a = read_npy_array(p);
  EXPECT_EQ(a.dtype, "i64");
  EXPECT_EQ(a.ints, (std::vector<int64_t>{0, 5, -3, 1ll << 33}));
  expect_throws_naming([&] { read_npy(p); }, p, "int32");  // 2^33 does not fit
  int64_t small[3] = {7, 8, 9};
  const auto p2 = raw_npy("i64s.npy", "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", small, 24, 2);
  Tensor t = read_npy(p2);
  EXPECT_EQ(t.dtype, DType::I32);
  EXPECT_EQ(t.ptr<int32_t>()[2], 9);
}

TEST(Npy, Errors) {
  float f[4] = {1, 2, 3, 4};
  {
    const auto p = tf::testing::write_bytes(tmp_dir() / "magic.npy", "NOTNUMPY........");
    expect_throws_naming([&] { read_npy(p); }, p, "magic");
  }
  {
    const auto p = raw_npy("trunc.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (8,), }", f, 16);
    expect_throws_naming([&] { read_npy(p); }, p, "truncated");
  }
  {
    const auto p = raw_npy("f8.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", f, 16);
    expect_throws_naming([&] { read_npy(p); }, p, "<f8");
  }
  {
    const auto p = raw_npy("big.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", f, 16);
    expect_throws_naming([&] { read_npy(p); }, p, ">f4");
  }
  {
    const auto p = raw_npy("fort.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", f, 16);
    expect_throws_naming([&] { read_npy(p); }, p, "Fortran");
  }
  {
    const auto p = raw_npy("3d.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 2), }", f, 16);
    expect_throws_naming([&] { read_npy(p); }, p, "2-D");
  }
  expect_throws_naming([&] { read_npy((tmp_dir() / "missing.npy").string()); }, "missing.npy");
  expect_throws_naming([&] { write_npy_f32((tmp_dir() / "no_dir" / "x.npy").string(), f, {4}); }, "x.npy");
}
