// cache/disk_scan: names and listing of the disk store's files; see disk_layout.h.
#include <cerrno>
#include <cstring>
#include <memory>

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

bool remove_store_file(const std::string& dir, const std::string& shard, const std::string& name,
                       std::string* why) {
  const fs::path shard_path = fs::path(dir) / shard;
  const int fd = ::open(shard_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return true;
    if (why) *why = os_error("cannot open", shard_path, errno);
    return false;
  }
  const bool ok = ::unlinkat(fd, name.c_str(), 0) == 0 || errno == ENOENT;
  if (!ok && why) *why = os_error("cannot remove", shard_path / name, errno);
  ::close(fd);
  return ok;
}

}  // namespace fusejit::cache::layout
