// The disk store: round trips, damage detected and repaired, LRU eviction under the cap, a
// directory that cannot be used, locks, and the maintenance commands.
#include <chrono>

#include "cache/disk_store.h"
#include "support.h"

using namespace fusejit;
using test::TempDir;
namespace fs = std::filesystem;

using test::config_for;
using test::entry_bytes;
using test::entry_of;
using test::key_of;
using test::set_age;

TEST_CASE("disk store: store and load round trip", "[cache][disk]") {
  TempDir dir("roundtrip");
  test::CapturedLog log;
  cache::DiskStore store(config_for(dir), *log.logger);
  REQUIRE(store.writable());

  CHECK_FALSE(store.load(key_of(1)));  // a plain miss, no warning
  store.store(key_of(1), entry_of(1));
  store.store(key_of(2), entry_of(2, "sm_80"));

  const fs::path path = store.entry_path(key_of(1));
  CHECK(path == fs::path(dir.str("cache")) / key_of(1).shard() / (key_of(1).hex() + ".fjk"));
  CHECK(fs::exists(path));
  const auto back = store.load(key_of(1));
  REQUIRE(back);
  CHECK(back->name == "fj_test_1");
  CHECK(back->cubin == entry_of(1).cubin);
  CHECK(back->ptx == entry_of(1).ptx);
  CHECK(back->source == entry_of(1).source);

  // A second store opened on the same directory (another process) sees the same entries.
  cache::DiskStore other(config_for(dir), *log.logger);
  REQUIRE(other.load(key_of(2)));
  CHECK(other.load(key_of(2))->arch == "sm_80");

  const cache::DiskStore::Stats s = store.stats();
  CHECK(s.entries == 2);
  CHECK(s.bytes == entry_bytes(dir.str("cache")));
  CHECK(s.per_arch.at("sm_90").entries == 1);
  CHECK(s.per_arch.at("sm_80").entries == 1);
  CHECK(s.temp_files == 0);
  CHECK(s.lock_files == 0);
  CHECK(store.verify().empty());
  CHECK(log.warnings() == 0);
}

TEST_CASE("disk store: truncated and flipped entries are found, then repaired", "[cache][disk]") {
  TempDir dir("repair");
  test::CapturedLog log;
  cache::DiskStore store(config_for(dir), *log.logger);
  for (int i = 0; i < 4; ++i) store.store(key_of(i), entry_of(i));
  const fs::path truncated = store.entry_path(key_of(1));
  const fs::path flipped = store.entry_path(key_of(2));
  test::truncate_file(truncated);
  test::flip_byte(flipped);

  const auto problems = store.verify();
  REQUIRE(problems.size() == 2);
  std::map<fs::path, std::string> by_path;
  for (const auto& p : problems) by_path[p.path] = p.what;
  CHECK_THAT(by_path.at(truncated), ContainsSubstring("truncated"));
  CHECK_THAT(by_path.at(flipped), ContainsSubstring("checksum"));

  // A load is a miss that warns, naming the file, and removes it...
  CHECK_FALSE(store.load(key_of(1)));
  CHECK_FALSE(store.load(key_of(2)));
  CHECK(log.warnings() == 2);
  CHECK_THAT(log.str(), ContainsSubstring(truncated.string()));
  CHECK_THAT(log.str(), ContainsSubstring(flipped.string()));
  CHECK_FALSE(fs::exists(truncated));
  CHECK_FALSE(fs::exists(flipped));
  // ...and the caller's store (after compiling) writes it sound again.
  store.store(key_of(1), entry_of(1));
  store.store(key_of(2), entry_of(2));
  CHECK(store.verify().empty());
  REQUIRE(store.load(key_of(2)));
  CHECK(store.load(key_of(2))->cubin == entry_of(2).cubin);
  CHECK(store.load(key_of(3)));
}

TEST_CASE("disk store: LRU eviction keeps the directory under the cap", "[cache][disk]") {
  TempDir dir("evict");
  test::CapturedLog log;
  const size_t cubin = 10000;
  const uint64_t one = cache::encode_entry(key_of(0), entry_of(0, "sm_90", cubin)).size();
  cache::DiskStore store(config_for(dir, one * 3 + one / 2), *log.logger);  // room for 3

  for (int i : {0, 1, 2}) store.store(key_of(i), entry_of(i, "sm_90", cubin));
  // Made-up ages so that the order does not hang on the clock's resolution: 0 is the oldest.
  set_age(store.entry_path(key_of(0)), std::chrono::seconds(300));
  set_age(store.entry_path(key_of(1)), std::chrono::seconds(200));
  set_age(store.entry_path(key_of(2)), std::chrono::seconds(100));
  REQUIRE(store.load(key_of(0)));  // a hit: 0 is now the most recently used

  store.store(key_of(3), entry_of(3, "sm_90", cubin));  // 4 entries > cap: the LRU one goes
  CHECK(fs::exists(store.entry_path(key_of(0))));
  CHECK_FALSE(fs::exists(store.entry_path(key_of(1))));
  CHECK(fs::exists(store.entry_path(key_of(2))));
  CHECK(fs::exists(store.entry_path(key_of(3))));
  CHECK(entry_bytes(dir.str("cache")) <= store.config().max_bytes);

  // Then 2, which is older than 0 and 3.
  store.store(key_of(4), entry_of(4, "sm_90", cubin));
  CHECK_FALSE(fs::exists(store.entry_path(key_of(2))));
  CHECK(fs::exists(store.entry_path(key_of(0))));

  // However many are stored, the directory stays under the cap and the newest entry stays.
  for (int i = 5; i < 25; ++i) {
    store.store(key_of(i), entry_of(i, "sm_90", cubin));
    CHECK(entry_bytes(dir.str("cache")) <= store.config().max_bytes);
    CHECK(fs::exists(store.entry_path(key_of(i))));
  }
  CHECK(store.stats().entries == 3);
}

TEST_CASE("disk store: a directory that cannot be created means memory only, one warning",
          "[cache][disk]") {
  TempDir dir("unusable");
  // Under a regular file no directory can be made, whoever we are (root ignores permissions).
  test::write_bytes(dir.path() / "afile", "not a directory");
  test::CapturedLog log;
  cache::DiskStore::Config c;
  c.dir = dir.str("afile/cache");
  cache::DiskStore store(c, *log.logger);
  CHECK_FALSE(store.usable());
  CHECK_FALSE(store.writable());
  CHECK(log.warnings() == 1);
  CHECK_THAT(log.str(), ContainsSubstring(c.dir));
  CHECK_THAT(log.str(), ContainsSubstring("memory only"));

  store.store(key_of(1), entry_of(1));
  CHECK_FALSE(store.load(key_of(1)));
  const auto lock = store.lock(key_of(1), cache::FileLock::Wait::no);
  REQUIRE(lock);
  CHECK_FALSE(lock->held());
  CHECK(log.warnings() == 1);
}

TEST_CASE("disk store: the first failed write degrades it, with one warning", "[cache][disk]") {
  TempDir dir("writefail");
  test::CapturedLog log;
  cache::DiskStore store(config_for(dir), *log.logger);
  REQUIRE(store.writable());
  // A regular file where key 1's shard directory should be.
  test::write_bytes(fs::path(dir.str("cache")) / key_of(1).shard(), "in the way");
  store.store(key_of(1), entry_of(1));
  CHECK_FALSE(store.writable());
  CHECK(log.warnings() == 1);
  for (int i = 2; i < 6; ++i) store.store(key_of(i), entry_of(i));
  CHECK(log.warnings() == 1);
  CHECK(store.stats().entries == 0);
}

TEST_CASE("disk store: a kernel's lock excludes others until released", "[cache][disk]") {
  TempDir dir("lock");
  test::CapturedLog log;
  cache::DiskStore store(config_for(dir), *log.logger);
  auto first = store.lock(key_of(1), cache::FileLock::Wait::no);
  REQUIRE(first);
  REQUIRE(first->held());
  CHECK(test::files_named(dir.str("cache"), ".lock") == 1);
  CHECK_FALSE(store.lock(key_of(1), cache::FileLock::Wait::no));  // held: busy
  auto other = store.lock(key_of(2), cache::FileLock::Wait::no);  // another key: free
  REQUIRE(other);
  CHECK(other->held());
  first->release();
  auto again = store.lock(key_of(1), cache::FileLock::Wait::yes);
  REQUIRE(again);
  CHECK(again->held());
  again->release();
  other->release();
  CHECK(test::files_named(dir.str("cache"), ".lock") == 0);  // released locks leave no files
}

TEST_CASE("disk store: prune and clear", "[cache][disk]") {
  TempDir dir("prune");
  test::CapturedLog log;
  const size_t cubin = 5000;
  const uint64_t one = cache::encode_entry(key_of(0), entry_of(0, "sm_90", cubin)).size();
  cache::DiskStore::Config c = config_for(dir);
  {
    cache::DiskStore big(c, *log.logger);
    for (int i = 0; i < 6; ++i) big.store(key_of(i), entry_of(i, "sm_90", cubin));
    for (int i = 0; i < 6; ++i)
      set_age(big.entry_path(key_of(i)), std::chrono::seconds(600 - i * 10));
    test::flip_byte(big.entry_path(key_of(5)));
  }
  // Leftovers: a stale temporary file, a fresh one (a write in flight), a stale lock.
  const fs::path shard = fs::path(c.dir) / key_of(0).shard();
  const fs::path stale_temp = shard / (key_of(0).hex() + ".fjk.tmp-1-0");
  const fs::path fresh_temp = shard / (key_of(0).hex() + ".fjk.tmp-2-0");
  const fs::path stale_lock = shard / (key_of(0).hex() + ".lock");
  for (const auto& p : {stale_temp, fresh_temp, stale_lock}) test::write_bytes(p, "x");
  set_age(stale_temp, std::chrono::hours(1));
  set_age(stale_lock, std::chrono::hours(1));
  // Files that are not fusejit's stay whatever happens.
  test::write_bytes(fs::path(c.dir) / "README.txt", "mine");
  test::write_bytes(shard / "notes.txt", "mine too");

  c.max_bytes = one * 3;
  cache::DiskStore store(c, *log.logger);
  const auto stats = store.stats();
  CHECK(stats.entries == 6);
  CHECK(stats.temp_files == 2);
  CHECK(stats.lock_files == 1);

  const cache::DiskStore::PruneResult r = store.prune();
  REQUIRE(r.removed_unsound.size() == 1);
  CHECK(r.removed_unsound[0].path == store.entry_path(key_of(5)));
  CHECK(r.removed_leftovers == 2);
  CHECK(r.evicted == 2);  // 5 sound entries, room for 3: the two oldest (0 and 1) go
  CHECK_FALSE(fs::exists(store.entry_path(key_of(0))));
  CHECK_FALSE(fs::exists(store.entry_path(key_of(1))));
  CHECK(fs::exists(store.entry_path(key_of(2))));
  CHECK(fs::exists(fresh_temp));
  CHECK(store.verify().empty());

  CHECK(store.clear() == 3);
  CHECK(store.stats().entries == 0);
  CHECK_FALSE(fs::exists(fresh_temp));
  CHECK(fs::exists(fs::path(c.dir) / "README.txt"));
  CHECK(fs::exists(shard / "notes.txt"));
}
