#include "sweep/lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/check.h"

namespace tf::sweep {

FileLock::FileLock(const std::string& path) {
  const std::string lock = path + ".lock";
  fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TF_CHECK(fd_ >= 0, lock << ": cannot open the lock file: " << std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char holder[256] = {0};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    std::string h = n > 0 ? std::string(holder, size_t(n)) : "another process";
    while (!h.empty() && (h.back() == '\n' || h.back() == ' ')) h.pop_back();
    TF_FAIL(path << ": another sweep is writing this file (" << h << " holds " << lock << ")");
  }
  char host[128] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string me = "pid " + std::to_string(::getpid()) + " on " + host + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    ssize_t w = ::pwrite(fd_, me.data(), me.size(), 0);
    (void)w;
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace tf::sweep
