// cache/file_io: see file_io.h.
#include "cache/file_io.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

namespace fusejit::cache {

namespace fs = std::filesystem;

namespace {

constexpr size_t kShortPath = 160;
constexpr size_t kHead = 60, kTail = 80;

// Numbers the temporary files of this process; with the pid and the thread id, a name no
// other writer uses at the same time.
std::atomic<uint64_t> temp_counter{0};

// Writes all of `bytes` to a new file `name` in `dir_fd` and fsyncs it; "" or what failed
// (naming `shown`). The file is removed on failure.
std::string write_new_file(int dir_fd, const std::string& name, const fs::path& shown,
                           std::string_view bytes) {
  const int fd =
      ::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return os_error("cannot create", shown, errno);
  size_t done = 0;
  int error = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0) return "";
  ::unlinkat(dir_fd, name.c_str(), 0);
  return os_error("cannot write", shown, error);
}

}  // namespace

std::string display_path(const fs::path& path) {
  const std::string& s = path.native();
  if (s.size() <= kShortPath) return printable(s);
  return fmt::format("{}...{} ({} characters)", printable(s.substr(0, kHead)),
                     printable(s.substr(s.size() - kTail)), s.size());
}

std::string os_error(std::string_view what, const fs::path& path, int error) {
  return fmt::format("{} {}: {}", what, display_path(path), std::strerror(error));
}

const char* file_type_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFLNK: return "a symbolic link";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
  }
  return "not a regular file";
}

WriteResult write_file_atomically(const fs::path& path, std::string_view bytes) {
  return write_file_atomically_at(AT_FDCWD, path.native(), path, bytes);
}

WriteResult write_file_atomically_at(int dir_fd, const std::string& name, const fs::path& shown,
                                     std::string_view bytes) {
  WriteResult r;
  const std::string suffix =
      fmt::format(".tmp-{}-{}-{}", ::getpid(), ::gettid(), temp_counter.fetch_add(1));
  const std::string temp = name + suffix;
  const fs::path temp_shown = shown.native() + suffix;
  r.why = write_new_file(dir_fd, temp, temp_shown, bytes);
  if (!r.why.empty()) {
    r.ok = false;
    return r;
  }
  // rename(2) replaces a file of any kind (a symlink itself, not its target) but no directory;
  // an empty one goes first, a full one is someone's and stays.
  int error = ::renameat(dir_fd, temp.c_str(), dir_fd, name.c_str()) == 0 ? 0 : errno;
  if ((error == EISDIR || error == ENOTEMPTY || error == EEXIST) &&
      ::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) == 0) {
    error = ::renameat(dir_fd, temp.c_str(), dir_fd, name.c_str()) == 0 ? 0 : errno;
  }
  if (error == 0) return r;
  ::unlinkat(dir_fd, temp.c_str(), 0);
  r.ok = false;
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
    r.target_in_the_way = true;
    r.why = fmt::format("cannot write {}: {} stands there (remove it)", display_path(shown),
                        file_type_name(st.st_mode));
  } else {
    r.why = fmt::format("cannot rename {} to {}: {}", display_path(temp_shown), display_path(shown),
                        std::strerror(error));
  }
  return r;
}

ReadResult read_regular_file(const fs::path& path, std::string& bytes, size_t max_bytes,
                             uint64_t refuse_over) {
  return read_regular_file_at(AT_FDCWD, path.native(), bytes, max_bytes, refuse_over);
}

ReadResult read_regular_file_at(int dir_fd, const std::string& name, std::string& bytes,
                                size_t max_bytes, uint64_t refuse_over) {
  ReadResult r;
  bytes.clear();
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    struct stat st {};
    if (error == ENOENT || error == ENOTDIR) {
      r.status = ReadStatus::missing;
    } else if (error == ELOOP && ::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
               S_ISLNK(st.st_mode)) {
      r.status = ReadStatus::not_regular;  // O_NOFOLLOW refused the link
      r.why = "a symbolic link, not a regular file";
    } else {
      r.status = ReadStatus::failed;
      r.why = std::strerror(error);
    }
    return r;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    r.status = ReadStatus::failed;
    r.why = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    r.status = ReadStatus::not_regular;
    r.why = fmt::format("{}, not a regular file", file_type_name(st.st_mode));
  } else if (static_cast<uint64_t>(st.st_size) > refuse_over) {
    r.file_size = static_cast<uint64_t>(st.st_size);
    r.status = ReadStatus::too_large;
    r.why =
        fmt::format("too large: {} bytes, more than the {} it may hold", r.file_size, refuse_over);
  } else {
    r.file_size = static_cast<uint64_t>(st.st_size);
    bytes.resize(static_cast<size_t>(std::min<uint64_t>(r.file_size, max_bytes)));
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        r.status = ReadStatus::failed;
        r.why = std::strerror(errno);
      }
      if (n <= 0) break;  // shorter than fstat said: what we have is what the file holds
      got += static_cast<size_t>(n);
    }
    bytes.resize(got);
  }
  ::close(fd);
  return r;
}

}  // namespace fusejit::cache
