// cache/file_lock: an exclusive advisory lock (flock) on a lock file, held by an object; what
// lets several processes that share a cache directory compile each kernel once.
//
// Protocol (disk_store): lock <key>.lock; look in the store again (another process may have
// stored the entry while we waited); compile; store; release. Release unlinks the lock file
// while still holding it, so lock files do not pile up. That is safe: whoever then locks the
// unlinked file (it was waiting on it) or a fresh one looks in the store first, and the entry
// was stored before the unlink. The worst case, after a failed compile, is one more compile.
//
// flock locks belong to an open file description, so two threads of one process exclude each
// other as two processes do. A lock dies with its process: a crashed compiler never wedges
// the others.
#pragma once

#include <chrono>
#include <string>

namespace fusejit::cache {

class FileLock {
 public:
  enum class Wait { no, yes };
  enum class Result { locked, busy, failed };

  FileLock() = default;
  ~FileLock() { release(); }
  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  // Creates `path` if needed and locks it. Wait::yes polls until `timeout`, then gives up
  // (busy). failed: the file cannot be opened, or is not a regular file (a symlink is not
  // followed, a FIFO not waited on); `why` says so, and the caller goes on unlocked.
  Result acquire(const std::string& path, Wait wait,
                 std::chrono::milliseconds timeout = std::chrono::minutes(2),
                 std::string* why = nullptr);
  // The same for `name` in the directory open as `dir_fd`: the lock keeps its own copy of the
  // descriptor, so release() unlinks in that directory even if its path now leads elsewhere.
  Result acquire_at(int dir_fd, const std::string& name, Wait wait,
                    std::chrono::milliseconds timeout = std::chrono::minutes(2),
                    std::string* why = nullptr);
  bool held() const { return fd_ >= 0; }
  // Unlinks the lock file (when it is still ours) and unlocks. Idempotent.
  void release();

 private:
  int fd_ = -1;
  int dir_fd_ = -1;  // owned, or AT_FDCWD (name_ is then a path)
  std::string name_;
};

}  // namespace fusejit::cache
