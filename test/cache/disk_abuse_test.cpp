// The disk store under abuse: what stands at an entry's path is not always an entry (a FIFO, a
// symlink, a directory), shards may be symlinks, directories may be unreadable or have absurd
// names, entries may come from an older format, and several writers share one cap. Each case
// must end in a clear result or a fusejit::Error, never a hang, a crash, a raw
// std::filesystem_error, or a file touched outside the cache.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <thread>
#include <vector>

#include "cache/disk_layout.h"
#include "cache/file_io.h"
#include "fusejit/error.h"
#include "fusejit/options.h"
#include "support.h"

using namespace fusejit;
using test::config_for;
using test::entry_of;
using test::key_of;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

constexpr int kSkipped = 77;

// Runs `body` in a child process (optionally as the unprivileged user "nobody", for permission
// checks when the tests run as root) and returns its exit status; -1 when it had to be killed
// after `timeout` (a hang) or died of a signal. The body returns its own status.
int in_child(const std::function<int()>& body, std::chrono::seconds timeout,
             bool unprivileged = false) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int rc = 0;
    if (unprivileged && ::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) {
      rc = kSkipped;
    } else {
      try {
        rc = body();
      } catch (...) {
        rc = 98;
      }
    }
    ::_exit(rc);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// 0 when `f` throws a fusejit::Error whose message holds every one of `parts`.
int throws_error_with(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& p : parts) {
      if (what.find(p) == std::string::npos) return 2;
    }
    return 0;
  } catch (...) {
    return 3;
  }
  return 1;
}

// The config of a store under `dir` that holds the entries of `keys`.
cache::DiskStore::Config cache_with(const TempDir& dir, std::initializer_list<int> keys,
                                    test::CapturedLog& log) {
  const cache::DiskStore::Config c = config_for(dir);
  cache::DiskStore store(c, *log.logger);
  for (int k : keys) store.store(key_of(k), entry_of(k));
  return c;
}

}  // namespace

TEST_CASE("disk abuse: a stale (version 1) or foreign entry is a miss, then replaced",
          "[cache][disk][abuse]") {
  TempDir dir("stale");
  test::CapturedLog log;
  cache::DiskStore store(config_for(dir), *log.logger);
  store.store(key_of(1), entry_of(1));
  const fs::path path = store.entry_path(key_of(1));
  std::string bytes = test::read_bytes(path);
  bytes[4] = 1;  // the previous format version
  test::write_bytes(path, bytes);

  const auto problems = store.verify();
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0].what, ContainsSubstring("stale"));
  CHECK_FALSE(store.load(key_of(1)));
  CHECK_THAT(log.str(), ContainsSubstring("stale"));
  CHECK(store.store(key_of(1), entry_of(1)));
  CHECK(store.load(key_of(1)));

  // Another key's sound entry under this key's name: its stored key is checked.
  fs::create_directories(store.entry_path(key_of(2)).parent_path());
  fs::copy_file(store.entry_path(key_of(1)), store.entry_path(key_of(2)));
  CHECK_FALSE(store.load(key_of(2)));
  CHECK_THAT(log.str(), ContainsSubstring("key mismatch"));
  CHECK(store.writable());
}

TEST_CASE("disk abuse: a FIFO at an entry's path never blocks load, verify, stats or prune",
          "[cache][disk][abuse]") {
  TempDir dir("fifo");
  test::CapturedLog log;
  const cache::DiskStore::Config c = cache_with(dir, {1, 2}, log);
  const fs::path fifo = cache::DiskStore(c, *log.logger).entry_path(key_of(1));
  fs::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const int rc = in_child(
      [&] {
        test::CapturedLog child_log;
        cache::DiskStore store(c, *child_log.logger);
        if (store.load(key_of(1))) return 10;
        const auto problems = store.verify();
        if (problems.size() != 1 || problems[0].what.find("FIFO") == std::string::npos) return 11;
        if (store.stats().entries != 1) return 12;  // the FIFO is no entry
        if (store.prune().removed_unsound.size() != 1) return 13;
        // The next store writes a regular entry where the FIFO was.
        if (!store.store(key_of(1), entry_of(1)) || !store.load(key_of(1))) return 14;
        return store.writable() ? 0 : 15;
      },
      std::chrono::seconds(20));
  CHECK(rc == 0);
}

TEST_CASE("disk abuse: a symlinked entry is not followed, and nothing outside is touched",
          "[cache][disk][abuse]") {
  TempDir dir("symlink-entry");
  test::CapturedLog log;
  cache::DiskStore store(config_for(dir), *log.logger);
  store.store(key_of(2), entry_of(2));  // makes the cache directory
  // A sound entry for key 1, but outside the cache, linked in.
  const fs::path outside = dir.path() / "outside.fjk";
  test::write_bytes(outside, cache::encode_entry(key_of(1), entry_of(1)));
  const std::string original = test::read_bytes(outside);
  const fs::path path = store.entry_path(key_of(1));
  fs::create_directories(path.parent_path());
  fs::create_symlink(outside, path);

  CHECK_FALSE(store.load(key_of(1)));
  CHECK_THAT(log.str(), ContainsSubstring("symbolic link"));
  const auto problems = store.verify();
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].path == path);
  CHECK(store.stats().entries == 1);  // key 2 only: the link is no entry
  CHECK(store.store(key_of(1), entry_of(1)));  // replaces the link itself
  CHECK_FALSE(fs::is_symlink(path));
  CHECK(store.load(key_of(1)));
  CHECK(test::read_bytes(outside) == original);
}

TEST_CASE("disk abuse: a directory at an entry's path is repaired or fails that entry only",
          "[cache][disk][abuse]") {
  TempDir dir("dir-entry");
  test::CapturedLog log;
  cache::DiskStore store(config_for(dir), *log.logger);
  // An empty directory: removed, and the entry written.
  fs::create_directories(store.entry_path(key_of(1)));
  CHECK(store.store(key_of(1), entry_of(1)));
  CHECK(store.load(key_of(1)));
  CHECK(store.contains(key_of(1)));

  // One with something in it: the name is the store's, so it goes too (disk_hostile_test.cpp).
  const fs::path full = store.entry_path(key_of(2));
  fs::create_directories(full);
  test::write_bytes(full / "keep.txt", "mine");
  CHECK(store.store(key_of(2), entry_of(2)));
  CHECK(store.contains(key_of(2)));

  // A tree too deep to be fusejit's doing stays: that entry fails, clearly, and only it.
  const fs::path deep = store.entry_path(key_of(3));
  fs::path bottom = deep;
  for (int i = 0; i < 20; ++i) bottom /= "d";
  fs::create_directories(bottom);
  CHECK_FALSE(store.store(key_of(3), entry_of(3)));
  CHECK_FALSE(store.contains(key_of(3)));
  CHECK_THAT(log.str(), ContainsSubstring(deep.string()));
  CHECK_THAT(log.str(), ContainsSubstring("a directory"));
  CHECK(store.writable());
  CHECK(store.store(key_of(4), entry_of(4)));
  CHECK(store.load(key_of(4)));
  CHECK(fs::exists(bottom));
  CHECK(test::files_named(dir.str("cache"), ".tmp-") == 0);
  const auto problems = store.verify();
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0].what, ContainsSubstring("a directory"));
}

TEST_CASE("disk abuse: maintenance never follows a symlinked shard, clear removes only ours",
          "[cache][disk][abuse]") {
  TempDir dir("symlink-shard");
  test::CapturedLog log;
  cache::DiskStore::Config c = config_for(dir, 1);  // a cap of 1 byte: prune evicts all it sees
  cache::DiskStore store(c, *log.logger);
  store.store(key_of(1), entry_of(1));
  // Outside the cache, files with fusejit's names, and a shard that links to them.
  const fs::path outside = dir.path() / "outside";
  fs::create_directories(outside);
  const std::string hex = std::string(32, 'a');
  const std::vector<std::string> theirs = {hex + ".fjk", hex + ".lock", hex + ".fjk.tmp-1-2-3"};
  for (const std::string& name : theirs) test::write_bytes(outside / name, "not yours");
  const std::string link = key_of(1).shard() == "aa" ? "bb" : "aa";
  fs::create_symlink(outside, fs::path(c.dir) / link);
  // In a real shard, names that only look like fusejit's.
  const fs::path shard = store.entry_path(key_of(1)).parent_path();
  const std::vector<std::string> lookalikes = {hex + ".fjk.bak", "notes.fjk", hex + ".fjk.tmp-x",
                                               std::string(32, 'A') + ".fjk", hex + "0.lock"};
  for (const std::string& name : lookalikes) test::write_bytes(shard / name, "mine");

  CHECK(store.stats().entries == 1);
  CHECK(store.verify().empty());
  store.prune();
  CHECK(store.clear() == 0);  // prune evicted key 1 already
  for (const std::string& name : theirs) CHECK(fs::exists(outside / name));
  for (const std::string& name : lookalikes) CHECK(fs::exists(shard / name));
  CHECK(fs::is_symlink(fs::path(c.dir) / link));
}

TEST_CASE("disk abuse: file names fusejit owns, exactly", "[cache][disk][abuse]") {
  using cache::layout::classify;
  using cache::layout::FileKind;
  const std::string hex = "0123456789abcdef0123456789abcdef";
  CHECK(classify(hex + ".fjk") == FileKind::entry);
  CHECK(classify(hex + ".lock") == FileKind::lock);
  CHECK(classify(hex + ".fjk.tmp-12-34-5") == FileKind::temp);
  CHECK(classify(hex + ".fjk.tmp-") == FileKind::other);
  CHECK(classify(hex + ".fjk.tmp-1-x") == FileKind::other);
  CHECK(classify("0123456789ABCDEF0123456789abcdef.fjk") == FileKind::other);
  CHECK(classify("zz23456789abcdef0123456789abcdef.fjk") == FileKind::other);
  CHECK(classify("my.lock") == FileKind::other);
  CHECK(classify("README.fjk.tmp-1") == FileKind::other);
}

TEST_CASE("disk abuse: four writers at once keep the cap", "[cache][disk][abuse]") {
  TempDir dir("concurrent-cap");
  const uint64_t cap = 1 << 20;
  const size_t cubin = 30000;
  const int writers = 4, per_writer = 40;  // 4.6 MiB written into a 1 MiB cap
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      // A store per writer, as separate processes have: nothing shared but the directory.
      test::CapturedLog log;
      cache::DiskStore store(config_for(dir, cap), *log.logger);
      for (int i = 0; i < per_writer; ++i) {
        const int n = w * 1000 + i;
        store.store(key_of(n), entry_of(n, "sm_90", cubin));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const uint64_t total = test::entry_bytes(dir.str("cache"));
  INFO("total " << total << " cap " << cap);
  CHECK(total <= cap);
  CHECK(total > cap / 2);  // evicting is not emptying
}

TEST_CASE("disk abuse: FUSEJIT_CACHE_MAX_MB beyond 64-bit bytes is an error naming the maximum",
          "[cache][abuse]") {
  auto parse = [](const std::string& v) {
    return Options::parse({{"FUSEJIT_CACHE_MAX_MB", v}});
  };
  const std::string max = std::to_string(UINT64_MAX >> 20);  // 17592186044415
  CHECK(parse(max).cache_max_mb == static_cast<int64_t>(UINT64_MAX >> 20));
  for (const std::string v : {"17592186044416", "9223372036854775807", "99999999999999999999"}) {
    INFO(v);
    REQUIRE_THROWS_AS(parse(v), UsageError);
    REQUIRE_THROWS_WITH(parse(v), ContainsSubstring("FUSEJIT_CACHE_MAX_MB=" + v) &&
                                      ContainsSubstring("maximum is " + max));
  }
}

TEST_CASE("disk abuse: an unreadable cache directory or shard is an error, not an empty cache",
          "[cache][disk][abuse]") {
  TempDir dir("unreadable");
  test::CapturedLog log;
  const cache::DiskStore::Config c = cache_with(dir, {1}, log);
  const fs::path shard = fs::path(c.dir) / key_of(1).shard();
  for (const fs::path& locked : {fs::path(c.dir), shard}) {
    INFO(locked);
    fs::permissions(locked, fs::perms::none);
    const int rc = in_child(
        [&] {
          test::CapturedLog child_log;
          cache::DiskStore::Config look = c;
          look.create = false;
          cache::DiskStore store(look, *child_log.logger);
          const std::vector<std::string> says = {locked.string(), "Permission denied"};
          if (int r = throws_error_with([&] { store.verify(); }, says)) return 10 + r;
          if (int r = throws_error_with([&] { store.stats(); }, says)) return 20 + r;
          if (int r = throws_error_with([&] { store.prune(); }, {c.dir})) return 30 + r;
          if (int r = throws_error_with([&] { store.clear(); }, {c.dir})) return 40 + r;
          return 0;
        },
        std::chrono::seconds(20), true);
    fs::permissions(locked, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
    if (rc == kSkipped) {
      WARN("cannot drop root privileges: permissions are not checked");
      continue;
    }
    CHECK(rc == 0);
  }
}

TEST_CASE("disk abuse: a 100,000-character cache path is a clear error, shortened",
          "[cache][disk][abuse]") {
  const std::string dir = "/tmp/" + std::string(100000, 'x');
  test::CapturedLog log;
  cache::DiskStore::Config c;
  c.dir = dir;
  cache::DiskStore store(c, *log.logger);  // the runtime: memory only, one warning
  CHECK_FALSE(store.usable());
  CHECK(log.warnings() == 1);
  CHECK(log.str().size() < 1000);
  CHECK_THAT(log.str(), ContainsSubstring("File name too long"));
  CHECK_FALSE(store.load(key_of(1)));
  CHECK_FALSE(store.store(key_of(1), entry_of(1)));
  CHECK_FALSE(store.contains(key_of(1)));

  c.create = false;  // the maintenance commands
  cache::DiskStore look(c, *log.logger);
  for (const auto& action : std::vector<std::function<void()>>{
           [&] { look.stats(); }, [&] { look.verify(); }, [&] { look.prune(); },
           [&] { look.clear(); }}) {
    try {
      action();
      FAIL("no error");
    } catch (const UsageError& e) {
      const std::string what = e.what();
      CHECK(what.size() < 1000);
      CHECK_THAT(what, ContainsSubstring("File name too long"));
      CHECK_THAT(what, ContainsSubstring("100005 characters"));
    }
  }
  CHECK(cache::display_path(dir).size() < 200);
}
