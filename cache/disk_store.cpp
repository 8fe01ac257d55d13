// cache/disk_store: entries in, entries out, eviction; see disk_store.h. The maintenance
// commands are in disk_maintenance.cpp.
#include "cache/disk_store.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "cache/disk_layout.h"

namespace fusejit::cache {

namespace fs = std::filesystem;

namespace layout {

FileKind classify(std::string_view name) {
  if (name.find(kTempMarker) != std::string_view::npos) return FileKind::temp;
  if (name.ends_with(kLockExtension)) return FileKind::lock;
  if (name.size() == 32 + kEntryExtension.size() && name.ends_with(kEntryExtension)) {
    return FileKind::entry;
  }
  return FileKind::other;
}

bool read_file(const fs::path& path, std::string& bytes, std::string* why, bool* missing) {
  if (missing) *missing = false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (missing) *missing = errno == ENOENT || errno == ENOTDIR;  // no such entry
    if (why) *why = std::strerror(errno);
    return false;
  }
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0;
  bytes.clear();
  if (ok) bytes.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (ok && got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = n == 0;  // shorter than fstat said: what we have is what the file holds
      break;
    }
    got += static_cast<size_t>(n);
  }
  if (!ok && why) *why = std::strerror(errno);
  bytes.resize(got);
  ::close(fd);
  return ok;
}

}  // namespace layout

namespace {

// Writes all of `bytes` to a new file and fsyncs it; false with `why` on any failure (the file
// is removed then).
bool write_new_file(const fs::path& path, std::string_view bytes, std::string* why) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = fmt::format("cannot create {}: {}", path.string(), std::strerror(errno));
    return false;
  }
  size_t done = 0;
  bool ok = true;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (ok && ::fsync(fd) != 0) ok = false;
  if (!ok) *why = fmt::format("cannot write {}: {}", path.string(), std::strerror(errno));
  if (::close(fd) != 0 && ok) {
    ok = false;
    *why = fmt::format("cannot write {}: {}", path.string(), std::strerror(errno));
  }
  if (!ok) ::unlink(path.c_str());
  return ok;
}

}  // namespace

const char* access_name(DiskStore::Access access) {
  switch (access) {
    case DiskStore::Access::none:
      return "unusable";
    case DiskStore::Access::read_only:
      return "read-only";
    case DiskStore::Access::read_write:
      return "read-write";
  }
  return "?";
}

DiskStore::DiskStore(Config config, spdlog::logger& log) : config_(std::move(config)), log_(log) {
  std::error_code ec;
  if (config_.dir.empty()) {
    ec = std::make_error_code(std::errc::invalid_argument);
  } else if (config_.create) {
    fs::create_directories(config_.dir, ec);
  }
  if (!ec && !fs::is_directory(config_.dir, ec) && !ec) {
    ec = std::make_error_code(config_.create ? std::errc::not_a_directory
                                             : std::errc::no_such_file_or_directory);
  }
  if (ec) {
    if (config_.create) {
      log_.warn(
          "kernel cache directory '{}' cannot be created ({}); kernels are cached in "
          "memory only (set FUSEJIT_CACHE_DIR to a writable directory)",
          config_.dir, ec.message());
    }
    access_ = Access::none;
    return;
  }
  if (::access(config_.dir.c_str(), W_OK | X_OK) != 0) {
    if (config_.create) {
      log_.warn(
          "kernel cache directory '{}' is not writable ({}); cached kernels are used but "
          "new ones are kept in memory only",
          config_.dir, std::strerror(errno));
    }
    access_ = Access::read_only;
    return;
  }
  access_ = Access::read_write;
}

DiskStore::Access DiskStore::access() const { return access_.load(); }

void DiskStore::degrade(Access to, const std::string& why) {
  Access was = access_.load();
  // Only the first failure warns: the exchange succeeds once.
  while (was > to) {
    if (access_.compare_exchange_weak(was, to)) {
      log_.warn(
          "kernel cache directory '{}': {}; from now on new kernels are kept in memory "
          "only",
          config_.dir, why);
      return;
    }
  }
}

fs::path DiskStore::entry_path(const KernelKey& key) const {
  const std::string hex = key.hex();
  return fs::path(config_.dir) / hex.substr(0, 2) / (hex + std::string(kEntryExtension));
}

std::optional<Entry> DiskStore::load(const KernelKey& key) {
  if (!usable()) return std::nullopt;
  const fs::path path = entry_path(key);
  std::string bytes, why;
  bool missing = false;
  if (!layout::read_file(path, bytes, &why, &missing)) {
    if (!missing)
      log_.warn("cannot read kernel cache entry {} ({}); compiling instead", path.string(), why);
    return std::nullopt;
  }
  std::string problem;
  std::optional<Entry> entry = decode_entry(bytes, key, &problem);
  if (!entry) {
    std::error_code ec;
    if (writable() && fs::remove(path, ec)) {
      log_.warn(
          "kernel cache entry {} is unsound ({}); removed it, the kernel is compiled and "
          "stored again",
          path.string(), problem);
    } else {
      log_.warn("kernel cache entry {} is unsound ({}) and cannot be removed; compiling instead",
                path.string(), problem);
    }
    return std::nullopt;
  }
  // Recently used: the mtime is the LRU clock. A read-only store keeps its order.
  if (writable()) ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return entry;
}

void DiskStore::store(const KernelKey& key, const Entry& entry) {
  if (!writable()) return;
  const fs::path path = entry_path(key);
  std::error_code ec;
  fs::create_directory(path.parent_path(), ec);
  if (ec) {
    degrade(Access::read_only,
            fmt::format("cannot create {}: {}", path.parent_path().string(), ec.message()));
    return;
  }
  std::string bytes;
  if (config_.keep_source || entry.source.empty()) {
    bytes = encode_entry(key, entry);
  } else {
    Entry without_source = entry;
    without_source.source.clear();
    bytes = encode_entry(key, without_source);
  }
  const fs::path temp = path.string() + fmt::format(".tmp-{}-{}", ::getpid(), temp_counter_++);
  std::string why;
  if (!write_new_file(temp, bytes, &why)) {
    degrade(Access::read_only, why);
    return;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    why = fmt::format("cannot rename {} to {}: {}", temp.string(), path.string(),
                      std::strerror(errno));
    ::unlink(temp.c_str());
    degrade(Access::read_only, why);
    return;
  }

  // The directory's size is rescanned when this process's running count says it is over the
  // cap, and every 64 stores anyway (other processes write too).
  std::lock_guard guard(evict_mutex_);
  if (approx_bytes_ && stores_since_scan_ < 64) {
    *approx_bytes_ += bytes.size();
    ++stores_since_scan_;
    if (*approx_bytes_ <= config_.max_bytes) return;
  }
  evict_locked(path);
}

std::vector<DiskStore::Listed> DiskStore::list_entries() const {
  std::vector<Listed> out;
  std::error_code ec;
  for (const fs::directory_entry& shard : fs::directory_iterator(config_.dir, ec)) {
    if (!layout::is_shard_name(shard.path().filename().string())) continue;
    std::error_code shard_ec;
    if (!shard.is_directory(shard_ec)) continue;
    for (const fs::directory_entry& file : fs::directory_iterator(shard.path(), shard_ec)) {
      if (layout::classify(file.path().filename().string()) != layout::FileKind::entry) continue;
      std::error_code file_ec;
      Listed l;
      l.path = file.path();
      l.size = file.file_size(file_ec);
      if (file_ec) continue;  // removed while we looked
      l.used = file.last_write_time(file_ec);
      if (file_ec) continue;
      out.push_back(std::move(l));
    }
  }
  return out;
}

void DiskStore::evict_locked(const fs::path& keep) {
  std::vector<Listed> entries = list_entries();
  uint64_t total = 0;
  for (const Listed& l : entries) total += l.size;
  if (total > config_.max_bytes) {
    // Oldest first; the path breaks ties so that every process agrees on the order.
    std::sort(entries.begin(), entries.end(), [](const Listed& a, const Listed& b) {
      return a.used != b.used ? a.used < b.used : a.path < b.path;
    });
    int64_t evicted = 0;
    for (const Listed& l : entries) {
      if (total <= config_.max_bytes) break;
      if (l.path == keep) continue;
      std::error_code ec;
      fs::remove(l.path, ec);  // gone already (another process evicted it) is as good
      total -= l.size;
      ++evicted;
    }
    log_.debug("kernel cache: evicted {} entries to stay under {} bytes", evicted,
               config_.max_bytes);
  }
  approx_bytes_ = total;
  stores_since_scan_ = 0;
}

std::optional<FileLock> DiskStore::lock(const KernelKey& key, FileLock::Wait wait) {
  FileLock lock;
  if (!writable()) return lock;
  const fs::path entry = entry_path(key);
  std::error_code ec;
  fs::create_directory(entry.parent_path(), ec);
  const std::string path =
      (entry.parent_path() / (key.hex() + std::string(layout::kLockExtension))).string();
  std::string why;
  switch (lock.acquire(path, wait, std::chrono::minutes(2), &why)) {
    case FileLock::Result::locked:
      return lock;
    case FileLock::Result::busy:
      if (wait == FileLock::Wait::no) return std::nullopt;
      log_.warn("waited 2 minutes for {} (another process compiling?); compiling without it", path);
      return FileLock();
    case FileLock::Result::failed:
      log_.debug("cannot lock {} ({}); compiling without the lock", path, why);
      return FileLock();
  }
  return FileLock();
}

}  // namespace fusejit::cache
