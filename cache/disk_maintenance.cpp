// cache/disk_maintenance: what `fusejit cache stats|verify|prune|clear` do to a disk store:
// counting, checking every entry in full, repairing, emptying. See disk_store.h. Every listing
// goes through layout::list_store, so none of them leaves the cache directory.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "cache/disk_layout.h"
#include "cache/disk_store.h"
#include "cache/file_io.h"
#include "fusejit/error.h"

namespace fusejit::cache {

namespace fs = std::filesystem;

namespace {

// Temporary and lock files older than this belong to no live process: a compile and a write
// take seconds at most.
constexpr int64_t kStaleAfterNs = int64_t{10} * 60 * 1000000000;

// The header and the two short strings: enough to count an entry by arch.
constexpr size_t kSummaryBytes = kEntryHeaderSize + 4096 + 64;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Reads `f` (at most `max_bytes`; nothing of a file above kMaxEntryBytes) through its shard
// opened with O_NOFOLLOW, so a shard swapped for a symlink since the listing is not entered.
ReadResult read_listed(const std::string& dir, const layout::ShardFile& f, std::string& bytes,
                       size_t max_bytes = std::numeric_limits<size_t>::max()) {
  const layout::ShardDir shard(dir, f.shard, /*create=*/false);
  if (!shard.is_open()) {
    ReadResult r;
    r.status = shard.error() == ENOENT ? ReadStatus::missing : ReadStatus::failed;
    r.why = shard.why();
    return r;
  }
  return read_regular_file_at(shard.fd(), f.name, bytes, max_bytes, kMaxEntryBytes);
}

// Why an entry file is unsound, or "" when it is sound.
std::string check_entry(const std::string& dir, const layout::ShardFile& f) {
  if (!f.regular()) return fmt::format("{}, not a regular file", file_type_name(f.mode));
  const std::optional<KernelKey> key = KernelKey::from_hex(f.name.substr(0, 32));
  if (!key) return "the name is not a kernel key";
  if (f.shard != key->shard()) {
    return fmt::format("in the wrong shard directory (belongs in {}/)", key->shard());
  }
  std::string bytes;
  const ReadResult read = read_listed(dir, f, bytes);
  if (read.status == ReadStatus::missing) return "";  // evicted while we looked
  if (read.status == ReadStatus::too_large) return read.why;
  if (read.status != ReadStatus::ok) return "unreadable: " + read.why;
  std::string problem;
  return decode_entry(bytes, *key, &problem) ? "" : problem;
}

void require_writable(const DiskStore& store, std::string_view what) {
  if (store.writable()) return;
  throw UsageError(
      fmt::format("cache {}: the cache directory '{}' is {}; nothing can be removed "
                  "(FUSEJIT_CACHE_DIR or --cache-dir names another)",
                  what, display_path(store.config().dir), access_name(store.access())));
}

}  // namespace

void DiskStore::require_reachable(std::string_view what) const {
  if (dir_error_ == 0 || dir_error_ == ENOENT) return;
  throw UsageError(fmt::format("cache {}: the cache directory '{}' cannot be used: {}", what,
                               display_path(config_.dir), std::strerror(dir_error_)));
}

DiskStore::Stats DiskStore::stats() const {
  require_reachable("stats");
  Stats s;
  if (!usable()) return s;
  for (const layout::ShardFile& f : layout::list_store(config_.dir).files) {
    if (f.kind == layout::FileKind::temp) ++s.temp_files;
    if (f.kind == layout::FileKind::lock) ++s.lock_files;
    if (f.kind != layout::FileKind::entry || !f.regular()) continue;
    std::string prefix, problem;
    const ReadResult read = read_listed(config_.dir, f, prefix, kSummaryBytes);
    if (read.status == ReadStatus::missing) continue;  // evicted while we looked
    const std::optional<EntrySummary> summary =
        read.status == ReadStatus::ok ? peek_entry(prefix, &problem) : std::nullopt;
    ArchCount& arch = s.per_arch[summary ? summary->arch : "?"];
    ++arch.entries;
    arch.bytes += f.size;
    ++s.entries;
    s.bytes += f.size;
  }
  return s;
}

std::vector<DiskStore::Problem> DiskStore::verify() const {
  require_reachable("verify");
  std::vector<Problem> problems;
  if (!usable()) return problems;
  for (const layout::ShardFile& f : layout::list_store(config_.dir).files) {
    if (f.kind != layout::FileKind::entry) continue;
    if (std::string what = check_entry(config_.dir, f); !what.empty()) {
      problems.push_back({f.path(config_.dir), std::move(what)});
    }
  }
  std::sort(problems.begin(), problems.end(),
            [](const Problem& a, const Problem& b) { return a.path < b.path; });
  return problems;
}

DiskStore::PruneResult DiskStore::prune() {
  require_reachable("prune");
  require_writable(*this, "prune");
  PruneResult r;
  const layout::Listing listing = layout::list_store(config_.dir);
  const int64_t stale_before = now_ns() - kStaleAfterNs;
  std::string why;
  for (const layout::ShardFile& f : listing.files) {
    if (f.kind == layout::FileKind::entry) {
      std::string what = check_entry(config_.dir, f);
      if (what.empty()) continue;
      // Whatever stands at an entry's name goes, a directory tree included (disk_layout.h).
      if (!layout::remove_store_file(config_.dir, f.shard, f.name, &why)) {
        what += "; not removed: " + why;
      }
      r.removed_unsound.push_back({f.path(config_.dir), std::move(what)});
    } else if (f.kind == layout::FileKind::temp || f.kind == layout::FileKind::lock) {
      if (f.mtime_ns < stale_before && !S_ISDIR(f.mode) &&
          layout::remove_store_file(config_.dir, f.shard, f.name, &why)) {
        ++r.removed_leftovers;
      }
    }
  }
  const Evicted evicted = evict(fs::path());
  r.evicted = evicted.entries;
  r.evicted_bytes = evicted.bytes;
  return r;
}

int64_t DiskStore::clear() {
  require_reachable("clear");
  require_writable(*this, "clear");
  const layout::Listing listing = layout::list_store(config_.dir);
  int64_t entries = 0;
  for (const layout::ShardFile& f : listing.files) {
    if (f.kind == layout::FileKind::other) continue;  // not ours: left alone
    // A directory at an entry's name is removed (disk_layout.h); at another of our names
    // it is no leftover of ours.
    if (S_ISDIR(f.mode) && f.kind != layout::FileKind::entry) continue;
    std::string why;
    if (!layout::remove_store_file(config_.dir, f.shard, f.name, &why)) {
      throw UsageError("cache clear: " + why);
    }
    entries += f.kind == layout::FileKind::entry ? 1 : 0;
  }
  // Shard directories that are now empty go too (rmdir leaves a non-empty one, and a symlink,
  // alone).
  for (const std::string& shard : listing.shards) {
    ::rmdir((fs::path(config_.dir) / shard).c_str());
  }
  return entries;
}

}  // namespace fusejit::cache
