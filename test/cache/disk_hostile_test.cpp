// The disk store against a hostile cache directory: shards and entries that are symlinks out of
// it (nothing outside may be created, changed or deleted, by any cache command or a normal
// get), huge sparse entries (refused unread), directory trees at an entry's name (repaired),
// and text from files and users that reaches messages (escaped, long paths shortened).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <tuple>

#include "cache/disk_layout.h"
#include "cache/file_io.h"
#include "fusejit/error.h"
#include "fusejit/options.h"
#include "jit/runtime/kernel_cache.h"
#include "support.h"

using namespace fusejit;
using test::config_for;
using test::entry_of;
using test::key_of;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

// Every file under `dir` (links not followed) with its type, size, mtime and bytes: two equal
// snapshots mean nothing there was created, changed, touched or deleted.
using Snapshot = std::map<std::string, std::tuple<unsigned, int64_t, int64_t, std::string>>;
Snapshot snapshot(const fs::path& dir) {
  Snapshot s;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator();
       ++it) {
    struct stat st {};
    REQUIRE(::lstat(it->path().c_str(), &st) == 0);
    const int64_t mtime = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    s[it->path().string()] = {st.st_mode, st.st_size, mtime,
                              S_ISREG(st.st_mode) ? test::read_bytes(it->path()) : ""};
  }
  return s;
}

// Every maintenance command, whatever it throws (the point is what it touches).
void run_maintenance(cache::DiskStore& store) {
  for (const auto& action :
       std::vector<std::function<void()>>{[&] { store.stats(); }, [&] { store.verify(); },
                                          [&] { store.prune(); }, [&] { store.clear(); }}) {
    try {
      action();
    } catch (const UsageError&) {
    }
  }
}

}  // namespace

TEST_CASE("hostile cache: a symlinked shard is never entered, by any command or a get",
          "[cache][disk][hostile]") {
  TempDir dir("hostile-shard");
  test::CapturedLog log;
  const cache::DiskStore::Config c = config_for(dir, 1);  // a 1-byte cap: every store evicts
  fs::create_directories(c.dir);
  // Outside the cache: a sound entry for key 1, its lock file and a temporary file, in a
  // directory that the shard of key 1 links to.
  const cache::KernelKey key = key_of(1);
  const fs::path outside = dir.path() / "outside";
  fs::create_directories(outside);
  test::write_bytes(outside / (key.hex() + ".fjk"), cache::encode_entry(key, entry_of(1)));
  test::write_bytes(outside / (key.hex() + ".lock"), "");
  test::write_bytes(outside / (key.hex() + ".fjk.tmp-1-2-3"), "x");
  test::set_age(outside / (key.hex() + ".lock"), std::chrono::hours(1));
  test::set_age(outside / (key.hex() + ".fjk.tmp-1-2-3"), std::chrono::hours(1));
  fs::create_symlink(outside, fs::path(c.dir) / key.shard());
  const Snapshot before = snapshot(outside);

  cache::DiskStore store(c, *log.logger);
  CHECK_FALSE(store.load(key));  // the entry out there is not this cache's
  CHECK_FALSE(store.contains(key));
  {
    std::optional<cache::FileLock> lock = store.lock(key, cache::FileLock::Wait::no);
    REQUIRE(lock);
    CHECK_FALSE(lock->held());  // going on unlocked, rather than locking out there
  }
  CHECK_FALSE(store.store(key, entry_of(1)));
  CHECK(store.was_not_stored(key));
  CHECK_THAT(log.str(), ContainsSubstring("a symbolic link stands there"));
  cache::DiskStore again(c, *log.logger);  // writable again: the one above degraded
  run_maintenance(again);
  CHECK(snapshot(outside) == before);
  CHECK(fs::is_symlink(fs::path(c.dir) / key.shard()));

  // A normal get (memory -> disk -> lock -> compile -> store) of a kernel whose shard links out.
  jit::KernelCache probe(Options::parse({{"FUSEJIT_CACHE_DIR", c.dir}}), *log.logger);
  int variant = 31;  // a kernel whose shard is not key 1's (that one links out already)
  while (probe.key(test::tiny_kernel(variant), "sm_90").shard() == key.shard()) ++variant;
  const templates::Kernel k = test::tiny_kernel(variant);
  const cache::KernelKey kernel_key = probe.key(k, "sm_90");
  const fs::path kernel_outside = dir.path() / "outside-kernel";
  fs::create_directories(kernel_outside);
  test::write_bytes(kernel_outside / (kernel_key.hex() + ".lock"), "");
  cache::Entry stale = entry_of(2);
  test::write_bytes(kernel_outside / (kernel_key.hex() + ".fjk"),
                    cache::encode_entry(kernel_key, stale));
  fs::create_symlink(kernel_outside, fs::path(c.dir) / kernel_key.shard());
  const Snapshot kernel_before = snapshot(kernel_outside);
  jit::KernelCache::Outcome how{};
  jit::KernelCache(Options::parse({{"FUSEJIT_CACHE_DIR", c.dir}}), *log.logger)
      .get(k, "sm_90", &how);
  CHECK(how == jit::KernelCache::Outcome::compiled);  // not the entry out there
  CHECK(snapshot(kernel_outside) == kernel_before);
}

TEST_CASE("hostile cache: entries and locks that are symlinks are never followed",
          "[cache][disk][hostile]") {
  TempDir dir("hostile-links");
  test::CapturedLog log;
  cache::DiskStore store(config_for(dir), *log.logger);
  REQUIRE(store.store(key_of(2), entry_of(2)));
  const fs::path outside = dir.path() / "outside";
  fs::create_directories(outside);
  test::write_bytes(outside / "entry", cache::encode_entry(key_of(1), entry_of(1)));
  test::write_bytes(outside / "lock", "");
  test::set_age(outside / "lock", std::chrono::hours(1));
  const fs::path entry = store.entry_path(key_of(1));
  fs::create_directories(entry.parent_path());
  fs::create_symlink(outside / "entry", entry);
  const fs::path lock_path = entry.parent_path() / (key_of(1).hex() + ".lock");
  fs::create_symlink(outside / "lock", lock_path);
  const Snapshot before = snapshot(outside);

  CHECK_FALSE(store.load(key_of(1)));
  CHECK_FALSE(store.lock(key_of(1), cache::FileLock::Wait::no)->held());
  run_maintenance(store);
  CHECK(snapshot(outside) == before);
  CHECK_FALSE(fs::exists(fs::symlink_status(entry)));  // the links themselves went
  CHECK_FALSE(fs::exists(fs::symlink_status(lock_path)));
}

TEST_CASE("hostile cache: a huge sparse entry is refused without being read",
          "[cache][disk][hostile]") {
  TempDir dir("hostile-sparse");
  test::CapturedLog log;
  cache::DiskStore store(config_for(dir), *log.logger);
  REQUIRE(store.store(key_of(1), entry_of(1)));
  REQUIRE(store.store(key_of(2), entry_of(2)));
  // 6 GB that take no disk: a sound header, then a hole. Reading it whole would take 6 GB.
  const fs::path path = store.entry_path(key_of(1));
  fs::resize_file(path, uint64_t{6} << 30);

  const auto start = std::chrono::steady_clock::now();
  const std::vector<cache::DiskStore::Problem> problems = store.verify();
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].path == path);
  CHECK_THAT(problems[0].what, ContainsSubstring("too large"));
  CHECK(store.stats().entries == 2);
  const cache::DiskStore::PruneResult pruned = store.prune();
  CHECK(pruned.removed_unsound.size() == 1);
  CHECK(store.verify().empty());
  // load() refuses it the same way (and removes it).
  REQUIRE(store.store(key_of(1), entry_of(1)));
  fs::resize_file(path, cache::kMaxEntryBytes + 1);
  CHECK_FALSE(store.load(key_of(1)));
  CHECK_THAT(log.str(), ContainsSubstring("too large"));
  CHECK_FALSE(fs::exists(path));
  CHECK(store.load(key_of(2)));
  // Seconds at most, where reading 6 GB took half a minute.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));

  // A header that claims more than any entry is unsound without reading on.
  std::string problem;
  std::string bytes = cache::encode_entry(key_of(3), entry_of(3));
  bytes[32 + 7] = 0x10;  // the cubin size's top byte
  CHECK_FALSE(cache::decode_entry(bytes, key_of(3), &problem));
  CHECK_THAT(problem, ContainsSubstring("more than any entry"));
}

TEST_CASE("hostile cache: a directory tree at an entry's name is removed, links in it not followed",
          "[cache][disk][hostile]") {
  TempDir dir("hostile-tree");
  test::CapturedLog log;
  cache::DiskStore store(config_for(dir), *log.logger);
  const fs::path outside = dir.path() / "outside";
  fs::create_directories(outside / "sub");
  test::write_bytes(outside / "sub" / "precious", "mine");
  const Snapshot before = snapshot(outside);
  auto plant_tree = [&](const fs::path& at) {
    fs::create_directories(at / "a" / "b");
    test::write_bytes(at / "a" / "b" / "file", "x");
    fs::create_symlink(outside, at / "a" / "link-to-dir");
    fs::create_symlink(outside / "sub" / "precious", at / "link-to-file");
  };

  // Where an entry is stored: the tree goes, the entry is written, and warm would count it.
  plant_tree(store.entry_path(key_of(1)));
  CHECK(store.store(key_of(1), entry_of(1)));
  CHECK(store.contains(key_of(1)));
  CHECK(store.load(key_of(1)));
  CHECK_THAT(log.str(), ContainsSubstring("removed the directory"));

  // Where prune finds one: removed, and verify is clean afterwards.
  plant_tree(store.entry_path(key_of(2)));
  REQUIRE(store.verify().size() == 1);
  CHECK(store.prune().removed_unsound.size() == 1);
  CHECK(store.verify().empty());
  CHECK_FALSE(fs::exists(store.entry_path(key_of(2))));

  // And clear removes one too.
  plant_tree(store.entry_path(key_of(3)));
  CHECK(store.clear() == 2);
  CHECK_FALSE(fs::exists(store.entry_path(key_of(3))));
  CHECK(snapshot(outside) == before);
  CHECK(store.writable());
}

TEST_CASE("hostile cache: text from users and files reaches messages escaped", "[cache][hostile]") {
  CHECK(cache::printable("sm_90") == "sm_90");
  CHECK(cache::printable("a\x1b[2Jb\n\x7f\xff") == "a\\x1b[2Jb\\x0a\\x7f\\xff");
  CHECK(cache::printable("line\nnext\tcol\r", /*keep_lines=*/true) == "line\nnext\tcol\\x0d");
  // A long path: head and tail, escaped, with the length.
  const std::string long_path = "/tmp/\x1b]0;title\x07" + std::string(100000, 'x') + "/end";
  const std::string shown = cache::display_path(long_path);
  CHECK(shown.size() < 240);
  CHECK(shown.find('\x1b') == std::string::npos);
  CHECK_THAT(shown, ContainsSubstring("\\x1b]0;title\\x07"));
  CHECK_THAT(shown, ContainsSubstring("/end"));
  CHECK_THAT(shown, ContainsSubstring(std::to_string(long_path.size()) + " characters"));
  // An environment variable's value, and an unknown variable's name.
  try {
    Options::parse({{"FUSEJIT_LOG", "\x1b[31mloud"}});
    FAIL("no error");
  } catch (const UsageError& e) {
    const std::string what = e.what();
    CHECK(what.find('\x1b') == std::string::npos);
    CHECK_THAT(what, ContainsSubstring("FUSEJIT_LOG=\\x1b[31mloud"));
  }
  const Options o = Options::parse({{"FUSEJIT_\x1b[2J", "1"}});
  REQUIRE(o.warnings.size() == 1);
  CHECK(o.warnings[0].find('\x1b') == std::string::npos);
}
