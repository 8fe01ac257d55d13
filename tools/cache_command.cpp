// fusejit cache stats|verify|prune|clear [--cache-dir D]: looks after the disk kernel cache
// (FUSEJIT_CACHE_DIR unless --cache-dir names another; the cap is FUSEJIT_CACHE_MAX_MB).
//   stats   entries, bytes, the cap, and entries per arch
//   verify  reads every entry in full; prints each unsound one on a line of its own
//           ("PATH: what is wrong") and exits 1 when there is any
//   prune   removes unsound entries and stale temporary/lock files, then evicts least recently
//           used entries down to the cap
//   clear   removes every entry (and only what fusejit wrote)
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "cache/disk_store.h"
#include "cache/file_io.h"
#include "fusejit/error.h"
#include "fusejit/options.h"
#include "jit/api/log.h"
#include "tools/commands.h"

namespace fusejit::tools {

namespace {

std::string megabytes(uint64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

struct CacheArgs {
  std::string action;
  std::string dir;
};

const std::vector<std::string> kActions = {"stats", "verify", "prune", "clear"};

int cache(const CacheArgs& args) {
  const std::string& action = args.action;
  const std::string& dir = args.dir;
  const Options options = options_from_env();
  auto log = jit::make_logger(options.log_level);
  cache::DiskStore::Config config;
  config.dir = dir.empty() ? options.cache_dir : dir;
  if (options.cache_max_mb) config.max_bytes = static_cast<uint64_t>(*options.cache_max_mb) << 20;
  config.create = false;  // looking is no reason to create it
  cache::DiskStore store(config, *log);
  const bool exists = store.exists();  // never throws, whatever the path
  const std::string shown_dir = cache::display_path(config.dir);

  if (action == "stats") {
    const cache::DiskStore::Stats s = store.stats();
    fmt::print("cache directory: {} ({})\n", shown_dir,
               exists ? cache::access_name(store.access()) : "does not exist");
    fmt::print("entries: {}  bytes: {} ({})  cap: {}\n", s.entries, s.bytes, megabytes(s.bytes),
               megabytes(config.max_bytes));
    for (const auto& [arch, count] : s.per_arch) {
      // The arch is read from entries no checksum has vouched for: escaped.
      fmt::print("  {}: {} entries, {} bytes\n", cache::printable(arch), count.entries,
                 count.bytes);
    }
    if (s.temp_files + s.lock_files > 0) {
      fmt::print("temporary files: {}  lock files: {}\n", s.temp_files, s.lock_files);
    }
    return 0;
  }
  if (action == "verify") {
    const std::vector<cache::DiskStore::Problem> problems = store.verify();
    for (const auto& p : problems) {
      fmt::print("{}: {}\n", cache::display_path(p.path), cache::printable(p.what));
    }
    const cache::DiskStore::Stats s = store.stats();
    fmt::print("verified {} entries in {}: {} unsound\n", s.entries, shown_dir, problems.size());
    return problems.empty() ? 0 : 1;
  }
  if (!exists) {
    fmt::print("{}: nothing there (no cache directory {})\n", action, shown_dir);
    return 0;
  }
  if (action == "prune") {
    const cache::DiskStore::PruneResult r = store.prune();
    for (const auto& p : r.removed_unsound) {
      fmt::print("removed {}: {}\n", cache::display_path(p.path), cache::printable(p.what));
    }
    fmt::print(
        "pruned {}: {} unsound entries removed, {} evicted ({}) to stay under {}, {} stale "
        "temporary or lock files removed\n",
        shown_dir, r.removed_unsound.size(), r.evicted, megabytes(r.evicted_bytes),
        megabytes(config.max_bytes), r.removed_leftovers);
    return 0;
  }
  const int64_t removed = store.clear();
  fmt::print("cleared {}: {} entries removed\n", shown_dir, removed);
  return 0;
}

}  // namespace

Command add_cache_command(CLI::App& tool) {
  auto args = std::make_shared<CacheArgs>();
  CLI::App* app = tool.add_subcommand(
      "cache",
      "Inspect and maintain the disk kernel cache (FUSEJIT_CACHE_DIR; the cap is "
      "FUSEJIT_CACHE_MAX_MB). stats: entries, bytes, the cap, entries per arch. verify: read "
      "every entry in full, print each unsound one on a line of its own, exit 1 when there is "
      "any. prune: remove unsound entries and stale temporary or lock files, then evict least "
      "recently used entries down to the cap. clear: remove every entry.");
  app->add_option("ACTION", args->action, "what to do")
      ->required()
      ->type_name("stats|verify|prune|clear")
      ->check(CLI::Validator(
          [](std::string& action) -> std::string {
            if (std::find(kActions.begin(), kActions.end(), action) != kActions.end()) return "";
            return fmt::format("unknown action '{}'; expected stats, verify, prune or clear",
                               action);
          },
          ""));
  app->add_option("--cache-dir", args->dir, "the cache directory (default: FUSEJIT_CACHE_DIR)")
      ->type_name("D");
  return {app, [args] { return cache(*args); }};
}

}  // namespace fusejit::tools
