// cache/file_lock: see file_lock.h.
#include "cache/file_lock.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fusejit::cache {

FileLock::FileLock(FileLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      dir_fd_(std::exchange(other.dir_fd_, -1)),
      name_(std::move(other.name_)) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    dir_fd_ = std::exchange(other.dir_fd_, -1);
    name_ = std::move(other.name_);
  }
  return *this;
}

FileLock::Result FileLock::acquire(const std::string& path, Wait wait,
                                   std::chrono::milliseconds timeout, std::string* why) {
  return acquire_at(AT_FDCWD, path, wait, timeout, why);
}

FileLock::Result FileLock::acquire_at(int dir_fd, const std::string& name, Wait wait,
                                      std::chrono::milliseconds timeout, std::string* why) {
  release();
  const int fd =
      ::openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (why) *why = std::strerror(errno);
    return Result::failed;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (why) *why = "not a regular file";
    ::close(fd);
    return Result::failed;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) {
      if (why) *why = std::strerror(errno);
      ::close(fd);
      return Result::failed;
    }
    if (wait == Wait::no || std::chrono::steady_clock::now() >= deadline) {
      ::close(fd);
      return Result::busy;
    }
    // Polling rather than a blocking flock keeps the timeout; a compile takes ~0.1-1 s, so
    // backing off to 20 ms costs little.
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  const int own_dir = dir_fd == AT_FDCWD ? AT_FDCWD : ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (own_dir == -1) {
    if (why) *why = std::strerror(errno);
    ::close(fd);
    return Result::failed;
  }
  fd_ = fd;
  dir_fd_ = own_dir;
  name_ = name;
  return Result::locked;
}

void FileLock::release() {
  if (fd_ < 0) return;
  // Unlink only the file we hold: after an earlier unlink the path may name someone else's.
  struct stat held {
  }, named{};
  if (::fstat(fd_, &held) == 0 &&
      ::fstatat(dir_fd_, name_.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
      held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
    ::unlinkat(dir_fd_, name_.c_str(), 0);
  }
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
  fd_ = -1;
  dir_fd_ = -1;
}

}  // namespace fusejit::cache
