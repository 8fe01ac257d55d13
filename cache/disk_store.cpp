// cache/disk_store: entries in, entries out, eviction; see disk_store.h. The maintenance
// commands are in disk_maintenance.cpp, the listing in disk_scan.cpp.
#include "cache/disk_store.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "cache/disk_layout.h"
#include "cache/file_io.h"
#include "fusejit/error.h"

namespace fusejit::cache {

namespace fs = std::filesystem;

namespace {

// How long a writer waits for another process's eviction before evicting anyway. Like a
// kernel's lock, evict.lock is unlinked on release (file_lock.h), so now and then two
// processes evict at once: that only removes a little more than needed, and each one lists
// after its own write, so the cap holds all the same.
constexpr auto kEvictLockWait = std::chrono::seconds(10);

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
  if (config_.dir.empty()) {
    dir_error_ = EINVAL;
  } else {
    if (config_.create) {
      std::error_code ec;
      fs::create_directories(config_.dir, ec);  // what went wrong, stat says below
    }
    struct stat st {};
    if (::stat(config_.dir.c_str(), &st) != 0) {
      dir_error_ = errno;
    } else if (!S_ISDIR(st.st_mode)) {
      dir_error_ = ENOTDIR;
    }
  }
  if (dir_error_ != 0) {
    if (config_.create) {
      log_.warn(
          "kernel cache directory '{}' cannot be created ({}); kernels are cached in "
          "memory only (set FUSEJIT_CACHE_DIR to a writable directory)",
          display_path(config_.dir), std::strerror(dir_error_));
    }
    access_ = Access::none;
    return;
  }
  if (::access(config_.dir.c_str(), W_OK | X_OK) != 0) {
    if (config_.create) {
      log_.warn(
          "kernel cache directory '{}' is not writable ({}); cached kernels are used but "
          "new ones are kept in memory only",
          display_path(config_.dir), std::strerror(errno));
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
          display_path(config_.dir), why);
      return;
    }
  }
}

std::string DiskStore::entry_name(const KernelKey& key) {
  return key.hex() + std::string(kEntryExtension);
}

fs::path DiskStore::entry_path(const KernelKey& key) const {
  return fs::path(config_.dir) / key.shard() / entry_name(key);
}

bool DiskStore::contains(const KernelKey& key) const {
  if (!usable()) return false;
  const layout::ShardDir shard(config_.dir, key.shard(), /*create=*/false);
  struct stat st {};
  return shard.is_open() &&
         ::fstatat(shard.fd(), entry_name(key).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISREG(st.st_mode);
}

std::optional<Entry> DiskStore::load(const KernelKey& key) {
  if (!usable()) return std::nullopt;
  const fs::path path = entry_path(key);
  const std::string name = entry_name(key);
  // A shard that is a symlink (or no directory) holds no entries: a miss, as when it is missing
  // (the store that follows says why it cannot write there, once).
  const layout::ShardDir shard(config_.dir, key.shard(), /*create=*/false);
  if (!shard.is_open()) {
    const int e = shard.error();
    if (e != ENOENT && e != ENOTDIR && e != ELOOP) {
      log_.warn("kernel cache: {}; compiling instead", shard.why());
    }
    return std::nullopt;
  }
  std::string bytes;
  const ReadResult read = read_regular_file_at(shard.fd(), name, bytes,
                                               std::numeric_limits<size_t>::max(), kMaxEntryBytes);
  if (read.status == ReadStatus::missing) return std::nullopt;
  std::string problem;
  std::optional<Entry> entry;
  if (read.status == ReadStatus::ok) {
    entry = decode_entry(bytes, key, &problem);
  } else if (read.status == ReadStatus::too_large) {
    problem = read.why;
  } else {
    log_.warn("cannot read kernel cache entry {} ({}); compiling instead", display_path(path),
              read.why);
    return std::nullopt;
  }
  if (!entry) {
    // Removed through the shard opened with O_NOFOLLOW: a symlinked shard is not followed.
    if (writable() && layout::remove_store_file(config_.dir, key.shard(), name, nullptr)) {
      log_.warn(
          "kernel cache entry {} is unsound ({}); removed it, the kernel is compiled and "
          "stored again",
          display_path(path), printable(problem));
    } else {
      log_.warn("kernel cache entry {} is unsound ({}) and cannot be removed; compiling instead",
                display_path(path), printable(problem));
    }
    return std::nullopt;
  }
  // Recently used: the mtime is the LRU clock. A read-only store keeps its order.
  if (writable()) ::utimensat(shard.fd(), name.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
  return entry;
}

bool DiskStore::store(const KernelKey& key, const Entry& entry) {
  const bool stored = write_entry(key, entry);
  if (!stored) {
    std::lock_guard guard(not_stored_mutex_);
    not_stored_.insert(key.hex());
  }
  return stored;
}

bool DiskStore::was_not_stored(const KernelKey& key) const {
  std::lock_guard guard(not_stored_mutex_);
  return not_stored_.count(key.hex()) > 0;
}

bool DiskStore::write_entry(const KernelKey& key, const Entry& entry) {
  if (!writable()) return false;
  const fs::path path = entry_path(key);
  const std::string name = entry_name(key);
  // Entries go into real shard directories only: a symlink there would lead out of the cache.
  const layout::ShardDir shard(config_.dir, key.shard(), /*create=*/true);
  if (!shard.is_open()) {
    degrade(Access::read_only, shard.why());
    return false;
  }
  std::string bytes;
  if (config_.keep_source || entry.source.empty()) {
    bytes = encode_entry(key, entry);
  } else {
    Entry without_source = entry;
    without_source.source.clear();
    bytes = encode_entry(key, without_source);
  }
  if (bytes.size() > kMaxEntryBytes) {
    log_.warn(
        "kernel cache: kernel {} takes {} bytes, more than an entry may ({}); it is kept "
        "in memory only",
        printable(entry.name), bytes.size(), kMaxEntryBytes);
    return false;
  }
  WriteResult written = write_file_atomically_at(shard.fd(), name, path, bytes);
  std::string why;
  // Whatever stands at an entry's name is the store's (disk_layout.h): a directory tree there
  // goes, and the entry is written in its place.
  if (!written.ok && written.target_in_the_way &&
      layout::remove_store_file(config_.dir, key.shard(), name, &why)) {
    log_.warn("kernel cache: removed the directory at {} to store the entry there",
              display_path(path));
    written = write_file_atomically_at(shard.fd(), name, path, bytes);
  }
  if (!written.ok) {
    if (written.target_in_the_way) {
      log_.warn("kernel cache: {}{}; this kernel is kept in memory only", written.why,
                why.empty() ? "" : " (" + why + ")");
    } else {
      degrade(Access::read_only, written.why);
    }
    return false;
  }
  try {
    evict(path);
  } catch (const Error& e) {  // the entry is stored; only the cap could not be kept
    log_.warn("kernel cache: cannot evict to stay under the cap: {}", e.what());
  }
  return true;
}

DiskStore::Evicted DiskStore::evict(const fs::path& keep) {
  std::lock_guard guard(evict_mutex_);
  FileLock lock;
  const std::string lock_path = (fs::path(config_.dir) / layout::kEvictLock).string();
  std::string why;
  if (lock.acquire(lock_path, FileLock::Wait::yes, kEvictLockWait, &why) ==
      FileLock::Result::failed) {
    log_.debug("cannot lock {} ({}); evicting without it", display_path(lock_path), why);
  }
  std::vector<layout::ShardFile> entries;
  uint64_t total = 0;
  for (layout::ShardFile& f : layout::list_store(config_.dir).files) {
    if (f.kind != layout::FileKind::entry || !f.regular()) continue;
    total += f.size;
    entries.push_back(std::move(f));
  }
  Evicted evicted;
  if (total <= config_.max_bytes) return evicted;
  // Oldest first; the path breaks ties so that every process agrees on the order.
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.name < b.name;
  });
  for (const layout::ShardFile& f : entries) {
    if (total <= config_.max_bytes) break;
    if (f.path(config_.dir) == keep) continue;
    // Gone already (another process evicted it) is as good.
    if (!layout::remove_store_file(config_.dir, f.shard, f.name, &why)) {
      log_.debug("kernel cache: {}", why);
      continue;
    }
    total -= f.size;
    ++evicted.entries;
    evicted.bytes += f.size;
  }
  log_.debug("kernel cache: evicted {} entries to stay under {} bytes", evicted.entries,
             config_.max_bytes);
  return evicted;
}

std::optional<FileLock> DiskStore::lock(const KernelKey& key, FileLock::Wait wait) {
  FileLock lock;
  if (!writable()) return lock;
  const layout::ShardDir shard(config_.dir, key.shard(), /*create=*/true);
  const std::string name = key.hex() + std::string(layout::kLockExtension);
  const fs::path path = shard.path() / name;
  std::string why;
  const FileLock::Result got =
      shard.is_open() ? lock.acquire_at(shard.fd(), name, wait, std::chrono::minutes(2), &why)
                      : FileLock::Result::failed;
  if (!shard.is_open()) why = shard.why();
  switch (got) {
    case FileLock::Result::locked:
      return lock;
    case FileLock::Result::busy:
      if (wait == FileLock::Wait::no) return std::nullopt;
      log_.warn("waited 2 minutes for {} (another process compiling?); compiling without it",
                display_path(path));
      return FileLock();
    case FileLock::Result::failed:
      log_.debug("cannot lock {} ({}); compiling without the lock", display_path(path), why);
      return FileLock();
  }
  return FileLock();
}

}  // namespace fusejit::cache
