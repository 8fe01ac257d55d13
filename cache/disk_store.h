// cache/disk_store: the on-disk level of the kernel cache, shared by every process that names
// the same directory (FUSEJIT_CACHE_DIR), and shippable to other machines. File names are in
// disk_layout.h; the entry format in entry.h and docs/cache-format.md.
//
// - Writes are atomic (file_io.h): a temporary file in the entry's own directory, fsync,
//   rename. A reader sees the old entry, the new one or none, never half of one.
// - Only regular files are entries. A load opens the entry through its shard (disk_layout.h:
//   a symlinked shard is never entered) with O_NOFOLLOW | O_NONBLOCK and checks it with fstat
//   first: a symlink is not followed, a FIFO does not block, a file above kMaxEntryBytes is not
//   read. Anything else at an entry's path is a miss that warns; the next store replaces it (a
//   directory tree there is removed first).
// - A corrupt, truncated or stale (another format version) entry is a miss: load() warns
//   naming the file and removes it; the caller compiles and stores it again.
// - Least-recently-used eviction under a byte cap: a hit touches the entry's mtime; after every
//   store the writer takes <dir>/evict.lock, lists the store and removes the oldest entries
//   until the .fjk files sum to at most the cap. Every writer lists after its own rename, so
//   the cap holds however many processes write at once.
// - A directory that cannot be created degrades to memory-only (usable() is false), one that
//   cannot be written to read-only (loads still hit), each with one warning; so does the first
//   write that fails for a reason other than that one entry's path (a full disk, say).
// - Maintenance (disk_maintenance.cpp) lists without leaving the directory (disk_layout.h),
//   touches only fusejit's names, and throws UsageError naming the path and the OS error when
//   the directory cannot be read. No std::filesystem_error leaves this layer.
// This file does not know how kernels are compiled: the caller (jit/kernel_cache) does that
// between lock() and store().
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/logger.h>

#include "cache/entry.h"
#include "cache/file_lock.h"
#include "cache/key.h"

namespace fusejit::cache {

// The default cap when FUSEJIT_CACHE_MAX_MB is not set.
inline constexpr int64_t kDefaultMaxMegabytes = 1024;

class DiskStore {
 public:
  struct Config {
    std::string dir;
    uint64_t max_bytes = static_cast<uint64_t>(kDefaultMaxMegabytes) << 20;
    bool keep_source = true;  // store the CUDA C source in each entry (for people and dumps)
    // Create the directory if it is missing, and warn when it cannot be used (the runtime and
    // `fusejit warm`). false: the maintenance commands, which only look.
    bool create = true;
  };
  enum class Access { none, read_only, read_write };

  DiskStore(Config config, spdlog::logger& log);

  const Config& config() const { return config_; }
  Access access() const;
  // Whether the directory was there (or was made) when the store was opened. false with
  // access() none for a directory that does not exist; one that cannot be reached for another
  // reason (a path too long, no permission on a parent) is an error for the maintenance
  // commands below.
  bool exists() const { return dir_error_ == 0; }
  bool usable() const { return access() != Access::none; }
  bool writable() const { return access() == Access::read_write; }
  std::filesystem::path entry_path(const KernelKey& key) const;

  // The entry, or nullopt for a miss. A hit marks the entry recently used; an unsound entry is
  // warned about, removed, and reported as a miss.
  std::optional<Entry> load(const KernelKey& key);

  // Writes the entry atomically, then evicts down to the cap; true when the entry is on disk.
  // Never throws. A directory tree at the entry's name is removed first (disk_layout.h). A
  // failure of this one entry (an entry above kMaxEntryBytes, a tree that cannot be removed)
  // warns and leaves the store writable; any other failure degrades it to read-only with one
  // warning.
  bool store(const KernelKey& key, const Entry& entry);
  // Whether a store() of `key` by this object returned false: what tells `fusejit warm` a
  // kernel that could not be written from one evicted since to keep the cap.
  bool was_not_stored(const KernelKey& key) const;

  // Whether a regular file stands at the key's entry path (not whether it is sound): what
  // `fusejit warm` checks after warming.
  bool contains(const KernelKey& key) const;

  // The cross-process lock for compiling `key`. An unheld lock comes back when the store is not
  // writable or the lock file cannot be made (going on unlocked is only slower). With
  // Wait::no, nullopt means another process holds it now.
  std::optional<FileLock> lock(const KernelKey& key, FileLock::Wait wait);

  // ---- maintenance (disk_maintenance.cpp): `fusejit cache stats|verify|prune|clear` ----
  struct ArchCount {
    int64_t entries = 0;
    uint64_t bytes = 0;
  };
  struct Stats {
    int64_t entries = 0;
    uint64_t bytes = 0;
    std::map<std::string, ArchCount> per_arch;  // "?" for entries whose header is unreadable
    int64_t temp_files = 0;                     // writes in flight, or left by a crash
    int64_t lock_files = 0;
  };
  struct Problem {
    std::filesystem::path path;
    std::string what;
  };
  struct PruneResult {
    std::vector<Problem> removed_unsound;
    int64_t evicted = 0;
    uint64_t evicted_bytes = 0;
    int64_t removed_leftovers = 0;  // stale temporary and lock files
  };

  // Each throws UsageError (naming the directory and the OS error) when the directory cannot
  // be listed; a directory that does not exist is an empty cache to stats and verify.
  // Counts from the names and lstat sizes; reads only the first bytes of each entry (its arch).
  Stats stats() const;
  // Every unsound entry, one problem each (reads and checks every entry in full). Stale entries
  // (another format version) are unsound, saying "stale".
  std::vector<Problem> verify() const;
  // Removes unsound entries and stale leftovers, then evicts down to the cap.
  PruneResult prune();
  // Removes every entry, temporary and lock file, and the emptied shard directories; never
  // anything fusejit did not name, and never through a symlink. Returns the count of entries
  // removed.
  int64_t clear();

 private:
  struct Evicted {
    int64_t entries = 0;
    uint64_t bytes = 0;
  };
  // Under <dir>/evict.lock: removes least recently used entries (never `keep`) until the
  // total is at most the cap.
  Evicted evict(const std::filesystem::path& keep);
  bool write_entry(const KernelKey& key, const Entry& entry);
  static std::string entry_name(const KernelKey& key);  // "<32 hex>.fjk"
  void degrade(Access to, const std::string& why);
  // Throws UsageError when the directory exists but could not be reached.
  void require_reachable(std::string_view what) const;

  Config config_;
  spdlog::logger& log_;
  std::atomic<Access> access_{Access::none};
  int dir_error_ = 0;  // errno of opening the directory; 0 when it is there
  std::mutex evict_mutex_;
  mutable std::mutex not_stored_mutex_;
  std::set<std::string> not_stored_;  // keys (hex) whose store() failed
};

const char* access_name(DiskStore::Access access);

}  // namespace fusejit::cache
