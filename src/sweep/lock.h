// An exclusive lock on <path>.lock (flock), held while a sweep writes <path>:
// a second sweep on the same file fails at once with a one-line error naming
// the holder. The kernel drops the lock when the holder dies (even by SIGKILL),
// so a crashed sweep never leaves a stale lock behind.
#pragma once
#include <string>

namespace tf::sweep {

class FileLock {
 public:
  explicit FileLock(const std::string& path);  // throws tf::Error when held elsewhere
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace tf::sweep
