// cache/disk_maintenance: what `fusejit cache stats|verify|prune|clear` do to a disk store:
// counting, checking every entry in full, repairing, emptying. See disk_store.h.
#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "cache/disk_layout.h"
#include "cache/disk_store.h"
#include "fusejit/error.h"

namespace fusejit::cache {

namespace fs = std::filesystem;

namespace {

// Temporary and lock files older than this belong to no live process: a compile and a write
// take seconds at most.
constexpr auto kStaleAfter = std::chrono::minutes(10);

// Calls f(path, kind) for every file in every shard directory.
template <typename F>
void for_each_file(const std::string& dir, F&& f) {
  std::error_code ec;
  for (const fs::directory_entry& shard : fs::directory_iterator(dir, ec)) {
    if (!layout::is_shard_name(shard.path().filename().string())) continue;
    std::error_code shard_ec;
    if (!shard.is_directory(shard_ec)) continue;
    for (const fs::directory_entry& file : fs::directory_iterator(shard.path(), shard_ec)) {
      f(file.path(), layout::classify(file.path().filename().string()));
    }
  }
}

bool is_stale(const fs::path& path) {
  std::error_code ec;
  const auto mtime = fs::last_write_time(path, ec);
  return !ec && fs::file_time_type::clock::now() - mtime > kStaleAfter;
}

// Why an entry file is unsound, or "" when it is sound.
std::string check_entry(const fs::path& path) {
  const std::string file = path.filename().string();
  const std::optional<KernelKey> key = KernelKey::from_hex(file.substr(0, 32));
  if (!key) return "the name is not a kernel key";
  if (path.parent_path().filename().string() != key->shard()) {
    return fmt::format("in the wrong shard directory (belongs in {}/)", key->shard());
  }
  std::string bytes, why;
  bool missing = false;
  if (!layout::read_file(path, bytes, &why, &missing)) {
    return missing ? "" : "unreadable: " + why;  // missing: evicted while we looked
  }
  std::string problem;
  return decode_entry(bytes, *key, &problem) ? "" : problem;
}

void require_writable(const DiskStore& store, std::string_view what) {
  if (store.writable()) return;
  throw UsageError(
      fmt::format("cache {}: the cache directory '{}' is {}; nothing can be removed "
                  "(FUSEJIT_CACHE_DIR or --cache-dir names another)",
                  what, store.config().dir, access_name(store.access())));
}

}  // namespace

DiskStore::Stats DiskStore::stats() const {
  Stats s;
  if (!usable()) return s;
  for_each_file(config_.dir, [&](const fs::path& path, layout::FileKind kind) {
    if (kind == layout::FileKind::temp) ++s.temp_files;
    if (kind == layout::FileKind::lock) ++s.lock_files;
    if (kind != layout::FileKind::entry) return;
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    if (ec) return;
    // The header and the two short strings are enough to count by arch.
    std::string prefix, why, problem;
    layout::read_file(path, prefix, &why);
    prefix.resize(std::min<size_t>(prefix.size(), kEntryHeaderSize + 4096 + 64));
    const std::optional<EntrySummary> summary = peek_entry(prefix, &problem);
    ArchCount& arch = s.per_arch[summary ? summary->arch : "?"];
    ++arch.entries;
    arch.bytes += size;
    ++s.entries;
    s.bytes += size;
  });
  return s;
}

std::vector<DiskStore::Problem> DiskStore::verify() const {
  std::vector<Problem> problems;
  if (!usable()) return problems;
  for_each_file(config_.dir, [&](const fs::path& path, layout::FileKind kind) {
    if (kind != layout::FileKind::entry) return;
    if (std::string what = check_entry(path); !what.empty()) {
      problems.push_back({path, std::move(what)});
    }
  });
  std::sort(problems.begin(), problems.end(),
            [](const Problem& a, const Problem& b) { return a.path < b.path; });
  return problems;
}

DiskStore::PruneResult DiskStore::prune() {
  require_writable(*this, "prune");
  PruneResult r;
  for (Problem& p : verify()) {
    std::error_code ec;
    fs::remove(p.path, ec);
    r.removed_unsound.push_back(std::move(p));
  }
  std::vector<fs::path> leftovers;
  for_each_file(config_.dir, [&](const fs::path& path, layout::FileKind kind) {
    const bool leftover = kind == layout::FileKind::temp || kind == layout::FileKind::lock;
    if (leftover && is_stale(path)) leftovers.push_back(path);
  });
  for (const fs::path& path : leftovers) {
    std::error_code ec;
    if (fs::remove(path, ec)) ++r.removed_leftovers;
  }
  const Stats before = stats();
  {
    std::lock_guard guard(evict_mutex_);
    evict_locked(fs::path());
  }
  const Stats after = stats();
  r.evicted = before.entries - after.entries;
  r.evicted_bytes = before.bytes - after.bytes;
  return r;
}

int64_t DiskStore::clear() {
  require_writable(*this, "clear");
  std::vector<fs::path> doomed;
  int64_t entries = 0;
  for_each_file(config_.dir, [&](const fs::path& path, layout::FileKind kind) {
    if (kind == layout::FileKind::other) return;  // not ours: left alone
    doomed.push_back(path);
    entries += kind == layout::FileKind::entry ? 1 : 0;
  });
  for (const fs::path& path : doomed) {
    std::error_code ec;
    fs::remove(path, ec);
    if (ec)
      throw UsageError(fmt::format("cache clear: cannot remove {}: {}", path.string(), ec.message()));
  }
  // Shard directories that are now empty go too (fs::remove leaves a non-empty one alone).
  std::error_code ec;
  for (const fs::directory_entry& shard : fs::directory_iterator(config_.dir, ec)) {
    if (!layout::is_shard_name(shard.path().filename().string())) continue;
    std::error_code rm_ec;
    fs::remove(shard.path(), rm_ec);
  }
  std::lock_guard guard(evict_mutex_);
  approx_bytes_.reset();
  return entries;
}

}  // namespace fusejit::cache
