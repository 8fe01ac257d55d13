// cache/disk_scan: names and listing of the disk store's files; see disk_layout.h.
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "cache/disk_layout.h"
#include "cache/entry.h"
#include "cache/file_io.h"
#include "fusejit/error.h"

namespace fusejit::cache::layout {

namespace fs = std::filesystem;

namespace {

constexpr size_t kKeyDigits = 32;

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};
using DirPtr = std::unique_ptr<DIR, DirCloser>;

[[noreturn]] void cannot_list(const fs::path& path, int error) {
  throw UsageError(os_error("kernel cache: cannot list the directory", path, error) +
                   " (check its permissions, or name another with FUSEJIT_CACHE_DIR or "
                   "--cache-dir)");
}

// Opens `fd` as a directory stream; the stream owns it.
DirPtr open_stream(int fd, const fs::path& path) {
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    const int error = errno;
    ::close(fd);
    cannot_list(path, error);
  }
  return DirPtr(d);
}

// Calls f(name) for each name in the stream but . and ..; throws when reading fails.
template <typename F>
void for_each_name(DIR* d, const fs::path& path, F&& f) {
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (e == nullptr) {
      if (errno != 0) cannot_list(path, errno);
      return;
    }
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") f(std::string(name));
  }
}

}  // namespace

FileKind classify(std::string_view name) {
  if (name.size() < kKeyDigits || !is_lower_hex(name.substr(0, kKeyDigits))) {
    return FileKind::other;
  }
  const std::string_view rest = name.substr(kKeyDigits);
  if (rest == kEntryExtension) return FileKind::entry;
  if (rest == kLockExtension) return FileKind::lock;
  if (rest.starts_with(kTempMarker) && rest.size() > kTempMarker.size() &&
      rest.substr(kTempMarker.size()).find_first_not_of("0123456789-") == std::string_view::npos) {
    return FileKind::temp;
  }
  return FileKind::other;
}

bool ShardFile::regular() const { return S_ISREG(mode); }

Listing list_store(const std::string& dir) {
  Listing out;
  const int top_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (top_fd < 0) {
    if (errno == ENOENT) return out;
    cannot_list(dir, errno);
  }
  const DirPtr top = open_stream(top_fd, dir);
  std::vector<std::string> shard_names;
  for_each_name(top.get(), dir, [&](std::string name) {
    if (is_shard_name(name)) shard_names.push_back(std::move(name));
  });
  for (std::string& shard : shard_names) {
    struct stat st {};
    if (::fstatat(::dirfd(top.get()), shard.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISDIR(st.st_mode)) {
      continue;  // gone, or not a real directory: not ours to look into
    }
    const fs::path shard_path = fs::path(dir) / shard;
    const int fd = ::openat(::dirfd(top.get()), shard.c_str(),
                            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) continue;  // changed meanwhile
      cannot_list(shard_path, errno);
    }
    const DirPtr d = open_stream(fd, shard_path);
    for_each_name(d.get(), shard_path, [&](std::string name) {
      struct stat fst {};
      if (::fstatat(::dirfd(d.get()), name.c_str(), &fst, AT_SYMLINK_NOFOLLOW) != 0) return;
      ShardFile f;
      f.shard = shard;
      f.kind = classify(name);
      f.name = std::move(name);
      f.mode = fst.st_mode;
      f.size = static_cast<uint64_t>(fst.st_size);
      f.mtime_ns = static_cast<int64_t>(fst.st_mtim.tv_sec) * 1000000000 + fst.st_mtim.tv_nsec;
      out.files.push_back(std::move(f));
    });
    out.shards.push_back(std::move(shard));
  }
  return out;
}

ShardDir::ShardDir(const std::string& dir, const std::string& shard, bool create)
    : path_(fs::path(dir) / shard) {
  // mkdir never follows a symlink standing at the name (EEXIST), and the open below refuses one.
  if (create) ::mkdir(path_.c_str(), 0755);
  fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd_ < 0) error_ = errno;
}

ShardDir::~ShardDir() {
  if (fd_ >= 0) ::close(fd_);
}

std::string ShardDir::why() const {
  struct stat st {};
  if ((error_ == ELOOP || error_ == ENOTDIR) && ::lstat(path_.c_str(), &st) == 0 &&
      !S_ISDIR(st.st_mode)) {
    return fmt::format("cannot open {}: {} stands there, not a directory", display_path(path_),
                       file_type_name(st.st_mode));
  }
  return os_error("cannot open", path_, error_);
}

namespace {

// Deeper than this, a tree at an entry's name is not fusejit's doing: it stays, and says so.
constexpr int kMaxTreeDepth = 16;

// Removes the directory `name` in `parent_fd` with everything in it, never following a link
// and never leaving the file system `dev`.
bool remove_tree(int parent_fd, const std::string& name, const fs::path& shown, dev_t dev,
                 int depth, std::string* why) {
  const int fd = ::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return true;
    if (why) *why = os_error("cannot open", shown, errno);
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_dev != dev || depth > kMaxTreeDepth) {
    ::close(fd);
    if (why) {
      *why = fmt::format(
          "cannot remove {}: another file system is mounted there, or it is "
          "deeper than {} levels (remove it by hand)",
          display_path(shown), kMaxTreeDepth);
    }
    return false;
  }
  const DirPtr d = open_stream(fd, shown);
  std::vector<std::string> names;  // listed first: removing while reading skips names
  for_each_name(d.get(), shown, [&](std::string n) { names.push_back(std::move(n)); });
  for (const std::string& n : names) {
    struct stat child {};
    if (::fstatat(::dirfd(d.get()), n.c_str(), &child, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(child.st_mode)) {
      if (!remove_tree(::dirfd(d.get()), n, shown / n, dev, depth + 1, why)) return false;
    } else if (::unlinkat(::dirfd(d.get()), n.c_str(), 0) != 0 && errno != ENOENT) {
      if (why) *why = os_error("cannot remove", shown / n, errno);
      return false;
    }
  }
  if (::unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    if (why) *why = os_error("cannot remove", shown, errno);
    return false;
  }
  return true;
}

}  // namespace

bool remove_store_file(const std::string& dir, const std::string& shard, const std::string& name,
                       std::string* why) {
  const ShardDir sd(dir, shard, /*create=*/false);
  if (!sd.is_open()) {
    if (sd.error() == ENOENT) return true;
    if (why) *why = sd.why();
    return false;
  }
  if (::unlinkat(sd.fd(), name.c_str(), 0) == 0 || errno == ENOENT) return true;
  if (errno != EISDIR) {
    if (why) *why = os_error("cannot remove", sd.path() / name, errno);
    return false;
  }
  struct stat st {};
  if (::fstat(sd.fd(), &st) != 0) {
    if (why) *why = os_error("cannot remove", sd.path() / name, errno);
    return false;
  }
  return remove_tree(sd.fd(), name, sd.path() / name, st.st_dev, 0, why);
}

}  // namespace fusejit::cache::layout
