// `fusejit warm` and `fusejit cache`, run as a user runs them: the seed traces warmed into an
// empty directory, warmed again, damaged, verified and repaired; several archs; errors; dumps;
// eight warms at once into one directory.
#include <regex>

#include "support.h"

using namespace fusejit;
using test::CliResult;
using test::run_cli;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kTraces = std::string(FUSEJIT_SOURCE_DIR) + "/examples/traces";

std::string trace(const std::string& name) { return kTraces + "/" + name + ".trace"; }

struct Summary {
  int compiled = -1, cached = -1, failed = -1;
};

// The last line must be exactly `compiled: N  cached: M  failed: K`.
Summary summary(const CliResult& r) {
  std::string out = r.out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const std::string last = out.substr(out.rfind('\n') + 1);
  std::smatch m;
  INFO(r.out);
  REQUIRE(
      std::regex_match(last, m, std::regex(R"(compiled: (\d+)  cached: (\d+)  failed: (\d+))")));
  return {std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3])};
}

std::vector<fs::path> entries_in(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& f : fs::recursive_directory_iterator(dir)) {
    if (f.path().extension() == ".fjk") out.push_back(f.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool has_line_starting(const std::string& text, const std::string& start) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(start, 0) == 0) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("warm: the seed traces, again, damaged, verified, repaired, dumped, cleared",
          "[cache][cli]") {
  TempDir dir("cli");
  const std::string cache_dir = dir.str("cache");
  const std::string warm = "warm --arch sm_90 --cache-dir " + cache_dir + " " + kTraces;
  int traces = 0;
  for (const auto& f : fs::directory_iterator(kTraces)) traces += f.path().extension() == ".trace";
  REQUIRE(traces > 0);

  // Into an empty directory: everything compiles; one line per trace.
  CliResult r = run_cli(warm);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const Summary first = summary(r);
  CHECK(first.compiled > 0);
  CHECK(first.cached == 0);
  CHECK(first.failed == 0);
  CHECK(test::count(r.out, ".trace: ") == traces);
  const int n = first.compiled;
  REQUIRE(entries_in(cache_dir).size() == static_cast<size_t>(n));

  // Again: nothing compiles.
  r = run_cli(warm);
  REQUIRE(r.status == 0);
  const Summary second = summary(r);
  CHECK(second.compiled == 0);
  CHECK(second.cached == n);
  CHECK(second.failed == 0);

  r = run_cli("cache verify --cache-dir " + cache_dir);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, ContainsSubstring("0 unsound"));

  r = run_cli("cache stats --cache-dir " + cache_dir);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, ContainsSubstring(fmt::format("entries: {} ", n)));
  CHECK_THAT(r.out, ContainsSubstring(fmt::format("sm_90: {} entries", n)));

  // Damage two entries: verify names each on its own line and fails.
  const std::vector<fs::path> entries = entries_in(cache_dir);
  REQUIRE(entries.size() >= 2);
  const fs::path truncated = entries.front(), flipped = entries.back();
  test::truncate_file(truncated);
  test::flip_byte(flipped, 1000);
  r = run_cli("cache verify --cache-dir " + cache_dir);
  CHECK(r.status != 0);
  CHECK(has_line_starting(r.out, truncated.string() + ": truncated"));
  CHECK(has_line_starting(r.out, flipped.string() + ": payload checksum mismatch"));
  CHECK_THAT(r.out, ContainsSubstring("2 unsound"));

  // The next warm recompiles exactly those two, warning about each.
  r = run_cli(warm);
  CHECK(r.status == 0);
  const Summary repaired = summary(r);
  CHECK(repaired.compiled == 2);
  CHECK(repaired.cached == n - 2);
  CHECK(repaired.failed == 0);
  CHECK_THAT(r.out, ContainsSubstring(truncated.string()));
  CHECK_THAT(r.out, ContainsSubstring(flipped.string()));
  r = run_cli("cache verify --cache-dir " + cache_dir);
  CHECK(r.status == 0);

  // FUSEJIT_DUMP=cuda,ptx: a .cu and a .ptx per kernel, for kernels loaded from disk too. The
  // entries have no PTX (kept only when asked for), so this warm compiles them again, with it;
  // the next finds them complete.
  const std::string dump = dir.str("dump");
  r = run_cli(warm, "FUSEJIT_DUMP=cuda,ptx FUSEJIT_DUMP_DIR=" + dump);
  CHECK(r.status == 0);
  CHECK(summary(r).compiled == n);
  fs::remove_all(dump);
  r = run_cli(warm, "FUSEJIT_DUMP=cuda,ptx FUSEJIT_DUMP_DIR=" + dump);
  CHECK(r.status == 0);
  CHECK(summary(r).cached == n);
  CHECK(test::files_named(dump, ".cu") == n);
  CHECK(test::files_named(dump, ".ptx") == n);
  for (const auto& f : fs::directory_iterator(dump)) {
    CHECK(f.path().filename().string().rfind("fj_", 0) == 0);  // named by the kernel
  }

  // Under a cap of 1 MB: enough new entries (sm_80 builds of distinct seed kernels; the naive
  // softmax plans to the same kernel as softmax, so it is not listed) to push the
  // directory past the cap, but fewer than the cap holds, so the least recently used old
  // entries make room for all of the new ones, and the directory stays under the cap.
  uint64_t old_bytes = 0;
  for (const fs::path& p : entries_in(cache_dir)) old_bytes += fs::file_size(p);
  const uint64_t cap = 1u << 20, entry = old_bytes / static_cast<uint64_t>(n);
  REQUIRE(old_bytes < cap);
  const int more = static_cast<int>((cap - old_bytes) / entry) + 3;
  REQUIRE(static_cast<uint64_t>(more) * entry < cap * 3 / 4);
  std::string extra;
  int picked = 0;
  for (const char* name : {"ew_chain_f32", "softmax_f32", "layernorm_f32", "rmsnorm_f32",
                           "sumsq_f32", "long_chain_f32", "bias_gelu_f32",
                           "add_layernorm_f32", "ew_chain_bf16", "softmax_bf16",
                           "layernorm_bf16", "rmsnorm_bf16", "sumsq_bf16", "long_chain_bf16"}) {
    if (picked == more) break;
    extra += fmt::format(" {}", trace(name));
    ++picked;
  }
  REQUIRE(picked == more);
  r = run_cli("warm --arch sm_80 --cache-dir " + cache_dir + extra, "FUSEJIT_CACHE_MAX_MB=1");
  CHECK(r.status == 0);
  CHECK(summary(r).compiled == more);
  uint64_t bytes = 0;
  for (const fs::path& p : entries_in(cache_dir)) bytes += fs::file_size(p);
  CHECK(bytes <= cap);
  CHECK(entries_in(cache_dir).size() < static_cast<size_t>(n + more));
  r = run_cli("warm --arch sm_80 --cache-dir " + cache_dir + extra, "FUSEJIT_CACHE_MAX_MB=1");
  CHECK(summary(r).cached == more);  // the new ones stayed
  r = run_cli(warm);              // the evicted ones come back
  CHECK(summary(r).failed == 0);
  CHECK(summary(r).compiled > 0);

  const size_t before_prune = entries_in(cache_dir).size();
  r = run_cli("cache prune --cache-dir " + cache_dir);
  CHECK(r.status == 0);
  CHECK(entries_in(cache_dir).size() == before_prune);
  r = run_cli("cache clear --cache-dir " + cache_dir);
  CHECK(r.status == 0);
  CHECK(entries_in(cache_dir).empty());
  r = run_cli("cache stats --cache-dir " + cache_dir);
  CHECK_THAT(r.out, ContainsSubstring("entries: 0 "));
}

TEST_CASE("warm: a trace that draws random numbers compiles once for every seed",
          "[cache][cli][random]") {
  // dropout(x, 0.5) as recorded: the key is an input, so one kernel serves every seed. A trace
  // in the key's attribute spelling of earlier builds, with another seed, needs the same kernel.
  TempDir dir("cli-random");
  const std::string cache_dir = dir.str("cache");
  const std::string rest =
      "%3 : f32[] = const 0.5\n%4 : bool[64,128] = lt %2, %3\n%5 : f32[] = const 2\n"
      "%6 : f32[64,128] = mul %0, %5\n%7 : f32[] = const 0\n"
      "%8 : f32[64,128] = where %4, %6, %7\noutput %8\n";
  const std::string keyed = dir.str("dropout.trace");
  test::write_bytes(keyed, "fusejit-trace 1\n%0 : f32[64,128] = input\n%1 : i64[2] = input\n"
                           "%2 : f32[64,128] = rand %1\n" + rest);
  const std::string attributes = dir.str("dropout_seed99.trace");
  test::write_bytes(attributes, "fusejit-trace 1\n%0 : f32[64,128] = input\n"
                                "%2 : f32[64,128] = rand seed=99 offset=3\n" + rest);
  CliResult r = run_cli("warm --arch sm_90 --cache-dir " + cache_dir + " " + keyed);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(summary(r).compiled == 1);
  r = run_cli("warm --arch sm_90 --cache-dir " + cache_dir + " " + attributes);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(summary(r).compiled == 0);
  CHECK(summary(r).cached == 1);
}

TEST_CASE("warm: several archs, FUSEJIT_ARCH, failures and bad arguments", "[cache][cli]") {
  TempDir dir("cli-args");
  const std::string cache_dir = dir.str("cache");
  const std::string one = trace("softmax_f32");  // one kernel

  CliResult r = run_cli("warm --arch sm_80,sm_90 --cache-dir " + cache_dir + " " + one);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(summary(r).compiled == 2);
  r = run_cli("warm --cache-dir " + cache_dir + " " + one, "FUSEJIT_ARCH=sm_86");
  CHECK(summary(r).compiled == 1);
  r = run_cli("cache stats --cache-dir " + cache_dir);
  for (const char* arch : {"sm_80: 1 entries", "sm_86: 1 entries", "sm_90: 1 entries"}) {
    CHECK_THAT(r.out, ContainsSubstring(arch));
  }
  // --arch repeated, and spelled --arch=LIST, adds to the list.
  r = run_cli("warm --arch sm_80 --arch=sm_86,sm_90 --cache-dir " + dir.str("repeated") + " " +
              one);
  CHECK(r.status == 0);
  CHECK(summary(r).compiled == 3);
  // The cache directory from the environment, as a run would use it.
  r = run_cli("warm --arch sm_90 " + one, "FUSEJIT_CACHE_DIR=" + cache_dir);
  CHECK(summary(r).cached == 1);

  // A trace that does not parse fails, the others still warm, the exit status says so.
  const std::string bad = dir.str("bad.trace");
  test::write_bytes(bad,
                    "fusejit-trace 1\n%0 : f32[4] = input\n%1 : f32[4] = mull %0, %0\noutput %1\n");
  r = run_cli("warm --arch sm_90 --cache-dir " + cache_dir + " " + bad + " " +
              trace("rmsnorm_f32"));
  CHECK(r.status == 1);
  const Summary s = summary(r);
  CHECK(s.failed == 1);
  CHECK(s.compiled == 1);
  CHECK(has_line_starting(r.out, bad + ": failed"));

  // A bad --arch is a usage error (2); the same in FUSEJIT_ARCH a failure (1).
  r = run_cli("warm --arch bogus --cache-dir " + cache_dir + " " + one);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, ContainsSubstring("--arch bogus"));
  r = run_cli("warm --arch sm_1 --cache-dir " + cache_dir + " " + one);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, ContainsSubstring("--arch sm_1: unknown GPU arch 'sm_1'"));
  r = run_cli("warm --arch sm_10 --cache-dir " + cache_dir + " " + one);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, ContainsSubstring("cannot target sm_10"));
  r = run_cli("warm --cache-dir " + cache_dir + " " + one, "FUSEJIT_ARCH=sm_1");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, ContainsSubstring("sm_1"));
  r = run_cli("warm --cache-dir " + cache_dir + " " + dir.str("nothing-here"));
  CHECK(r.status == 1);
  CHECK_THAT(r.out, ContainsSubstring("nothing-here"));
  r = run_cli("warm --arch sm_90 " + one, "FUSEJIT_CACHE=off");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, ContainsSubstring("FUSEJIT_CACHE=off"));
  test::write_bytes(dir.path() / "afile", "x");
  r = run_cli("warm --arch sm_90 --cache-dir " + dir.str("afile/cache") + " " + one);
  CHECK(r.status == 1);
  CHECK_THAT(r.out, ContainsSubstring("afile/cache"));
  r = run_cli("warm");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, ContainsSubstring("fusejit warm: error: PATH is required"));

  r = run_cli("cache frobnicate --cache-dir " + cache_dir);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, ContainsSubstring("unknown action 'frobnicate'"));
  // The cache directory named before the action works too.
  r = run_cli("cache --cache-dir " + cache_dir + " stats");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, ContainsSubstring("cache directory: " + cache_dir + " (read-write)"));
  r = run_cli("cache verify --cache-dir " + dir.str("never-made"));
  CHECK(r.status == 0);
  CHECK_FALSE(fs::exists(dir.str("never-made")));
}

TEST_CASE("warm: kernels that could not be written are failures", "[cache][cli]") {
  TempDir dir("cli-nowrite");
  const std::string cache_dir = dir.str("cache");
  // Every shard directory's name taken by a regular file: no entry can be written.
  std::filesystem::create_directories(cache_dir);
  const std::string hex = "0123456789abcdef";
  for (char a : hex) {
    for (char b : hex) test::write_bytes(fs::path(cache_dir) / std::string{a, b}, "x");
  }
  const CliResult r =
      run_cli("warm --arch sm_90 --cache-dir " + cache_dir + " " + trace("softmax_f32"));
  INFO(r.out);
  CHECK(r.status == 1);
  CHECK(summary(r).failed == 1);
  CHECK(test::count(r.out, "warning") == 1);
  CHECK_THAT(r.out, ContainsSubstring("writing it failed"));
}

TEST_CASE("warm: eight warms at once into one directory", "[cache][cli]") {
  TempDir dir("cli-concurrent");
  const std::string cache_dir = dir.str("cache");
  std::string traces;
  for (const char* name : {"ew_chain_f32", "bias_gelu_bf16", "softmax_bf16", "layernorm_f32",
                           "sumsq_f32", "mlp_bf16"}) {
    traces += fmt::format(" {}", trace(name));
  }
  const std::string cmd = testing::isolated_cli_env() +
                          " " FUSEJIT_CLI " warm --arch sm_90 --cache-dir " + cache_dir + traces +
                          " 2>&1";
  std::vector<FILE*> running;
  for (int i = 0; i < 8; ++i) {
    FILE* p = ::popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    running.push_back(p);
  }
  int compiled = 0;
  for (FILE* p : running) {
    CliResult r;
    std::array<char, 4096> buf{};
    size_t got = 0;
    while ((got = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), got);
    const int status = ::pclose(p);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    INFO(r.out);
    CHECK(r.status == 0);
    const Summary s = summary(r);
    CHECK(s.failed == 0);
    compiled += s.compiled;
  }
  const CliResult after = run_cli("warm --arch sm_90 --cache-dir " + cache_dir + traces);
  const Summary s = summary(after);
  CHECK(s.compiled == 0);
  // Every kernel compiled once over all eight processes.
  CHECK(compiled == s.cached);
  const CliResult verify = run_cli("cache verify --cache-dir " + cache_dir);
  CHECK(verify.status == 0);
  CHECK(test::files_named(cache_dir, ".lock") == 0);
  CHECK(test::files_named(cache_dir, ".tmp-") == 0);
}

TEST_CASE("warm and cache: a shard that links out of the cache leaves everything there alone",
          "[cache][cli][hostile]") {
  TempDir dir("cli-hostile-shard");
  const std::string cache_dir = dir.str("cache");
  const std::string warm =
      "warm --arch sm_90 --cache-dir " + cache_dir + " " + trace("softmax_f32");
  REQUIRE(run_cli(warm).status == 0);
  const std::vector<fs::path> entries = entries_in(cache_dir);
  REQUIRE(entries.size() == 1);
  // The kernel's shard moves out of the cache, with a lock file of its name, and is linked in.
  const fs::path shard = entries[0].parent_path();
  const fs::path outside = dir.path() / "outside" / shard.filename();
  fs::create_directories(outside.parent_path());
  fs::rename(shard, outside);
  const std::string key = entries[0].stem().string();
  test::write_bytes(outside / (key + ".lock"), "");
  test::set_age(outside / (key + ".lock"), std::chrono::hours(1));
  test::set_age(outside / entries[0].filename(), std::chrono::hours(1));
  fs::create_symlink(outside, shard);
  auto state = [&] {
    std::string s;
    for (const auto& f : fs::directory_iterator(outside)) {
      s += fmt::format("{} {} {}\n", f.path().string(), test::read_bytes(f.path()).size(),
                       fs::last_write_time(f.path()).time_since_epoch().count());
    }
    return s;
  };
  const std::string before = state();

  const CliResult r = run_cli(warm);
  INFO(r.out);
  CHECK(summary(r).failed == 1);  // it cannot be written: its shard is not a directory
  CHECK_THAT(r.out, ContainsSubstring("a symbolic link stands there"));
  for (const char* action : {"stats", "verify", "prune", "clear"}) {
    run_cli(std::string("cache ") + action + " --cache-dir " + cache_dir);
  }
  CHECK(state() == before);
  CHECK(fs::is_symlink(shard));
}

TEST_CASE("warm: under a cap smaller than what it warms, it evicts instead of failing",
          "[cache][cli]") {
  TempDir dir("cli-tiny-cap");
  const std::string cache_dir = dir.str("cache");
  // With their PTX, the seed traces' kernels take about 1 MB per arch: two archs take twice
  // the cap, written by 8 threads at once.
  const CliResult r =
      run_cli("warm -j 8 --ptx --arch sm_80,sm_90 --cache-dir " + cache_dir + " " + kTraces,
              "FUSEJIT_CACHE_MAX_MB=1");
  INFO(r.out);
  CHECK(r.status == 0);
  const Summary s = summary(r);
  CHECK(s.failed == 0);
  CHECK(s.compiled > 0);
  CHECK_THAT(r.out, ContainsSubstring("were evicted again to keep"));
  CHECK_THAT(r.out, ContainsSubstring("raise FUSEJIT_CACHE_MAX_MB"));
  uint64_t bytes = 0;
  for (const fs::path& p : entries_in(cache_dir)) bytes += fs::file_size(p);
  CHECK(bytes <= (uint64_t{1} << 20) * 102 / 100);
}

TEST_CASE("cache stats: what an entry says about itself is printed escaped",
          "[cache][cli][hostile]") {
  TempDir dir("cli-escape");
  const std::string cache_dir = dir.str("cache");
  const cache::KernelKey key = test::key_of(7);
  fs::create_directories(fs::path(cache_dir) / key.shard());
  cache::Entry e = test::entry_of(7, "sm_\x1b]0;owned\x07\x1b[2J90");
  test::write_bytes(fs::path(cache_dir) / key.shard() / (key.hex() + ".fjk"),
                    cache::encode_entry(key, e));
  CliResult r = run_cli("cache stats --cache-dir " + cache_dir);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find('\x1b') == std::string::npos);
  CHECK_THAT(r.out, ContainsSubstring("sm_\\x1b]0;owned\\x07\\x1b[2J90: 1 entries"));
  // A path with control bytes, and a variable's value, the same.
  const std::string odd = dir.str("odd\x1b[31mdir");
  r = run_cli("cache stats --cache-dir '" + odd + "'");
  CHECK(r.out.find('\x1b') == std::string::npos);
  CHECK_THAT(r.out, ContainsSubstring("odd\\x1b[31mdir"));
  r = run_cli("cache stats --cache-dir " + cache_dir, "FUSEJIT_CACHE=$(printf 'x\\033[2J')");
  CHECK(r.status == 1);
  CHECK(r.out.find('\x1b') == std::string::npos);
  CHECK_THAT(r.out, ContainsSubstring("FUSEJIT_CACHE=x\\x1b[2J"));
}
