// cache/disk_store: the on-disk level of the kernel cache, shared by every process that names
// the same directory (FUSEJIT_CACHE_DIR), and shippable to other machines.
//
//   <dir>/<first 2 hex of key>/<32-hex key>.fjk    one entry (entry.h, docs/cache-format.md)
//   <dir>/<shard>/<key>.lock                       held while a process compiles that kernel
//   <dir>/<shard>/<key>.fjk.tmp-<pid>-<n>          an entry being written
//
// - Writes are atomic: a temporary file in the entry's own directory, fsync, rename. A reader
//   sees the old entry, the new one or none, never half of one.
// - A corrupt or truncated entry (bad magic, version, key, size or checksum) is a miss: load()
//   warns naming the file and removes it; the caller compiles and stores it again.
// - Least-recently-used eviction under a byte cap: a hit touches the entry's mtime; after a
//   store, the oldest entries go until the .fjk files sum to at most the cap.
// - A directory that cannot be created degrades to memory-only (usable() is false), one that
//   cannot be written to read-only (loads still hit), each with one warning; so does the first
//   write that fails (a full disk, say).
// This file does not know how kernels are compiled: the caller (jit/kernel_cache) does that
// between lock() and store().
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
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
  bool usable() const { return access() != Access::none; }
  bool writable() const { return access() == Access::read_write; }
  std::filesystem::path entry_path(const KernelKey& key) const;

  // The entry, or nullopt for a miss. A hit marks the entry recently used; an unsound entry is
  // warned about, removed, and reported as a miss.
  std::optional<Entry> load(const KernelKey& key);

  // Writes the entry atomically, then evicts down to the cap. Failures degrade the store to
  // read-only with one warning; they are never thrown.
  void store(const KernelKey& key, const Entry& entry);

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

  Stats stats() const;
  // Every unsound entry, one problem each (reads and checks every entry in full).
  std::vector<Problem> verify() const;
  // Removes unsound entries and stale leftovers, then evicts down to the cap.
  PruneResult prune();
  // Removes every entry, temporary and lock file, and the emptied shard directories; never
  // anything fusejit did not name. Returns the count of entries removed.
  int64_t clear();

 private:
  struct Listed {
    std::filesystem::path path;
    uint64_t size = 0;
    std::filesystem::file_time_type used;
  };
  // Every *.fjk file in a shard directory, with its size and mtime.
  std::vector<Listed> list_entries() const;
  // Under evict_mutex_: removes least recently used entries (never `keep`) until the total is
  // at most the cap.
  void evict_locked(const std::filesystem::path& keep);
  void degrade(Access to, const std::string& why);

  Config config_;
  spdlog::logger& log_;
  std::atomic<Access> access_{Access::none};
  std::atomic<uint64_t> temp_counter_{0};
  std::mutex evict_mutex_;
  std::optional<uint64_t> approx_bytes_;  // the directory's size as this process last saw it
  int stores_since_scan_ = 0;
};

const char* access_name(DiskStore::Access access);

}  // namespace fusejit::cache
