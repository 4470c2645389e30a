#include "io/h5_image.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace tf::h5 {

namespace {

constexpr char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
constexpr const char* kHeaderTag = "triforce-h5 crc32 ";
// Growth step of the core driver's buffer: a run adds ~20 KB.
constexpr size_t kCoreIncrement = 1 << 20;

bool signature_at(const Bytes& b, size_t off) {
  return b.size() >= off + sizeof kSignature && std::memcmp(b.data() + off, kSignature, sizeof kSignature) == 0;
}

Handle core_fapl() {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fapl_core(fapl, kCoreIncrement, /*backing_store=*/0);
  // Earliest format bound: see create_file in h5_file.cpp (merge's H5Ocopy of dense attributes).
  H5Pset_libver_bounds(fapl, H5F_LIBVER_EARLIEST, H5F_LIBVER_LATEST);
  return fapl;
}

std::string errno_text(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

}  // namespace

uint32_t crc32(const char* data, size_t n) {
  // Slicing by 8: table[k][b] is the CRC of byte b followed by k zero bytes, so eight
  // bytes fold in with eight lookups and no serial dependency between them (the whole
  // file is summed on every save: ~5x the byte-at-a-time loop).
  static const auto table = [] {
    std::array<std::array<uint32_t, 256>, 8> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
    return t;
  }();
  static_assert(std::endian::native == std::endian::little, "the 8-byte fold reads little-endian words");
  uint32_t c = 0xFFFFFFFFu;
  const auto* p = reinterpret_cast<const uint8_t*>(data);
  for (; n >= 8; n -= 8, p += 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^ table[4][lo >> 24] ^
        table[3][hi & 0xFF] ^ table[2][(hi >> 8) & 0xFF] ^ table[1][(hi >> 16) & 0xFF] ^ table[0][hi >> 24];
  }
  for (; n; --n, ++p) c = table[0][(c ^ *p) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

Handle create_in_memory(const std::string& name) {
  quiet();
  Handle fcpl(H5Pcreate(H5P_FILE_CREATE));
  H5Pset_userblock(fcpl, kUserBlock);
  Handle fapl = core_fapl();
  const std::string in_memory = name + " (in memory)";
  Handle f(H5Fcreate(in_memory.c_str(), H5F_ACC_TRUNC, fcpl, fapl));
  TF_CHECK(f.valid(), name << ": cannot create the HDF5 file in memory");
  return f;
}

Handle open_in_memory(const Bytes& bytes, const std::string& name, bool write) {
  quiet();
  Handle fapl = core_fapl();
  TF_CHECK(H5Pset_file_image(fapl, const_cast<char*>(bytes.data()), bytes.size()) >= 0,
           name << ": cannot hand " << bytes.size() << " bytes to HDF5");
  // The core driver refuses an image whose name is an existing file: name it apart.
  const std::string in_memory = name + " (in memory)";
  Handle f(H5Fopen(in_memory.c_str(), write ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl));
  TF_CHECK(f.valid(), name << ": not a readable HDF5 file");
  return f;
}

Bytes image_of(hid_t file, const std::string& name) {
  TF_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL) >= 0, name << ": HDF5 failed to flush the file in memory");
  hsize_t ub = 0;
  {
    Handle fcpl(H5Fget_create_plist(file));
    H5Pget_userblock(fcpl, &ub);
  }
  // Files made before the checksum have no user block and stay as they were.
  TF_CHECK(ub == 0 || ub == kUserBlock, name << ": unexpected HDF5 user block of " << ub << " bytes");
  // HDF5's image starts at the superblock: the user block is ours to prepend.
  const ssize_t n = H5Fget_file_image(file, nullptr, 0);
  TF_CHECK(n > 0, name << ": HDF5 failed to give the file's image");
  Bytes b(size_t(ub) + static_cast<size_t>(n), 0);
  TF_CHECK(H5Fget_file_image(file, b.data() + ub, size_t(n)) == n, name << ": HDF5 failed to copy the file's image");
  if (ub) {
    char line[kUserBlock] = {0};
    std::snprintf(line, sizeof line, "%s%08" PRIx32 " bytes %zu\n", kHeaderTag,
                  crc32(b.data() + kUserBlock, b.size() - kUserBlock), b.size());
    std::memcpy(b.data(), line, kUserBlock);
  }
  return b;
}

Bytes read_checked(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TF_CHECK(fd >= 0, path << ": cannot open: " << std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    TF_FAIL(path << ": not a regular file");
  }
  Bytes b(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < b.size()) {
    const ssize_t r = ::read(fd, b.data() + got, b.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const std::string why = r < 0 ? std::strerror(errno) : "the file shrank while being read";
      ::close(fd);
      TF_FAIL(path << ": cannot read: " << why);
    }
    got += size_t(r);
  }
  ::close(fd);
  TF_CHECK(!b.empty(), path << ": empty (0 bytes)");
  if (signature_at(b, 0)) return b;  // written before the checksum line existed: read unchecked
  const size_t tag = std::strlen(kHeaderTag);
  if (b.size() < tag || std::memcmp(b.data(), kHeaderTag, tag) != 0) {
    TF_CHECK(!(b.size() < tag && std::memcmp(b.data(), kHeaderTag, b.size()) == 0),
             path << ": truncated: " << b.size() << " bytes");
    TF_CHECK(!signature_at(b, kUserBlock), path << ": damaged: its checksum line (the first bytes) is unreadable");
    TF_FAIL(path << ": not an HDF5 file (no HDF5 signature)");
  }
  unsigned crc = 0;
  unsigned long long want = 0;
  std::string head(b.data(), std::min(b.size(), kUserBlock));
  head = head.substr(0, head.find('\n'));
  TF_CHECK(std::sscanf(head.c_str() + tag, "%8x bytes %llu", &crc, &want) == 2,
           path << ": damaged: its checksum line '" << head.substr(0, 60) << "' is unreadable");
  TF_CHECK(b.size() >= want, path << ": truncated: " << b.size() << " bytes, " << want << " were written");
  TF_CHECK(b.size() == want, path << ": damaged: " << b.size() << " bytes, " << want
                                  << " were written (bytes were appended)");
  // The whole user block is as written: the line, then zeros.
  char line[kUserBlock] = {0};
  std::snprintf(line, sizeof line, "%s%08x bytes %llu\n", kHeaderTag, crc, want);
  TF_CHECK(std::memcmp(line, b.data(), kUserBlock) == 0,
           path << ": damaged: its first " << kUserBlock << " bytes (the checksum block) were changed");
  const uint32_t now = crc32(b.data() + kUserBlock, b.size() - kUserBlock);
  char buf[64];
  std::snprintf(buf, sizeof buf, "crc32 %08x written, %08" PRIx32 " now", crc, now);
  TF_CHECK(now == crc, path << ": damaged: its bytes do not match the checksum written with them (" << buf << ")");
  return b;
}

Handle open_checked(const std::string& path) {
  const Bytes b = read_checked(path);
  return open_in_memory(b, path, false);
}

std::string write_atomically(const std::string& path, const Bytes& bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_text("create", tmp);
  std::string err;
  size_t done = 0;
  while (err.empty() && done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) err = errno_text("write", tmp);
    else done += size_t(w);
  }
  if (err.empty() && ::fsync(fd) != 0) err = errno_text("fsync", tmp);
  if (::close(fd) != 0 && err.empty()) err = errno_text("close", tmp);
  if (err.empty() && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno_text("rename", tmp + " to " + path);
  if (!err.empty()) {
    ::unlink(tmp.c_str());
    return err;
  }
  // The rename is durable once the folder entry is.
  const auto dir = std::filesystem::path(path).parent_path();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return "";
}

}  // namespace tf::h5
