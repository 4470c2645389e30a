#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/check.h"

namespace tf {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TF_CHECK(fd >= 0, path << ": cannot open: " << std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    TF_FAIL(path << ": cannot stat: " << std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    TF_FAIL(path << ": not a regular file");
  }
  const size_t n = size_t(st.st_size);
  if (n == 0) {  // mmap rejects length 0; leave the mapping empty
    ::close(fd);
    return;
  }
  void* m = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  TF_CHECK(m != MAP_FAILED, path << ": mmap failed: " << std::strerror(err));
  data_ = static_cast<const uint8_t*>(m);
  size_ = n;
}

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void MappedFile::reset() noexcept {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace tf
