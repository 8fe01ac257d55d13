// jit::KernelCache with the real NVRTC (no GPU needed): memory -> disk -> compile, the cache
// modes, FUSEJIT_REQUIRE_WARM, dumps, repair of damaged entries, an unusable directory, and
// eight processes compiling the same kernels into one directory at once.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>

#include "cache/disk_store.h"
#include "fusejit/error.h"
#include "jit/runtime/kernel_cache.h"
#include "support.h"

using namespace fusejit;
using Outcome = jit::KernelCache::Outcome;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

Options options_for(const std::string& cache_dir,
                    std::vector<std::pair<std::string, std::string>> more = {}) {
  more.emplace_back("FUSEJIT_CACHE_DIR", cache_dir);
  return Options::parse(more);
}

// jit::compile, counted.
struct CountingCompiler {
  std::shared_ptr<std::atomic<int>> count = std::make_shared<std::atomic<int>>(0);
  jit::KernelCache::Compiler fn() const {
    return [c = count](const templates::Kernel& k, std::string_view arch,
                       const jit::CompileOptions& options) {
      ++*c;
      return jit::compile(k, arch, options);
    };
  }
};

}  // namespace

TEST_CASE("KernelCache: memory, then disk, then NVRTC", "[cache][kernel_cache]") {
  TempDir dir("levels");
  test::CapturedLog log;
  const Options options = options_for(dir.str("cache"));
  const templates::Kernel k = test::tiny_kernel(1);

  jit::KernelCache first(options, *log.logger);
  Outcome how{};
  const jit::CompiledKernel compiled = first.get(k, "sm_90", &how);
  CHECK(how == Outcome::compiled);
  CHECK(compiled.name == k.name);
  CHECK_FALSE(compiled.cubin.empty());
  CHECK(compiled.ptx.empty());  // kept only when asked for (below)

  const jit::CompiledKernel again = first.get(k, "sm_90", &how);
  CHECK(how == Outcome::memory_hit);
  CHECK(again.cubin == compiled.cubin);

  jit::KernelCache second(options, *log.logger);  // another process, say
  const jit::CompiledKernel loaded = second.get(k, "sm_90", &how);
  CHECK(how == Outcome::disk_hit);
  CHECK(loaded.name == k.name);
  CHECK(loaded.cubin == compiled.cubin);
  CHECK(loaded.ptx == compiled.ptx);

  // Another arch is another entry.
  second.get(k, "sm_80", &how);
  CHECK(how == Outcome::compiled);
  CHECK(first.counts().compiled == 1);
  CHECK(first.counts().memory_hits == 1);
  CHECK(second.counts().disk_hits == 1);

  const cache::DiskStore::Stats s = second.disk()->stats();
  CHECK(s.entries == 2);
  CHECK(s.per_arch.at("sm_80").entries == 1);
  CHECK(s.lock_files == 0);
  CHECK(s.temp_files == 0);
  CHECK(second.disk()->verify().empty());
  CHECK(log.warnings() == 0);
}

TEST_CASE("KernelCache: the PTX is kept when asked for; an entry without it is compiled again",
          "[cache][kernel_cache]") {
  TempDir dir("ptx");
  test::CapturedLog log;
  const Options options = options_for(dir.str("cache"));
  const templates::Kernel k = test::tiny_kernel(7);
  Outcome how{};

  jit::KernelCache plain(options, *log.logger);
  plain.get(k, "sm_90", &how);
  CHECK(how == Outcome::compiled);
  const cache::KernelKey key = plain.key(k, "sm_90");
  auto stored_ptx = [&] {
    std::string problem;
    const auto e =
        cache::decode_entry(test::read_bytes(plain.disk()->entry_path(key)), key, &problem);
    REQUIRE(e);
    return e->ptx;
  };
  CHECK(stored_ptx().empty());

  // Asking for the PTX keeps the key (no NVRTC option changes) but not the entry without it.
  CountingCompiler count;
  jit::KernelCache with_ptx(options, *log.logger, count.fn(), /*keep_ptx=*/true);
  CHECK(with_ptx.key(k, "sm_90") == key);
  const jit::CompiledKernel c = with_ptx.get(k, "sm_90", &how);
  CHECK(how == Outcome::compiled);
  CHECK(*count.count == 1);
  CHECK_THAT(c.ptx, ContainsSubstring(".target sm_90"));
  CHECK_THAT(stored_ptx(), ContainsSubstring(".entry " + k.name));
  with_ptx.get(k, "sm_90", &how);
  CHECK(how == Outcome::memory_hit);

  // Now complete for both: the plain cache takes the entry with its PTX as it is.
  jit::KernelCache plain_again(options, *log.logger, count.fn());
  plain_again.get(k, "sm_90", &how);
  CHECK(how == Outcome::disk_hit);
  jit::KernelCache ptx_again(options, *log.logger, count.fn(), /*keep_ptx=*/true);
  ptx_again.get(k, "sm_90", &how);
  CHECK(how == Outcome::disk_hit);
  CHECK(*count.count == 1);

  // A virtual arch is PTX whatever is asked.
  const jit::CompiledKernel virt = plain.get(k, "compute_90", &how);
  CHECK(virt.cubin.empty());
  CHECK_THAT(virt.ptx, ContainsSubstring(".target sm_90"));
  CHECK(log.warnings() == 0);
}

TEST_CASE("KernelCache: FUSEJIT_NVRTC_OPTIONS reach NVRTC and the key", "[cache][kernel_cache]") {
  TempDir dir("nvrtc_options");
  test::CapturedLog log;
  const templates::Kernel k = test::tiny_kernel(11);
  std::vector<std::string> seen;
  const jit::KernelCache::Compiler spy = [&seen](const templates::Kernel& kernel,
                                                 std::string_view arch,
                                                 const jit::CompileOptions& options) {
    seen = options.extra;
    return jit::compile(kernel, arch, options);
  };
  jit::KernelCache plain(options_for(dir.str("cache")), *log.logger, spy);
  jit::KernelCache fast(
      options_for(dir.str("cache"), {{"FUSEJIT_NVRTC_OPTIONS", " --Ofast-compile=mid  "}}),
      *log.logger, spy);
  CHECK(plain.key(k, "sm_90") != fast.key(k, "sm_90"));  // other SASS: another entry
  Outcome how{};
  plain.get(k, "sm_90", &how);
  CHECK(how == Outcome::compiled);
  CHECK(seen.empty());
  const jit::CompiledKernel c = fast.get(k, "sm_90", &how);
  CHECK(how == Outcome::compiled);  // not the plain entry
  CHECK(seen == std::vector<std::string>{"--Ofast-compile=mid"});
  CHECK_FALSE(c.cubin.empty());

  // An option NVRTC does not know fails the compile, naming the options (FUSEJIT_NVRTC_OPTIONS
  // refuses it before that: test/cache/env_test.cpp).
  REQUIRE_THROWS_WITH(jit::compile(k, "sm_90", {.extra = {"--no-such"}}),
                      ContainsSubstring("--no-such"));
}

TEST_CASE("KernelCache: FUSEJIT_CACHE=memory writes nothing, =off compiles every time",
          "[cache][kernel_cache]") {
  TempDir dir("modes");
  test::CapturedLog log;
  const templates::Kernel k = test::tiny_kernel(2);
  Outcome how{};

  CountingCompiler memory_count;
  jit::KernelCache memory(options_for(dir.str("cache"), {{"FUSEJIT_CACHE", "memory"}}), *log.logger,
                          memory_count.fn());
  CHECK(memory.disk() == nullptr);
  memory.get(k, "sm_90", &how);
  CHECK(how == Outcome::compiled);
  memory.get(k, "sm_90", &how);
  CHECK(how == Outcome::memory_hit);
  CHECK(*memory_count.count == 1);
  CHECK_FALSE(fs::exists(dir.str("cache")));

  CountingCompiler off_count;
  jit::KernelCache off(options_for(dir.str("cache"), {{"FUSEJIT_CACHE", "off"}}), *log.logger,
                       off_count.fn());
  for (int i = 0; i < 3; ++i) {
    off.get(k, "sm_90", &how);
    CHECK(how == Outcome::compiled);
  }
  CHECK(*off_count.count == 3);
  CHECK_FALSE(fs::exists(dir.str("cache")));
}

TEST_CASE("KernelCache: FUSEJIT_REQUIRE_WARM fails loudly on a would-be compile",
          "[cache][kernel_cache]") {
  TempDir dir("warm");
  test::CapturedLog log;
  const templates::Kernel k = test::tiny_kernel(3);
  jit::KernelCache strict(options_for(dir.str("cache"), {{"FUSEJIT_REQUIRE_WARM", "1"}}),
                          *log.logger);
  try {
    strict.get(k, "sm_90");
    FAIL("a compile under FUSEJIT_REQUIRE_WARM=1 did not throw");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK_THAT(message, ContainsSubstring(k.name));
    CHECK_THAT(message, ContainsSubstring("sm_90"));
    CHECK_THAT(message, ContainsSubstring("fusejit warm"));
    CHECK_THAT(message, ContainsSubstring("FUSEJIT_REQUIRE_WARM"));
  }
  CHECK(test::files_named(dir.str("cache"), ".lock") == 0);

  // Once warmed (by another KernelCache, as `fusejit warm` would), the strict one is content.
  jit::KernelCache warmer(options_for(dir.str("cache")), *log.logger);
  warmer.get(k, "sm_90");
  Outcome how{};
  strict.get(k, "sm_90", &how);
  CHECK(how == Outcome::disk_hit);
  CHECK_THROWS_AS(strict.get(k, "sm_80"), Error);  // warmed for sm_90 only

  jit::KernelCache strict_off(
      options_for(dir.str("cache"), {{"FUSEJIT_REQUIRE_WARM", "1"}, {"FUSEJIT_CACHE", "off"}}),
      *log.logger);
  CHECK_THROWS_WITH(strict_off.get(k, "sm_90"), ContainsSubstring("FUSEJIT_CACHE=off"));
}

TEST_CASE("KernelCache: FUSEJIT_DUMP=cuda,ptx writes each kernel's source and PTX",
          "[cache][kernel_cache]") {
  TempDir dir("dump");
  test::CapturedLog log;
  const templates::Kernel k = test::tiny_kernel(4);
  const Options options = options_for(
      dir.str("cache"), {{"FUSEJIT_DUMP", "cuda,ptx"}, {"FUSEJIT_DUMP_DIR", dir.str("dump")}});
  jit::KernelCache compiling(options, *log.logger);
  compiling.get(k, "sm_90");
  CHECK(test::read_bytes(dir.path() / "dump" / (k.name + ".cu")) == k.source);
  CHECK_THAT(test::read_bytes(dir.path() / "dump" / (k.name + ".ptx")),
             ContainsSubstring(".entry " + k.name));

  // A kernel loaded from disk is dumped too.
  fs::remove_all(dir.path() / "dump");
  jit::KernelCache loading(options, *log.logger);
  Outcome how{};
  loading.get(k, "sm_90", &how);
  CHECK(how == Outcome::disk_hit);
  CHECK(fs::exists(dir.path() / "dump" / (k.name + ".cu")));
  CHECK(fs::exists(dir.path() / "dump" / (k.name + ".ptx")));

  // Only what was asked for.
  TempDir only("dump-ptx");
  jit::KernelCache ptx_only(
      options_for(only.str("cache"),
                  {{"FUSEJIT_DUMP", "ptx"}, {"FUSEJIT_DUMP_DIR", only.str("dump")}}),
      *log.logger);
  ptx_only.get(k, "sm_90");
  CHECK(fs::exists(only.path() / "dump" / (k.name + ".ptx")));
  CHECK_FALSE(fs::exists(only.path() / "dump" / (k.name + ".cu")));
}

TEST_CASE("KernelCache: a damaged entry is compiled again and rewritten, with a warning",
          "[cache][kernel_cache]") {
  TempDir dir("damaged");
  test::CapturedLog log;
  const Options options = options_for(dir.str("cache"));
  const templates::Kernel a = test::tiny_kernel(5), b = test::tiny_kernel(6);
  {
    jit::KernelCache kc(options, *log.logger);
    kc.get(a, "sm_90");
    kc.get(b, "sm_90");
  }
  jit::KernelCache kc(options, *log.logger);
  const fs::path pa = kc.disk()->entry_path(kc.key(a, "sm_90"));
  const fs::path pb = kc.disk()->entry_path(kc.key(b, "sm_90"));
  test::truncate_file(pa);
  test::flip_byte(pb, 100);
  CHECK(kc.disk()->verify().size() == 2);

  Outcome how{};
  kc.get(a, "sm_90", &how);
  CHECK(how == Outcome::compiled);
  kc.get(b, "sm_90", &how);
  CHECK(how == Outcome::compiled);
  CHECK(log.warnings() == 2);
  CHECK_THAT(log.str(), ContainsSubstring(pa.string()));
  CHECK_THAT(log.str(), ContainsSubstring(pb.string()));
  CHECK(kc.disk()->verify().empty());

  jit::KernelCache after(options, *log.logger);
  after.get(b, "sm_90", &how);
  CHECK(how == Outcome::disk_hit);
}

TEST_CASE("KernelCache: an unusable cache directory degrades to memory only",
          "[cache][kernel_cache]") {
  TempDir dir("nodir");
  test::write_bytes(dir.path() / "afile", "a file, not a folder");
  test::CapturedLog log;
  CountingCompiler count;
  jit::KernelCache kc(options_for(dir.str("afile/cache")), *log.logger, count.fn());
  REQUIRE(kc.disk() != nullptr);
  CHECK_FALSE(kc.disk()->usable());
  Outcome how{};
  for (int i = 0; i < 3; ++i) kc.get(test::tiny_kernel(7), "sm_90", &how);
  CHECK(how == Outcome::memory_hit);
  kc.get(test::tiny_kernel(8), "sm_90", &how);
  CHECK(how == Outcome::compiled);
  CHECK(*count.count == 2);
  CHECK(log.warnings() == 1);
}

TEST_CASE("KernelCache: a kernel that does not compile throws and leaves nothing behind",
          "[cache][kernel_cache]") {
  TempDir dir("broken");
  test::CapturedLog log;
  templates::Kernel k = test::tiny_kernel(9);
  k.source += "this is not CUDA;\n";
  jit::KernelCache kc(options_for(dir.str("cache")), *log.logger);
  CHECK_THROWS_WITH(kc.get(k, "sm_90"), ContainsSubstring(k.name));
  CHECK(kc.disk()->stats().entries == 0);
  CHECK(test::files_named(dir.str("cache"), ".lock") == 0);
  CHECK(test::files_named(dir.str("cache"), ".tmp-") == 0);
}

TEST_CASE("KernelCache: 8 processes at once compile each kernel once", "[cache][kernel_cache]") {
  TempDir dir("procs");
  constexpr int kProcesses = 8;
  constexpr int kKernels = 6;
  int go[2];
  REQUIRE(::pipe(go) == 0);
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // The child: wait for the start signal (the pipe closing), then obtain every kernel in
      // the same order as the others, so that they collide on every one. Exit status: how many
      // it compiled; 200 on any error.
      ::close(go[1]);
      char c;
      while (::read(go[0], &c, 1) > 0) {
      }
      int compiled = 0;
      try {
        test::CapturedLog log;
        jit::KernelCache kc(options_for(dir.str("cache")), *log.logger);
        for (int i = 0; i < kKernels; ++i) {
          Outcome how{};
          kc.get(test::tiny_kernel(100 + i), "sm_90", &how);
          compiled += how == Outcome::compiled;
        }
        if (log.warnings() != 0) ::_exit(201);
      } catch (...) {
        ::_exit(200);
      }
      ::_exit(compiled);
    }
    children.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);  // go
  int total = 0;
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    INFO("child exit status " << WEXITSTATUS(status));
    CHECK(WEXITSTATUS(status) <= kKernels);
    total += WEXITSTATUS(status) <= kKernels ? WEXITSTATUS(status) : 0;
  }
  // Each kernel compiled once over all eight (the lock, then a second look at the store).
  CHECK(total == kKernels);

  test::CapturedLog log;
  cache::DiskStore::Config c;
  c.dir = dir.str("cache");
  c.create = false;
  cache::DiskStore store(c, *log.logger);
  CHECK(store.verify().empty());
  const auto s = store.stats();
  CHECK(s.entries == kKernels);
  CHECK(s.temp_files == 0);
  CHECK(s.lock_files == 0);
}

TEST_CASE("KernelCache: the memory level keeps FUSEJIT_KERNELS_MAX kernels", "[cache][kernel_cache]") {
  TempDir dir("memory-cap");
  test::CapturedLog log;
  const templates::Kernel a = test::tiny_kernel(1), b = test::tiny_kernel(2);
  Outcome how{};
  SECTION("memory only: a forgotten kernel is compiled again") {
    jit::KernelCache cache(options_for(dir.str("cache"), {{"FUSEJIT_CACHE", "memory"},
                                                          {"FUSEJIT_KERNELS_MAX", "1"}}),
                           *log.logger);
    cache.get(a, "sm_90", &how);
    CHECK(how == Outcome::compiled);
    cache.get(b, "sm_90", &how);  // a is forgotten
    CHECK(how == Outcome::compiled);
    cache.get(b, "sm_90", &how);
    CHECK(how == Outcome::memory_hit);
    cache.get(a, "sm_90", &how);
    CHECK(how == Outcome::compiled);
    CHECK(cache.counts().compiled == 3);
    CHECK(cache.counts().memory_evictions == 2);
  }
  SECTION("with the disk store: a forgotten kernel comes back from disk") {
    jit::KernelCache cache(options_for(dir.str("cache"), {{"FUSEJIT_KERNELS_MAX", "1"}}),
                           *log.logger);
    cache.get(a, "sm_90");
    cache.get(b, "sm_90");
    cache.get(a, "sm_90", &how);
    CHECK(how == Outcome::disk_hit);
    cache.get(a, "sm_90", &how);
    CHECK(how == Outcome::memory_hit);
    CHECK(cache.counts().compiled == 2);
    CHECK(cache.counts().memory_evictions == 2);
  }
  SECTION("the default keeps both") {
    jit::KernelCache cache(options_for(dir.str("cache"), {{"FUSEJIT_CACHE", "memory"}}),
                           *log.logger);
    cache.get(a, "sm_90");
    cache.get(b, "sm_90");
    cache.get(a, "sm_90", &how);
    CHECK(how == Outcome::memory_hit);
    CHECK(cache.counts().memory_evictions == 0);
  }
  CHECK(log.warnings() == 0);
}
